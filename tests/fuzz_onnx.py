"""The differential fuzzer's programs (tests/fuzz_generate.py) exported to ONNX and run by
onnxruntime, OpenVINO (its CPU plugin, f32 asked for) or onnx's reference evaluator (the
ONNX spec in NumPy), against mdl's reference interpreter. Each program is exported and
compiled once, and its two cases (fuzz_compare.case_dims) run in turn on that one
compiled model, as an application calls a deployed model: OpenVINO has given a later
call an earlier call's values (docs/onnx.md, "OpenVINO on random programs").

    python3 tests/fuzz_onnx.py --seeds 0-9 [--runtime openvino|onnx-reference] [--dtype f64]
                               [--narrow] [--size large] [--keep DIR]

prints each failing program's name and what differs, then a summary; exit status 1 when a
program fails. `--narrow` keeps the i32 inputs within ±1000 (OpenVINO computes i32 Div,
Mod and ReduceMax through f32, exact below 2^24 only). tests/test_onnx.py runs some
programs in onnxruntime in the suite.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
from fuzz_compare import PRECISIONS, case_dims, case_inputs, differences, stream
from fuzz_generate import generate
from fuzz_source import Program, module_source

from codegen.export import export_onnx
from codegen.export.verify import session
from codegen.reference import interpreter as reference
from dsl import check_file

NARROW = 1000


def run_program(program: Program, folder: Path, runtime: str = "onnxruntime",
                dtype: str = "f64", narrow: bool = False) -> list[tuple[dict, dict]]:
    """(case dims, differences) for each case of `program` whose outputs differ from the
    reference's; cases outside the program's domain (a non-finite reference) are passed
    over."""
    path = folder / f"{program.name}.mdl"
    path.write_text(module_source([program]))
    graph = check_file(str(path), model=program.name, dtype=dtype).graph
    float_type = np.float64 if dtype == "f64" else np.float32
    params = {name: (0.5 * stream(program.seed, "param", name).standard_normal(
        [d.value for d in p.value.type.shape])).astype(float_type)
        for name, p in graph.params.items()}
    out = export_onnx(path, folder / f"{program.name}.onnx", model=program.name,
                      params=params, dtype=dtype)
    run, _ = session(out, runtime)
    failures = []
    for case in case_dims(program.seed):
        inputs = case_inputs(graph, case, program.lengths, program.seed, dtype)
        if narrow:
            inputs = {k: np.clip(v, -NARROW, NARROW).astype(v.dtype)
                      if v.dtype == np.int32 else v for k, v in inputs.items()}
        try:
            want = reference.run(graph, inputs, params, dtype=float_type)
        except ValueError as e:  # an assert this call fails: an ONNX model does not check
            if " is false" not in str(e):
                raise
            continue
        if not all(np.all(np.isfinite(a)) for a in want.values()):
            continue  # outside the program's domain (a log of a negative): nothing to say
        got = {k: v for k, v in run(inputs).items() if k in graph.outputs}
        diff = differences(got, want, tolerance=PRECISIONS[dtype].tolerance)
        if diff:
            failures.append((case, diff))
    return failures


def seeds(text: str) -> list[int]:
    """'3' or '0-9' or '1,4-6'."""
    out = []
    for part in text.split(","):
        first, _, last = part.partition("-")
        out += range(int(first), int(last or first) + 1)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=seeds, default=seeds("0-9"))
    ap.add_argument("--programs", type=int, default=12, help="programs a seed")
    ap.add_argument("--size", choices=["small", "large"], default="small")
    ap.add_argument("--runtime", choices=["onnxruntime", "openvino", "onnx-reference"],
                    default="onnxruntime")
    ap.add_argument("--dtype", choices=["f64", "f32"], default="f32")
    ap.add_argument("--narrow", action="store_true",
                    help=f"i32 inputs within ±{NARROW}")
    ap.add_argument("--keep", type=Path, help="write the .mdl and .onnx files here")
    args = ap.parse_args(argv)
    if args.runtime == "openvino" and args.dtype == "f64":
        ap.error("OpenVINO's CPU plugin computes in f32: use --dtype f32")
    folder = args.keep or Path(tempfile.mkdtemp(prefix="mdl-fuzz-onnx-"))
    folder.mkdir(parents=True, exist_ok=True)
    count, failing = 0, []
    for seed in args.seeds:
        for index in range(args.programs):
            program = generate(seed, index, args.size)
            count += 1
            try:
                found = run_program(program, folder, args.runtime, args.dtype, args.narrow)
            except Exception as e:  # a runtime's own error: that program fails
                found = [({}, {"error": f"{type(e).__name__}: {str(e).strip()[:300]}"})]
            if found:
                failing.append(program.name)
                for case, diff in found:
                    print(f"{program.name} {case}: {diff}")
    print(f"{count} programs (seeds {args.seeds[0]}-{args.seeds[-1]}, {args.size}, "
          f"{args.runtime}, {args.dtype}{', narrow i32' if args.narrow else ''}), "
          f"{len(failing)} failing{': ' + ' '.join(failing) if failing else ''}")
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
