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
from codegen.reference import interpreter as reference
from dsl import check_file

NARROW = 1000


def session(path: Path, runtime: str):
    """A function from inputs to {output name: array} for the ONNX file at `path`."""
    if runtime == "onnxruntime":
        import onnxruntime as ort
        s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        wanted = {i.name for i in s.get_inputs()}
        names = [o.name for o in s.get_outputs()]
        return lambda inputs: dict(zip(names, s.run(None, {
            k: np.asarray(v) for k, v in inputs.items() if k in wanted})))
    if runtime == "onnx-reference":
        import onnx
        model = onnx.load(str(path))
        evaluator = reference_evaluator(model)
        wanted = {i.name for i in model.graph.input}
        names = [o.name for o in model.graph.output]
        return lambda inputs: dict(zip(names, evaluator.run(None, {
            k: np.asarray(v) for k, v in inputs.items() if k in wanted})))
    import openvino
    core = openvino.Core()
    compiled = core.compile_model(core.read_model(str(path)), "CPU",
                                  {"INFERENCE_PRECISION_HINT": "f32"})
    def run(inputs):
        got = compiled({name: np.asarray(inputs[name]) for i in compiled.inputs
                        for name in i.names if name in inputs})
        return {name: got[port] for port in compiled.outputs for name in port.names}
    return run


def reference_evaluator(model):
    """onnx's reference evaluator for `model`, its `Loop` stacking the scan outputs along
    a new first axis, as onnxruntime and OpenVINO do and mdl's export expects.
    onnx's own concatenates them along their first axis, as the words of ONNX's Loop say
    (its pseudocode accumulates them instead: onnx/onnx#3122)."""
    from onnx.reference import ReferenceEvaluator
    from onnx.reference.ops import op_loop

    class Stacking:  # numpy, with vstack stacking
        def __getattr__(self, name):
            return getattr(np, name)

        @staticmethod
        def vstack(values):
            return np.stack(values)

    class Loop(op_loop.Loop):
        op_domain = ""

        def _run(self, *args, **kwargs):
            saved, op_loop.np = op_loop.np, Stacking()  # a Loop nested in it too
            try:
                return super()._run(*args, **kwargs)
            finally:
                op_loop.np = saved

    return ReferenceEvaluator(model, new_ops=[Loop])


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
    run = session(out, runtime)
    failures = []
    for case in case_dims(program.seed):
        inputs = case_inputs(graph, case, program.lengths, program.seed, dtype)
        if narrow:
            inputs = {k: np.clip(v, -NARROW, NARROW).astype(v.dtype)
                      if v.dtype == np.int32 else v for k, v in inputs.items()}
        want = reference.run(graph, inputs, params, dtype=float_type)
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
