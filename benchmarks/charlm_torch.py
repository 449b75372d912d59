"""The char LM trained by mdl and by PyTorch side by side: the same model (embedding, LSTM
with torch's gate order, linear decoder), the same initial weights (mdl's, copied into
torch), the same batches, Adam with the same options, clipping and learning-rate schedule.
Prints the loss of both every 50 steps and draws both curves in docs/charlm_vs_pytorch.png.

    python3 -m pip install torch==2.13.0 matplotlib
    python3 benchmarks/charlm_torch.py [--steps 1000] [--hidden 128]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

from codegen import load

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
import train_charlm as job  # noqa: E402  (the main job's corpus, batches and plot)


class TorchCharLM(torch.nn.Module):
    """examples/charlm.mdl's CharLM in PyTorch, its weights taken from an mdl model."""

    def __init__(self, params: dict):
        super().__init__()
        V, E = params["embedding"].shape
        H = params["lstm/U"].shape[0]
        self.embedding = torch.nn.Embedding(V, E)
        self.lstm = torch.nn.LSTM(E, H)
        self.decoder = torch.nn.Linear(H, V)
        with torch.no_grad():  # mdl multiplies x @ W; torch stores W transposed
            self.embedding.weight.copy_(torch.from_numpy(params["embedding"]))
            self.lstm.weight_ih_l0.copy_(torch.from_numpy(params["lstm/W"].T))
            self.lstm.weight_hh_l0.copy_(torch.from_numpy(params["lstm/U"].T))
            self.lstm.bias_ih_l0.copy_(torch.from_numpy(params["lstm/b"]))
            self.lstm.bias_hh_l0.zero_()
            self.decoder.weight.copy_(torch.from_numpy(params["decoder/W"].T))
            self.decoder.bias.copy_(torch.from_numpy(params["decoder/b"]))

    def forward(self, tokens, targets):
        hs, _ = self.lstm(self.embedding(tokens))
        logits = self.decoder(hs)
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                 targets.reshape(-1))


def schedule(args, step: int) -> float:
    return args.lr * (0.55 + 0.45 * np.cos(np.pi * min(step / args.steps, 1.0)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "charlm_vs_pytorch.png")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    text, origin = job.corpus(None, 2_000_000)
    data = job.encode(text)[: int(len(text) * 0.95)]
    charlm = load(ROOT / "examples" / "charlm.mdl", defines={"H": args.hidden},
                  name=f"charlm_h{args.hidden}")
    ours = charlm.CharLM(seed=args.seed)
    ours.set_optimizer("adam", lr=args.lr, clip_norm=5.0)
    theirs = TorchCharLM({k: v.copy() for k, v in ours.params.items()})
    adam = torch.optim.Adam(theirs.parameters(), lr=args.lr)

    first = job.batch(data, args.seed, 1, args.seq, args.batch)
    with torch.no_grad():
        want = float(theirs(torch.from_numpy(first["tokens"]).long(),
                            torch.from_numpy(first["targets"]).long()))
    got = float(ours.forward(**first)["loss"])
    assert abs(got - want) < 1e-4, f"the two models differ before training: {got} vs {want}"

    rows, seconds = [], {"mdl": 0.0, "torch": 0.0}
    print(f"corpus: {origin}; H={args.hidden}, T={args.seq}, B={args.batch}, "
          f"{args.threads} threads\n\n| step | mdl loss | torch loss |\n| --- | --- | --- |")
    for step in range(1, args.steps + 1):
        b = job.batch(data, args.seed, step, args.seq, args.batch)
        lr = schedule(args, step)
        start = time.perf_counter()
        ours.lr = lr
        a = float(ours.train_step(**b)["loss"])
        seconds["mdl"] += time.perf_counter() - start
        start = time.perf_counter()
        for group in adam.param_groups:
            group["lr"] = lr
        adam.zero_grad()
        loss = theirs(torch.from_numpy(b["tokens"]).long(), torch.from_numpy(b["targets"]).long())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(theirs.parameters(), 5.0)
        adam.step()
        seconds["torch"] += time.perf_counter() - start
        rows.append((step, a, loss.item()))
        if step % 50 == 0:
            window = np.array(rows[-50:])
            print(f"| {step} | {window[:, 1].mean():.4f} | {window[:, 2].mean():.4f} |",
                  flush=True)
    last = np.array(rows[-100:])
    print(f"\nmean loss over the last 100 steps: mdl {last[:, 1].mean():.4f}, torch "
          f"{last[:, 2].mean():.4f} (difference {last[:, 1].mean() - last[:, 2].mean():+.4f}; "
          f"step-to-step standard deviation {last[:, 1].std():.4f})")
    print(f"time in training steps: mdl {seconds['mdl']:.1f} s, torch {seconds['torch']:.1f} s")
    plot(rows, args.out)


def plot(rows, path: Path) -> None:
    try:
        import matplotlib
    except ImportError:
        print(f"matplotlib is not installed: {path} is not drawn "
              "(python3 -m pip install matplotlib)")
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    data = np.array(rows)
    k = 25  # a moving mean over k steps, so the two curves can be told apart
    smooth = lambda y: np.convolve(y, np.ones(k) / k, mode="valid")  # noqa: E731
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(data[k - 1:, 0], smooth(data[:, 1]), label="mdl (native Adam)")
    ax.plot(data[k - 1:, 0], smooth(data[:, 2]), "--", label="PyTorch 2.13 (torch.optim.Adam)")
    ax.set_xlabel("step")
    ax.set_ylabel(f"training loss, mean of {k} steps")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
