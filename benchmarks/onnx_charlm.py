"""The char LM's forward in onnxruntime (and OpenVINO) against the native module, side by
side in one process (docs/onnx.md's speed rows):

    python -m benchmarks.onnx_charlm [--reps 30] [--threads 2] [--hidden 256] [--seq 35]
                                     [--openvino] [--loops]

For each batch size (1 and 32), the model of examples/charlm.mdl exported by
`codegen.export_onnx` with the native model's own parameters runs the same inputs as the
native module's `forward` (`training` off), the runtimes timed in turn (a pause before
each turn, so that none finds another's threads still spinning); the medians and their
ratios to mdl's are printed as a Markdown table, with the CPU's name. Needs onnx and
onnxruntime; `--openvino` adds OpenVINO's CPU plugin (f32, one stream, latency hint).
The export's LSTM is ONNX's `LSTM` node; `--loops` times each runtime on the export with
every `for` a `Loop` too (`export_onnx(..., rnn_ops=False)`), as a column `... Loop`."""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.machine import describe
from codegen import export_onnx, load
from codegen.export.verify import session

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
    ap.add_argument("--threads", type=int, default=2, help="threads of each")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--seq", type=int, default=35)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    ap.add_argument("--openvino", action="store_true", help="time OpenVINO too")
    ap.add_argument("--loops", action="store_true",
                    help="time the export with every `for` a `Loop` too")
    args = ap.parse_args()

    module = load(CHARLM, defines={"H": args.hidden}, name=f"charlm_bench_h{args.hidden}")
    module.set_num_threads(args.threads)
    model = module.CharLM(seed=0)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        files = {"": True, " Loop": False} if args.loops else {"": True}
        paths = {kind: export_onnx(CHARLM, Path(tmp) / f"charlm{int(rnn)}.onnx",
                                   model="CharLM", defines={"H": args.hidden}, params=model,
                                   rnn_ops=rnn) for kind, rnn in files.items()}
        sessions = {name + kind: session(path, runtime, args.threads)
                    for name, runtime in [("onnxruntime", "onnxruntime"),
                                          ("OpenVINO", "openvino")]
                    if runtime == "onnxruntime" or args.openvino
                    for kind, path in paths.items()}
        runtimes = {name: run for name, (run, _) in sessions.items()}
        for batch in args.batches:
            rng = np.random.default_rng(batch)
            tokens = rng.integers(0, 96, (args.seq + 1, batch)).astype(np.int32)
            feeds = {"tokens": tokens[:-1], "targets": tokens[1:],
                     "lengths": np.full(batch, args.seq, np.int32)}
            runs = {"mdl": lambda: model.forward(**feeds)}
            runs.update((name, lambda run=run: run(feeds)) for name, run in runtimes.items())
            want = runs["mdl"]()["logits"]
            errors = [float(np.abs(np.asarray(runs[name]()["logits"]) - want).max()
                            / np.abs(want).max()) for name in runtimes]
            calls = max(1, 64 // batch)
            for run in runs.values():  # warm each
                timed(run, 3, calls)
            times: dict[str, list[float]] = {name: [] for name in runs}
            for _ in range(args.reps):  # in turn, so that all see the same machine
                for name, run in runs.items():
                    time.sleep(0.3)  # the others' idle threads stop spinning first
                    times[name] += timed(run, 1, calls)
            rows.append((batch, {n: float(np.median(t)) for n, t in times.items()},
                         max(errors)))
    versions = "; ".join(dict.fromkeys(version for _, version in sessions.values()))
    print(f"CPU: {describe()}, {args.threads} threads; {versions}; CharLM "
          f"forward, T={args.seq}, H={args.hidden}, V=96, E=32 (median of {args.reps})\n")
    print("| B | mdl native | " + " | ".join(f"{n} | {n} / mdl" for n in runtimes)
          + " | max logits difference |")
    print("| --- " * (3 + 2 * len(runtimes)) + "|")
    for batch, ms, error in rows:
        cells = " | ".join(f"{ms[n]:.3f} ms | {ms[n] / ms['mdl']:.2f}x" for n in runtimes)
        print(f"| {batch} | {ms['mdl']:.3f} ms | {cells} | {error:.1e} |")


if __name__ == "__main__":
    main()
