"""The main job: build the char-level LM of examples/charlm.mdl natively, train it with the
module's own Adam on the Python standard library's source code, save a checkpoint, and
sample text through the one-character model `CharLMStep` running on the trained weights.

    python3 examples/train_charlm.py                      # about a minute on 2 cores
    python3 examples/train_charlm.py --steps 20000 --hidden 256   # a longer run
    python3 examples/train_charlm.py --resume --steps 2000        # go on from the checkpoint
    torchrun --nproc_per_node=2 examples/train_charlm.py --distributed  # 2 processes

Writes into --out (default runs/charlm): checkpoint.npz and losses.csv (every --save-every
steps, and at the end), schedule.json (where the learning rate's decay ends, which --resume
keeps), samples.txt, and loss.png when matplotlib is installed. Ctrl-C (or
SIGTERM) stops after the step under way, saves, and prints the command that goes on. The
batches of step s come from a generator seeded with (seed, s), so a resumed run trains on
exactly the batches an unbroken run would.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import sys
import sysconfig
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from codegen import load

HERE = Path(__file__).resolve().parent  # its .mdl file lies beside it

VOCAB = 96  # printable ASCII (32..126) as 0..94, newline as 95; anything else is '?'
NEWLINE = 95


def encode(text: str) -> np.ndarray:
    codes = np.frombuffer(text.encode("ascii", "replace"), np.uint8).astype(np.int32)
    codes = np.where(codes == 9, 32, codes)  # a tab reads as a space
    out = np.where(codes == 10, NEWLINE, codes - 32)
    return np.where((out < 0) | (out >= VOCAB), ord("?") - 32, out).astype(np.int32)


def decode(codes) -> str:
    return "".join("\n" if c == NEWLINE else chr(int(c) + 32) for c in codes)


def corpus(source: Path | None, limit: int) -> tuple[str, str]:
    """Up to `limit` characters of text, and where it came from: the standard library's
    own modules (every Python installation has them) unless --corpus names a file or a
    directory of .py/.md/.txt files."""
    root = source or Path(sysconfig.get_paths()["stdlib"])
    files = [root] if root.is_file() else sorted(
        p for p in root.iterdir() if p.suffix in (".py", ".md", ".txt") and p.is_file())
    parts, size = [], 0
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        parts.append(text)
        size += len(text)
        if size >= limit:
            break
    if not parts:
        raise SystemExit(f"no text found in {root}")
    origin = str(root) if root.is_file() else f"{len(parts)} files of {root}"
    return "\n".join(parts)[:limit], origin


def batch(data: np.ndarray, seed: int, step: int, seq: int, size: int) -> dict:
    """`size` random windows of `seq` characters: tokens [T, B] and next characters."""
    starts = np.random.default_rng([seed, step]).integers(0, len(data) - seq - 1, size)
    window = np.stack([data[s:s + seq + 1] for s in starts], axis=1)
    return {"tokens": window[:-1], "targets": window[1:],
            "lengths": np.full(size, seq, np.int32)}


def evaluate(model, data: np.ndarray, seq: int, size: int) -> float:
    """Mean loss over held-out text, in non-overlapping windows, `size` at a time (all
    there are at once where they are fewer: a held-out text of under `size` windows was
    a NaN loss)."""
    size = min(size, (len(data) - 1) // seq)
    count = (len(data) - 1) // seq // size if size else 0
    losses = []
    for k in range(count):
        starts = (np.arange(size) + k * size) * seq
        window = np.stack([data[s:s + seq + 1] for s in starts], axis=1)
        out = model.forward(tokens=window[:-1], targets=window[1:],
                            lengths=np.full(size, seq, np.int32))
        losses.append(float(out["loss"]))
    return float(np.mean(losses)) if losses else float("nan")


def sample(step_model, hidden: int, prime: str, length: int, temperature: float,
           seed: int) -> str:
    """`prime`, then `length` characters drawn one at a time from the model's softmax at
    `temperature` (seeded), the state carried from call to call."""
    rng = np.random.default_rng(seed)
    h = np.zeros((1, hidden), np.float32)
    c = np.zeros((1, hidden), np.float32)
    codes = list(encode(prime))
    for code in codes[:-1]:
        out = step_model.forward(token=np.array([code], np.int32), h=h, c=c)
        h, c = out["h_out"], out["c_out"]
    for _ in range(length):
        out = step_model.forward(token=np.array([codes[-1]], np.int32), h=h, c=c)
        h, c = out["h_out"], out["c_out"]
        logits = out["logits"][0].astype(np.float64) / temperature
        p = np.exp(logits - logits.max())
        codes.append(int(rng.choice(VOCAB, p=p / p.sum())))
    return decode(codes)


def plot(losses: list[tuple[int, float, float]], path: Path) -> bool:
    """The loss curve as a PNG, when matplotlib is installed."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    steps, train, held = zip(*losses)
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(steps, train, label="training batches")
    points = [(s, v) for s, v in zip(steps, held) if v == v]  # NaN: not evaluated there
    if points:
        ax.plot(*zip(*points), "o-", label="held-out text")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats per character)")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def read_losses(path: Path) -> list[tuple[int, float, float]]:
    if not path.exists():
        return []
    rows = [line.split(",") for line in path.read_text().splitlines()[1:] if line]
    return [(int(s), float(a), float(b)) for s, a, b in rows]


