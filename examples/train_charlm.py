"""The main job: build the char-level LM (examples/charlm.mdl) natively and train it for a
short while on this repository's own documentation, printing progress and the loss.

    python3 examples/train_charlm.py [--steps 300] [--hidden 128]
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from codegen import load

ROOT = Path(__file__).resolve().parents[1]
VOCAB = 96  # printable ASCII (32..126) and newline


def corpus() -> np.ndarray:
    text = "\n".join(p.read_text(encoding="utf-8") for p in sorted((ROOT / "docs").glob("*.md")))
    codes = np.frombuffer(text.encode("ascii", "replace"), np.uint8).astype(np.int32)
    codes = np.where(codes == 10, 95, codes - 32)
    return np.clip(codes, 0, VOCAB - 1).astype(np.int32)


def batches(data: np.ndarray, steps: int, batch: int, rng: np.random.Generator):
    """tokens [T, B], the next characters as targets, and lengths (all full here)."""
    starts = rng.integers(0, len(data) - steps - 1, batch)
    window = np.stack([data[s:s + steps + 1] for s in starts], axis=1)
    return window[:-1], window[1:], np.full(batch, steps, np.int32)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--batch", type=int, default=16)
    args = ap.parse_args()
    print(f"building examples/charlm.mdl with H={args.hidden} ...", flush=True)
    start = time.time()
    charlm = load(ROOT / "examples" / "charlm.mdl", defines={"H": args.hidden},
                  name=f"charlm_h{args.hidden}")
    print(f"built in {time.time() - start:.1f}s", flush=True)
    model = charlm.CharLM(seed=0)
    data = corpus()
    rng = np.random.default_rng(0)
    model.set_optimizer("adam", lr=3e-3, clip_norm=5.0)  # native: forward, backward, update
    start, recent = time.time(), []
    for step in range(1, args.steps + 1):
        tokens, targets, lengths = batches(data, args.seq, args.batch, rng)
        out = model.train_step(tokens=tokens, targets=targets, lengths=lengths)
        recent.append(float(out["loss"]))
        if step % 25 == 0 or step == 1:
            rate = step / (time.time() - start)
            print(f"step {step:4d}  loss {np.mean(recent):.3f}  ({rate:.0f} steps/s)",
                  flush=True)
            recent = []
    print(f"done: {len(data)} characters of docs, final loss {out['loss']:.3f} "
          f"(uniform guessing: {np.log(VOCAB):.3f})")


if __name__ == "__main__":
    main()
