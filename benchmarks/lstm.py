"""LSTM benchmark: the LSTM of the tests (std/rnn.mdl's `lstm` in a `for`), compiled by
mdl, against torch.nn.LSTM (2 threads, oneDNN), measured side by side in one run.

    python3 benchmarks/lstm.py [--reps 30]

Prints a Markdown table of medians (ms) and the ratio ours/torch; lower is better.
"""
from __future__ import annotations

import argparse
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from codegen import load

MODEL = """
import "std/rnn.mdl"
model Bench(H = {H}) {{
  input xs : f32[T, B, H]; input weights : f32[T, B, H]
  h = zeros[B, H]
  c = zeros[B, H]
  hs = for x in xs {{
    h, c = lstm(x, h, c)
    yield h
  }}
  output loss = sum(hs * weights)
  minimize loss
}}
"""
T = 35
CASES = [(1, 128), (32, 256)]


def median_ms(fn, reps: int) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def ours(B: int, H: int, reps: int, xs, w) -> tuple[float, float]:
    path = Path(tempfile.mkdtemp()) / f"bench_h{H}.mdl"
    path.write_text(MODEL.format(H=H))
    model = load(path, specialize=[{"T": T, "B": B}]).Bench(seed=0)

    def step():
        model.forward(xs=xs, weights=w, training=True)
        model.backward()
    return (median_ms(lambda: model.forward(xs=xs, weights=w), reps), median_ms(step, reps))


def torch_lstm(B: int, H: int, reps: int, xs, w) -> tuple[float, float]:
    import torch
    torch.set_num_threads(2)
    lstm = torch.nn.LSTM(H, H)
    x, wt = torch.from_numpy(xs), torch.from_numpy(w)

    def forward():
        with torch.no_grad():
            lstm(x)

    def step():
        lstm.zero_grad()
        hs, _ = lstm(x)
        (hs * wt).sum().backward()
    return median_ms(forward, reps), median_ms(step, reps)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=30)
    args = ap.parse_args()
    import torch
    print(f"T={T}, float32, {platform.processor() or platform.machine()}, "
          f"torch {torch.__version__} ({torch.get_num_threads()} -> 2 threads), "
          f"median of {args.reps}\n")
    print("| B | H | pass | mdl ms | torch ms | mdl/torch |")
    print("| --- | --- | --- | --- | --- | --- |")
    rng = np.random.default_rng(0)
    for B, H in CASES:
        xs = rng.standard_normal((T, B, H)).astype(np.float32)
        w = rng.standard_normal((T, B, H)).astype(np.float32)
        mine = ours(B, H, args.reps, xs, w)
        theirs = torch_lstm(B, H, args.reps, xs, w)
        for name, a, b in zip(("forward", "training step"), mine, theirs):
            print(f"| {B} | {H} | {name} | {a:.3f} | {b:.3f} | {a / b:.2f} |", flush=True)


if __name__ == "__main__":
    main()