def write_whole(path: Path, text: str) -> None:
    """Written beside and renamed into place, as save() writes the checkpoint: a run killed
    while writing leaves the previous file whole."""
    part = path.with_name(path.name + ".part")
    part.write_text(text)
    part.replace(path)


def write_losses(path: Path, losses: list[tuple[int, float, float]]) -> None:
    write_whole(path, "step,loss,held_out_loss\n" +
                "".join(f"{s},{a:.6f},{b:.6f}\n" for s, a, b in losses))


def save(trainer, out: Path, losses: list[tuple[int, float, float]]) -> None:
    """The losses first: a crash between the two leaves rows past the checkpoint's step,
    which --resume drops."""
    if trainer.rank == 0:
        write_losses(out / "losses.csv", losses)
    trainer.save(out / "checkpoint.npz")


# Ctrl-C, and SIGTERM: what `timeout`, `kill`, systemd, Kubernetes and Slurm send to stop
# a job, which ended the run where it stood, losing the steps since the last save
STOPPING = (signal.SIGINT, signal.SIGTERM)


def stop_on_signals(stop: list) -> dict:
    """From here on Ctrl-C or SIGTERM asks training to stop after the step under way, noted
    in `stop`. The handler runs between steps (inside a paused call for Ctrl-C:
    docs/native.md#ctrl-c) and only notes the request, so the call goes on and the run is
    saved in one place, never in the middle of another save. Returns the handlers it
    replaces, by signal."""
    return {s: signal.signal(s, lambda signum, frame: stop.append(signum)) for s in STOPPING}


def arguments() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=1000, help="train until this step")
    ap.add_argument("--hidden", type=int, default=128, help="LSTM width H")
    ap.add_argument("--seq", type=int, default=64, help="characters per sequence (T)")
    ap.add_argument("--batch", type=int, default=32, help="sequences per step (B)")
    ap.add_argument("--lr", type=float, default=3e-3, help="Adam's learning rate, decayed "
                    "along a cosine to a tenth of it by --decay-steps")
    ap.add_argument("--decay-steps", type=int, help="where the decay ends (default: with "
                    "--resume, the resumed run's end; else --steps)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--corpus", type=Path, help="a text file or directory to train on")
    ap.add_argument("--chars", type=int, default=2_000_000, help="corpus size limit")
    ap.add_argument("--out", type=Path, default=Path("runs/charlm"))
    ap.add_argument("--resume", action="store_true", help="go on from OUT/checkpoint.npz")
    ap.add_argument("--save-every", type=int, default=100, metavar="N",
                    help="save the checkpoint and losses every N steps")
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--sample", type=int, default=400, help="characters to generate")
    ap.add_argument("--prime", default="def ", help="text the sample starts from")
    ap.add_argument("--distributed", action="store_true", help="data-parallel over the "
                    "processes torchrun starts (torch.distributed, gloo): each takes an equal "
                    "share of every batch")
    args = ap.parse_args()
    if args.distributed and "RANK" not in os.environ:  # before a build and the corpus
        ap.error("--distributed runs in the processes torchrun starts, which tell it their "
                 "ranks: torchrun --nproc_per_node=2 examples/train_charlm.py --distributed")
    if args.decay_steps is not None and args.decay_steps < 1:
        ap.error(f"--decay-steps takes a number of steps, at least 1, not {args.decay_steps}")
    if args.save_every < 1:
        ap.error(f"--save-every takes a number of steps, at least 1, not {args.save_every}")
    if args.resume and not (args.out / "checkpoint.npz").is_file():  # before a build
        sys.exit(f"--resume: no checkpoint at {args.out / 'checkpoint.npz'} to go on from "
                 "(leave --resume out to start a run there)")
    return args


