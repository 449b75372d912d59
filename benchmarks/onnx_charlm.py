"""The char LM's forward in onnxruntime against the native module, side by side in one
process (docs/onnx.md's speed row):

    python -m benchmarks.onnx_charlm [--reps 30] [--threads 2] [--hidden 256] [--seq 35]

For each batch size (1 and 32), the model of examples/charlm.mdl exported by
`codegen.export_onnx` with the native model's own parameters runs the same inputs as the
native module's `forward` (`training` off), the two timed in alternation (a pause before
each turn, so that neither finds the other's threads still spinning); the medians and
their ratio are printed as a Markdown table, with the CPU's name. Needs onnx and
onnxruntime."""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import onnxruntime

from benchmarks.machine import describe
from codegen import export_onnx, load

ROOT = Path(__file__).resolve().parents[1]
CHARLM = ROOT / "examples" / "charlm.mdl"


def timed(run, reps: int, calls: int) -> list[float]:
    """ms per call, `reps` times over `calls` calls in a row."""
    out = []
    for _ in range(reps):
        start = time.perf_counter()
        for _ in range(calls):
            run()
        out.append((time.perf_counter() - start) * 1e3 / calls)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--threads", type=int, default=2, help="threads of both")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--seq", type=int, default=35)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    args = ap.parse_args()

    module = load(CHARLM, defines={"H": args.hidden}, name=f"charlm_bench_h{args.hidden}")
    module.set_num_threads(args.threads)
    model = module.CharLM(seed=0)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = args.threads
    options.inter_op_num_threads = 1
    # threads that spin between calls would take the cores from the native module's turn
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = export_onnx(CHARLM, Path(tmp) / "charlm.onnx", model="CharLM",
                           defines={"H": args.hidden}, params=model)
        session = onnxruntime.InferenceSession(str(path), options,
                                               providers=["CPUExecutionProvider"])
        for batch in args.batches:
            rng = np.random.default_rng(batch)
            tokens = rng.integers(0, 96, (args.seq + 1, batch)).astype(np.int32)
            feeds = {"tokens": tokens[:-1], "targets": tokens[1:],
                     "lengths": np.full(batch, args.seq, np.int32)}
            native = lambda: model.forward(**feeds)  # noqa: E731
            ort = lambda: session.run(None, feeds)  # noqa: E731
            got = dict(zip([o.name for o in session.get_outputs()], ort()))
            want = native()
            error = float(np.abs(got["logits"] - want["logits"]).max()
                          / np.abs(want["logits"]).max())
            calls = max(1, 64 // batch)
            for run in (native, ort):  # warm both
                timed(run, 3, calls)
            mdl_ms, ort_ms = [], []
            for _ in range(args.reps):  # alternate, so that both see the same machine
                for run, times in ((native, mdl_ms), (ort, ort_ms)):
                    time.sleep(0.3)  # the other's idle threads stop spinning first
                    times += timed(run, 1, calls)
            rows.append((batch, float(np.median(mdl_ms)), float(np.median(ort_ms)), error))
    print(f"CPU: {describe()}, {args.threads} threads; onnxruntime "
          f"{onnxruntime.__version__}; CharLM forward, T={args.seq}, H={args.hidden}, V=96, "
          f"E=32 (median of {args.reps})\n")
    print("| B | mdl native | onnxruntime | onnxruntime / mdl | max logits difference |")
    print("| --- | --- | --- | --- | --- |")
    for batch, mdl, ort, error in rows:
        print(f"| {batch} | {mdl:.3f} ms | {ort:.3f} ms | {ort / mdl:.2f}x | {error:.1e} |")


if __name__ == "__main__":
    main()