def decay_steps(args: argparse.Namespace) -> tuple[int, bool]:
    """Where the learning rate's cosine ends, and whether it is the resumed run's: given
    (--decay-steps); else, on --resume, where the run being resumed set it (OUT/schedule.json);
    else --steps. A run resumed with a larger --steps so goes on at the rate it ended with:
    the cosine recomputed over the new --steps raised the rate 5.5 times at its first step."""
    saved = args.out / "schedule.json"
    if args.decay_steps is not None:
        return args.decay_steps, False
    if args.resume and saved.is_file():
        try:
            steps = json.loads(saved.read_text())["decay_steps"]
        except (ValueError, KeyError, TypeError) as bad:  # a file damaged or not ours
            sys.exit(f"--resume: {saved}: not a schedule ({type(bad).__name__}: {bad}); give "
                     "--decay-steps, or remove the file to decay over --steps")
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            sys.exit(f"--resume: {saved}: decay_steps {steps!r} is no number of steps; give "
                     "--decay-steps, or remove the file to decay over --steps")
        return steps, True
    return args.steps, False


def whole_batch(loss: float, distributed: bool) -> float:
    """The loss of the whole batch from this rank's share of it: the ranks' mean (their
    shares hold as many characters each), what one process would report."""
    if not distributed:
        return loss
    import torch
    import torch.distributed as dist
    total = torch.tensor([loss], dtype=torch.float64)
    dist.all_reduce(total)
    return float(total) / dist.get_world_size()


class Local:
    """One process: what DataParallel offers, for the model alone."""
    rank, world = 0, 1

    def __init__(self, model):
        self.model = model

    def train_step(self, **inputs):
        return self.model.train_step(**inputs)

    def save(self, path):
        self.model.save(path)

    def load(self, path):
        self.model.load(path)


def main() -> None:
    args = arguments()
    args.out.mkdir(parents=True, exist_ok=True)
    checkpoint, log = args.out / "checkpoint.npz", args.out / "losses.csv"
    print(f"building examples/charlm.mdl with H={args.hidden} ...", flush=True)
    start = time.time()
    charlm = load(HERE / "charlm.mdl", defines={"H": args.hidden},
                  name=f"charlm_h{args.hidden}")
    print(f"built in {time.time() - start:.1f}s", flush=True)

    text, origin = corpus(args.corpus, args.chars)
    data = encode(text)
    split = int(len(data) * 0.95)
    train, held_out = data[:split], data[split:]
    if len(train) < args.seq + 2 or len(held_out) < args.seq + 1:  # "high <= 0" in batch()
        sys.exit(f"the text ({origin}) holds {len(data):,} characters, too few for --seq "
                 f"{args.seq}: the training text needs {args.seq + 2} at least and the "
                 f"held-out 5% {args.seq + 1} (give more with --corpus or --chars, or a "
                 "smaller --seq)")
    print(f"corpus: {len(data):,} characters from {origin}; the last 5% held out")

    model = charlm.CharLM(seed=args.seed)
    model.set_optimizer("adam", lr=args.lr, clip_norm=5.0)
    if args.distributed:
        import torch.distributed as dist

        from codegen.distributed import DataParallel
        dist.init_process_group("gloo")
        trainer = DataParallel(model)  # rank 0's initial weights everywhere
        if args.batch % trainer.world:
            raise SystemExit(f"--batch {args.batch} does not split over {trainer.world} ranks")
    else:
        trainer = Local(model)
    share = args.batch // trainer.world
    rows = slice(trainer.rank * share, (trainer.rank + 1) * share)
    losses: list[tuple[int, float, float]] = []
    if args.resume:
        try:
            trainer.load(checkpoint)  # parameters, Adam's moments and its step count
        except ValueError as unfit:  # not a checkpoint, or another --hidden's
            sys.exit(f"--resume: {unfit}")
        done = model.optimizer["steps"]
        if done >= args.steps:  # as Lightning's fit at max_steps: it says so, and ends well
            if trainer.rank == 0:
                print(f"--resume: {checkpoint} is at step {done} and --steps is {args.steps}: "
                      f"nothing to train (give --steps past {done} to go on)")
            if args.distributed:
                dist.destroy_process_group()
            return
        losses = [row for row in read_losses(log) if row[0] <= done]
        print(f"resumed from {checkpoint} at step {done}")
    horizon, kept = decay_steps(args)
    if kept and horizon != args.steps and trainer.rank == 0:
        print(f"the learning rate decays over the first {horizon} steps, as the run began "
              "(--decay-steps sets another end)")
    if trainer.rank == 0:
        write_whole(args.out / "schedule.json", json.dumps({"decay_steps": horizon}) + "\n")
    first = model.optimizer["steps"] + 1
    stop: list = []
    if not args.distributed:  # ranks would stop at different steps: signals stay torchrun's
        previous = stop_on_signals(stop)
    if trainer.rank == 0:
        print(f"training to step {args.steps}, saving into {args.out} every "
              f"{args.save_every} steps" + ("" if args.distributed else
                                            "; Ctrl-C or SIGTERM stops and saves"), flush=True)

    recent: list[float] = []
    # redrawn twice a second in a terminal; a line every ten seconds in a log
    bar = tqdm(range(first, args.steps + 1), initial=first - 1, total=args.steps,
               unit="step", dynamic_ncols=True, mininterval=0.5 if sys.stderr.isatty() else 10,
               disable=trainer.rank != 0)
    begin = time.time()
    for step in bar:
        model.lr = args.lr * (0.55 + 0.45 * np.cos(np.pi * min(step / horizon, 1.0)))
        whole = batch(train, args.seed, step, args.seq, args.batch)
        out = trainer.train_step(**{k: v[:, rows] if v.ndim == 2 else v[rows]
                                    for k, v in whole.items()})
        recent.append(float(out["loss"]))
        if step % 25 == 0 or step == args.steps:
            rate = (step - first + 1) * args.seq * args.batch / (time.time() - begin)
            due = step % 250 == 0 or step == args.steps
            held = evaluate(model, held_out[:20_000], args.seq, args.batch) \
                if due and trainer.rank == 0 else float("nan")
            loss = whole_batch(float(np.mean(recent)), args.distributed)
            losses.append((step, loss, held))
            bar.set_postfix(loss=f"{loss:.3f}", chars_per_s=f"{rate:,.0f}")
            recent = []
        stopping = bool(stop)  # once: a signal between the save and the break is not lost
        if stopping or step % args.save_every == 0 or step == args.steps:
            save(trainer, args.out, losses)
        if stopping:
            break
    bar.close()
    if not args.distributed:  # Ctrl-C or SIGTERM while sampling stops it at once
        for number, handler in previous.items():
            signal.signal(number, handler)

    if stop:
        again = sys.argv if args.resume else [*sys.argv, "--resume"]
        print(f"stopped at step {model.optimizer['steps']}: saved {checkpoint}\n"
              f"to go on: python3 {shlex.join(again)}")
        sys.exit(128 + stop[0])  # as a shell reports a program the signal ended: 130, 143
    if args.distributed:
        import torch.distributed as dist
        dist.destroy_process_group()
    if trainer.rank != 0:
        return  # rank 0 reports and samples
    if losses:
        final = losses[-1]
        print(f"step {final[0]}: loss {final[1]:.3f} on training batches, {final[2]:.3f} on "
              f"held-out text (uniform guessing: {np.log(VOCAB):.3f})")
    print(f"saved {checkpoint}")

    generator = charlm.CharLMStep(params=model)  # the trained weights, one char at a time
    text = sample(generator, args.hidden, args.prime, args.sample, args.temperature,
                  args.seed)
    (args.out / "samples.txt").write_text(text + "\n")
    print(f"--- a sample (temperature {args.temperature}) ---\n{text}\n---")
    if plot(losses, args.out / "loss.png"):
        print(f"loss curve: {args.out / 'loss.png'}")


if __name__ == "__main__":
    main()
