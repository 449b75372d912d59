"""`mdlc`: the command line. Exit 0 on success, 1 for errors in the .mdl file, 2 for
usage errors, 3 for internal errors (our bugs)."""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import traceback
from pathlib import Path

REPORT_URL = "the mdl issue tracker"


def _define(text: str) -> tuple[str, object]:
    key, sep, value = text.partition("=")
    if not sep or not key.isidentifier():
        raise argparse.ArgumentTypeError(f"expected K=V, got {text!r}")
    from codegen.ir.dtypes import decimal_int
    try:
        return key, decimal_int(value)
    except OverflowError as exc:
        raise argparse.ArgumentTypeError(f"-D {key}: {exc} is out of range")
    except ValueError:
        pass
    try:
        return key, float(value)
    except ValueError:
        pass
    if value in ("true", "false"):
        return key, value == "true"
    raise argparse.ArgumentTypeError(f"-D {key}: {value!r} is not a number, true or false")


def _seed(text: str) -> int:
    """A seed as a model takes it (`Model(seed=...)`, an unsigned 64-bit integer), which
    also seeds the random inputs."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if not 0 <= value < 2**64:
        raise argparse.ArgumentTypeError(f"{value}: a seed is 0 to 2**64 - 1")
    return value


def _version() -> str:
    """The installed distribution's version, and the code generator's."""
    from importlib.metadata import PackageNotFoundError, version

    from codegen.compile.cache import CODEGEN_VERSION
    try:
        release = version("mdl")
    except PackageNotFoundError:  # run from a checkout that was never installed
        release = "(not installed)"
    return f"{release} (code generator {CODEGEN_VERSION})"


def _report(problem) -> None:
    """Print a Diagnostic or an MdlError on stderr, coloured when stderr is a terminal
    (NO_COLOR and FORCE_COLOR respected: dsl/highlight.py)."""
    from dsl.highlight import palette_for
    print(problem.render(palette_for(sys.stderr)), file=sys.stderr)


EXAMPLES = {
    "check": ["mdlc check examples/charlm.mdl",
              "mdlc check examples/charlm.mdl --model CharLM --params -D H=128",
              "mdlc check examples/towers.mdl --json"],
    "emit": ["mdlc emit examples/charlm.mdl -o gen/",
             "mdlc emit examples/charlm.mdl --target cuda -o gen-cuda/",
             "mdlc emit --ir --grad examples/charlm.mdl --model CharLM"],
    "graph": ["mdlc graph examples/charlm.mdl --model CharLM -o charlm.svg",
              "mdlc graph examples/sharing.mdl -o sharing.dot",
              "mdlc graph examples/control.mdl --backward -o adaptive-backward.png",
              "mdlc graph examples/caffe2_sharing.mdl --model Brew -o brew.pdf"],
    "build": ["mdlc build examples/charlm.mdl -o build/",
              "mdlc build examples/charlm.mdl --dtype f64 -D H=512 --specialize T=35,B=32",
              "mdlc build examples/charlm.mdl --model CharLM --vjp",
              "mdlc build examples/charlm.mdl --target cuda -o build-gpu/",
              "mdlc build examples/charlm.mdl --target cuda --emulate -o build-emulated/",
              "mdlc build examples/charlm.mdl --profile -o build-profiled/"],
    "gradcheck": ["mdlc gradcheck examples/charlm.mdl --model CharLM --dims T=4,B=3",
                  "mdlc gradcheck examples/gru.mdl --target cuda",
                  "mdlc gradcheck examples/gru.mdl --target cuda --emulate"],
    "profile": ["mdlc profile examples/charlm.mdl --model CharLM --dims T=35,B=8",
                "mdlc profile examples/charlm.mdl --model CharLM --dims T=35,B=1 --forward "
                "--specialize",
                "mdlc profile examples/charlm.mdl --model CharLM --inputs batch.npz "
                "--calls 50"],
    "export": ["mdlc export examples/charlm.mdl --model CharLM --onnx charlm.onnx",
               "mdlc export examples/charlm.mdl --model CharLMStep -D H=128 "
               "--params runs/charlm/checkpoint.npz --onnx step.onnx",
               "mdlc export examples/charlm.mdl --model CharLM --outputs logits "
               "--specialize B=1 --onnx charlm-b1.onnx",
               "mdlc export examples/charlm.mdl --model CharLM --onnx charlm.onnx "
               "--verify onnxruntime openvino"],
    "bench": ["mdlc bench --skip-compile --reps 5",
              "mdlc bench --only lstm generation --threads 1 --out bench-1t",
              "mdlc bench --quick",
              "mdlc bench --isa avx2 --skip-compile --out bench-avx2",
              "mdlc bench --device cuda --skip-compile --out bench-gpu"],
}


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="mdlc", description="The mdl compiler.")
    top.add_argument("--version", action="version", version=f"mdlc {_version()}")
    sub = top.add_subparsers(dest="command", required=True)

    def command(name: str, help: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help, description=help[0].upper() + help[1:] + ".",
                              epilog="examples:\n" + "\n".join(f"  {e}" for e in EXAMPLES[name]),
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    check = command("check", "parse and check a .mdl file")
    _model_options(check)
    check.add_argument("--params", action="store_true", help="print the parameter table")
    check.add_argument("--json", action="store_true", help="print one JSON object")
    emit = command("emit", "write the generated sources (or print the IR)")
    _generation_options(emit, "directory for the sources")
    emit.add_argument("--ir", action="store_true", help="print the IR instead")
    emit.add_argument("--grad", action="store_true",
                      help="with --ir: with the backward pass of the minimized output")
    graph = command("graph", "draw a model: scopes, shared parameters, loops and branches")
    _model_options(graph, dtype=False)
    graph.add_argument("-o", dest="out", metavar="FILE",
                       help="the picture: .svg, .png or .pdf (need Graphviz's `dot`), or "
                       ".dot (default: DOT text on stdout)")
    graph.add_argument("--backward", action="store_true",
                       help="draw the generated gradient program (forward and backward)")
    build = command("build", "compile a .mdl file to an importable module (and its type "
                    "stub MOD.pyi beside it)")
    _generation_options(build, "directory of the module and its stub")
    build.add_argument("--debug", action="store_true", help="-O0 -g")
    build.add_argument("--sanitize", action="store_true", help="address and UB sanitizers")
    build.add_argument("--profile", action="store_true",
                       help="the code times each of its parts: a model's profile() "
                       "(docs/profiling.md)")
    profile = command("profile", "run a model and show where its time goes, by the "
                      "parts of its code and their place in the .mdl source")
    _model_options(profile)
    given = profile.add_mutually_exclusive_group()
    given.add_argument("--dims", type=_dims, default={}, metavar="T=35,B=8",
                       help="the size of each dim of the inputs, drawn at random")
    given.add_argument("--inputs", metavar="FILE.npz",
                       help="the inputs instead, by name (numpy.savez)")
    profile.add_argument("--specialize", action="store_true",
                         help="with --dims: time code compiled for exactly those sizes, as "
                         "`mdlc build --specialize` makes it")
    profile.add_argument("--calls", type=int, default=20,
                         help="calls timed, after two not timed (default 20)")
    profile.add_argument("--forward", action="store_true",
                         help="time forward() alone, not forward(training=True) and "
                         "backward(), of a model that trains")
    profile.add_argument("--seed", type=_seed, default=0,
                         help="the parameters' and random inputs' seed")
    gradcheck = command("gradcheck", "compare gradients with finite differences")
    _model_options(gradcheck, dtype=False)
    _target_option(gradcheck)
    gradcheck.add_argument("--dims", type=_dims, default={}, metavar="T=4,B=3")
    gradcheck.add_argument("--seed", type=_seed, default=0)
    export = command("export", "write a model's inference program as an ONNX file "
                     "(onnxruntime, TensorRT, OpenVINO, netron)")
    _model_options(export)
    export.add_argument("--onnx", required=True, metavar="OUT.onnx", help="the file to write")
    export.add_argument("--params", metavar="CHECKPOINT.npz",
                        help="the parameters: a checkpoint written by `save` (default: the "
                        "initial values of --seed, as Model(seed=...) has them)")
    export.add_argument("--seed", type=_seed, default=0, help="without --params: the seed")
    export.add_argument("--specialize", type=_dims, default={}, metavar="B=1,T=35",
                        help="dims fixed in the graph (the others stay symbolic)")
    export.add_argument("--outputs", type=lambda t: t.split(","), metavar="NAME[,NAME...]",
                        help="the outputs to compute (default: all)")
    export.add_argument("--opset", type=int, help="the ONNX opset (default 18)")
    export.add_argument("--loops", action="store_true",
                        help="write every `for` as a `Loop`, also one whose body is an LSTM "
                        "or GRU step (by default ONNX's LSTM or GRU node)")
    export.add_argument("--verify", nargs="*", metavar="RUNTIME",
                        help="run the file written in these runtimes (onnxruntime, the "
                        "default; openvino; onnx-reference) on random inputs against mdl's "
                        "reference; exit status 1 if one differs")
    bench = command("bench", "time compiled models against PyTorch and JAX, side by side "
                    "(the suite in benchmarks/ of a source checkout)")
    bench.add_argument("--reps", type=int, help="timed repetitions of each pass in each "
                       "framework (default 20, 2 with --quick)")
    bench.add_argument("--threads", type=int, default=2, help="threads of every framework")
    bench.add_argument("--device", choices=_TargetNames(), default="cpu", metavar="TARGET",
                       help="where every framework runs: the CPU rows, or the GPU rows "
                       "(mdl's cuda target against cuDNN and JAX on an NVIDIA GPU)")
    bench.add_argument("--isa", choices=("native", "avx2"), default="native",
                       help="avx2: build and run every framework restricted to AVX2 and FMA "
                       "(mdl's code with -march=x86-64-v3, MKL, oneDNN, OpenBLAS and XLA "
                       "told so), to see on an AVX-512 machine what one without runs")
    bench.add_argument("--only", nargs="+", default=[], metavar="NAME",
                       help="cases to run: groups (lstm, generation, milstm, gru_if, "
                       "attention, crf, memory), case names or patterns such as 'lstm-*-b32-*'")
    bench.add_argument("--quick", action="store_true",
                       help="tiny sizes and few reps: a check that the suite works")
    bench.add_argument("--skip-compile", action="store_true",
                       help="leave out torch.compile (about a minute of compiling per case)")
    bench.add_argument("--out", default="bench-results",
                       help="directory for results.md, results.json, ratios.png and logs")
    return top


def _model_options(p: argparse.ArgumentParser, dtype: bool = True) -> None:
    p.add_argument("file")
    p.add_argument("-D", dest="defines", action="append", type=_define, default=[],
                   metavar="K=V", help="override a hyper-parameter")
    p.add_argument("--model", help="the model to use when the file has several")
    if dtype:
        p.add_argument("--dtype", choices=("f32", "f64"), default="f32")


def _generation_options(p: argparse.ArgumentParser, out_help: str) -> None:
    _model_options(p)
    p.add_argument("-o", dest="out", default=".", help=out_help)
    p.add_argument("--name", help="the module's name (default: the file's stem)")
    _target_option(p)
    p.add_argument("--specialize", action="append", type=_dims, default=[],
                   metavar="B=32,T=35", help="also compile code with these dims fixed")
    p.add_argument("--vjp", action="store_true",
                   help="the backward takes a cotangent per float output (a vector-Jacobian "
                   "product, for codegen.pytorch) instead of differentiating the minimized one")


class _TargetNames:
    """`--target`'s choices, the registry's names, read only when a `--target` is given
    (hence the metavar: argparse would list them while building the parser): the registry
    imports every backend, which a cached `mdlc build` does without."""

    def __contains__(self, name: object) -> bool:
        return name in self._names()

    def __iter__(self):
        return iter(self._names())

    @staticmethod
    def _names() -> list[str]:
        from .targets.registry import TARGETS
        return sorted(TARGETS)


def _target_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", choices=_TargetNames(), default="cpu", metavar="TARGET",
                   help="the kind of machine to compile for: cpu (C++ and a BLAS) or cuda "
                   "(an NVIDIA GPU: CUDA kernels and cuBLAS)")
    p.add_argument("--emulate", action="store_true",
                   help="with --target cuda: compile the CUDA code with the host compiler "
                   "against mdl's emulated device, which runs every kernel on the CPU with "
                   "checks (docs/cuda.md)")


def _dims(text: str) -> dict[str, int]:
    out = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or not key.isidentifier() or not value.isdigit() or int(value) < 1:
            raise argparse.ArgumentTypeError(f"expected NAME=SIZE[,NAME=SIZE...], got {text!r}")
        out[key] = int(value)
    return out


def cmd_check(args) -> int:
    """Checks `--model`, else every model of the file (`--json` describes one model)."""
    from dsl import SourceFile, UsageError, params_table, summary, to_json
    source = SourceFile(args.file)
    names = [args.model] if args.model else source.model_names()
    if args.json and len(names) > 1:
        raise UsageError(f"{args.file} defines several models ({', '.join(names)}); --json "
                         "describes one: choose it with --model NAME")
    defines = source.defines_by_model(names, dict(args.defines))
    for i, name in enumerate(names):
        cm = source.check(name, defines[name], args.dtype)
        for w in cm.warnings:
            _report(w)
        if args.json:
            print(json.dumps(to_json(cm), indent=2))
            continue
        print(("\n" if i else "") + summary(cm))
        if args.params:
            print()
            print(params_table(cm))
    return 0


def _output_folder(out: str | Path) -> Path:
    """-o's folder, made where it is not yet (a UsageError where it cannot be)."""
    from .ir.diagnostics import UsageError, writing
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"-o takes a folder, and `{out}` is a file")
    with writing(out):
        out.mkdir(parents=True, exist_ok=True)
    return out


def cmd_emit(args) -> int:
    if args.ir:
        return _print_ir(args)
    from .compile.cmake import render_cmakelists
    from .compile.extension import compiled
    from .compile.parts import jobs_beside, part_files
    from .ir.diagnostics import writing
    from .pipeline import BuildOptions, module_name_for, sources
    from .targets.registry import target
    options = BuildOptions(args.target, args.dtype, dict(args.defines), args.model,
                           args.specialize, vjp=args.vjp, emulate=args.emulate)
    name = module_name_for(args.file, args.name)
    _, files = sources(args.file, name, options)
    chosen = target(args.target, args.emulate)
    others = [n for n in compiled(files) if n != chosen.source]  # a GPU target's kernels
    parts = part_files(chosen.source, files[chosen.source], jobs_beside(len(others)),
                       chosen.toolchain.part_bytes)
    files.update(parts)   # the CMake project compiles the parts, or else the source whole
    files["CMakeLists.txt"] = render_cmakelists([*parts, *others] if parts else list(files),
                                                name, chosen)
    out = _output_folder(args.out)
    with writing(out):
        for file_name, text in files.items():
            (out / file_name).write_text(text)
            print(out / file_name)
    return 0


def _print_ir(args) -> int:
    from dsl import UsageError, check_file

    from .ops.printer import format_graph
    from .pipeline import BuildOptions, differentiate, trains
    cm = check_file(args.file, defines=dict(args.defines), model=args.model, dtype=args.dtype)
    for w in cm.warnings:
        _report(w)
    graph = cm.graph
    if args.grad or args.vjp:
        # a backward asked of a model without one: a usage error, as gradcheck's and
        # graph --backward's are
        if not trains(graph, BuildOptions(vjp=args.vjp)):
            raise UsageError(f"model `{graph.name}` " + (
                "has no float output: it has no vector-Jacobian product to print" if args.vjp
                else "minimizes nothing: it has no backward pass to print"))
        graph = differentiate(graph, args.vjp)
    print(format_graph(graph))
    return 0


def cmd_graph(args) -> int:
    """Draws one model (`--backward`: its gradient program) into -o, else DOT on stdout."""
    from .drawing import picture, write
    dot, warnings = picture(args.file, dict(args.defines), args.model, args.backward)
    for w in warnings:
        _report(w)
    if args.out is None:
        print(dot.source, end="")
    else:
        write(dot, args.out)
        print(args.out)
    return 0


def cmd_build(args) -> int:
    """A module the cache's index holds is copied without importing the compiler
    (codegen/compile/index.py); anything else goes through the pipeline."""
    from .compile.extension import install
    from .compile.index import lookup
    from .compile.options import BuildOptions, module_name_for
    from .ir.diagnostics import writing
    options = BuildOptions(args.target, args.dtype, dict(args.defines), args.model,
                           args.specialize, args.debug, args.sanitize, args.vjp, args.emulate,
                           args.profile)
    name = module_name_for(args.file, args.name)
    _output_folder(args.out)  # before a build of seconds, not after
    built = lookup(args.file, name, options)
    if built is None:
        from .pipeline import build
        built = build(args.file, name, options)
    with writing(args.out):
        print(install(built, args.out, name))
    if args.sanitize:  # importing it without the runtime preloaded aborts Python
        from .compile.sanitizers import how_to_run
        print(f"note: import it from a Python started as: {how_to_run()}", file=sys.stderr)
    return 0


def cmd_gradcheck(args) -> int:
    from dsl import UsageError

    from .pipeline import BuildOptions, check, dims_text, import_built, module_name_for
    from .reference import gradcheck

    # every model of the file in one f64 module, named like any other f64 build of it
    options = BuildOptions(target=args.target, dtype="f64", defines=dict(args.defines),
                           emulate=args.emulate)
    name = module_name_for(args.file) + "_f64"
    graph = _one_model(args.file, check(args.file, options), args.model)
    if graph.loss is None:
        print(f"mdlc: model `{graph.name}` minimizes nothing: no gradients to check",
              file=sys.stderr)
        return 2
    symbols = dict.fromkeys(s for v in graph.inputs.values() for d in v.type.shape
                            for s in d.symbols)   # in the order the inputs name them
    unknown = sorted(set(args.dims) - set(symbols))
    if unknown:  # a typo would check other dims than asked, and say nothing
        raise UsageError(f"--dims names {', '.join(unknown)}, not a symbolic dim of model "
                         f"`{graph.name}` (it has {', '.join(symbols) or 'none'})")
    module = import_built(args.file, name, options)
    dims = {s: args.dims.get(s, gradcheck.DEFAULT_DIMS.get(s, 3)) for s in symbols}
    try:
        results = gradcheck.check(module, graph, dims, args.seed)
    except RuntimeError as exc:  # the model could not run here (no CUDA device, ...)
        raise UsageError(str(exc)) from None
    except ValueError as exc:  # an assert the drawn inputs do not pass
        raise UsageError(_undrawable(exc)) from None
    except MemoryError as exc:
        raise UsageError(_too_large(f"--dims {dims_text(dims)}", exc)) from None
    worst = max((r.error for r in results), default=0.0)
    width = max((len(r.name) for r in results), default=10)
    for r in results:
        flag = "ok" if r.error <= gradcheck.TOLERANCE else "FAILED"
        print(f"{r.name.ljust(width)}  {r.error:.2e}  ({r.checked} elements)  {flag}")
    print(f"worst relative error {worst:.2e} (tolerance {gradcheck.TOLERANCE:.0e}) at "
          + ", ".join(f"{k}={v}" for k, v in dims.items()))
    return 0 if worst <= gradcheck.TOLERANCE else 1


def _undrawable(exc: ValueError) -> str:
    return (f"the random inputs fail the model's check: {exc}. They are drawn within "
            "what its asserts compare each input with (`ids < R`, `scale > 0.0`); give "
            "a check of another form inputs that pass it (mdlc profile --inputs)")


def _too_large(given: str, exc: MemoryError) -> str:
    """What a MemoryError of a model run on the inputs `given` (random ones at `--dims`,
    or a file's) means: sizes this machine cannot hold, the user's to change."""
    return (f"{given}: the model's inputs and values at these sizes need more memory than "
            f"this machine gives ({exc or 'out of memory'}); give smaller sizes")


def _one_model(file: str, models: list, name: str | None):
    """The checked graph of the model `name` of `file` (None: its only one), or a
    UsageError naming the file's models."""
    from dsl import UsageError
    chosen = [g for g in models if name in (None, g.name)]
    if len(chosen) != 1:
        names = ", ".join(g.name for g in models)
        raise UsageError(f"{file} has no model `{name}` (it has {names})" if not chosen
                         else f"{file} defines several models ({names}); choose one "
                         "with --model NAME")
    return chosen[0]


def cmd_profile(args) -> int:
    import numpy as np
    from dsl import UsageError

    from .pipeline import BuildOptions, check, dims_text, import_built, module_name_for
    from .profile import measure, report
    from .reference.gradcheck import random_inputs

    if args.calls < 1:
        raise UsageError(f"--calls {args.calls}: at least 1")
    if args.specialize and args.inputs is not None:
        raise UsageError("--specialize takes the sizes of --dims, not of --inputs")
    options = BuildOptions(dtype=args.dtype, defines=dict(args.defines), model=args.model,
                           profile=True)
    graph = _one_model(args.file, check(args.file, options), args.model)
    options.model = graph.name
    symbols = list(dict.fromkeys(s for v in graph.inputs.values() for d in v.type.shape
                                 for s in d.symbols))
    if args.inputs is not None:
        try:
            with np.load(args.inputs) as saved:
                inputs = {k: saved[k] for k in saved.files}
        except (OSError, ValueError) as exc:
            raise UsageError(f"--inputs {args.inputs}: {exc}") from None
        dims = {}
    else:
        unknown = sorted(set(args.dims) - set(symbols))
        missing = [s for s in symbols if s not in args.dims]
        if unknown or missing:
            raise UsageError(f"--dims takes the size of each dim of model `{graph.name}`'s "
                             f"inputs ({', '.join(symbols)})" + (
                                 f": {', '.join(missing)} missing" if missing else
                                 f": {', '.join(unknown)} is none of them"))
        dims = {s: args.dims[s] for s in symbols}
        if args.specialize and dims:
            options.specialize = [dims]
        float_type = np.float32 if args.dtype == "f32" else np.float64
        try:
            drawn = random_inputs(graph, dims, np.random.default_rng(args.seed))
        except MemoryError as exc:
            raise UsageError(_too_large(f"--dims {dims_text(dims)}", exc)) from None
        inputs = {k: v.astype(float_type) if v.dtype.kind == "f" else v
                  for k, v in drawn.items()}
    module = import_built(args.file, module_name_for(args.file) + "_profile", options)
    model = getattr(module, graph.name)(seed=args.seed)
    # the plain build beside it, timed in turns: a profiled build's parts are compiled
    # apart, and a loop can run at another speed there (docs/profiling.md)
    plain_options = dataclasses.replace(options, profile=False)
    plain = getattr(import_built(args.file, module_name_for(args.file), plain_options),
                    graph.name)(seed=args.seed)
    train = graph.loss is not None and not args.forward
    try:
        measured = measure(model, inputs, args.calls, train, plain=plain)
    except MemoryError as exc:
        given = (f"--inputs {args.inputs}" if args.inputs is not None
                 else f"--dims {dims_text(dims)}")
        raise UsageError(_too_large(given, exc)) from None
    except (TypeError, ValueError, IndexError) as exc:  # what a model says of its inputs
        if args.inputs is None:
            if isinstance(exc, ValueError):
                raise UsageError(_undrawable(exc)) from None
            raise  # inputs drawn within their bounds: a bug of ours
        raise UsageError(f"--inputs {args.inputs}: {exc}") from None
    print(report(graph.name, dims, measured, bool(options.specialize)))
    return 0


def cmd_export(args) -> int:
    from .export import export_onnx, verify_onnx
    from .export.verify import known_runtimes
    known_runtimes(args.verify or [], args.dtype)  # before writing anything
    common = dict(model=args.model, params=args.params, defines=dict(args.defines),
                  specialize=args.specialize, dtype=args.dtype, seed=args.seed)
    out = export_onnx(args.file, args.onnx, opset=args.opset, outputs=args.outputs,
                      rnn_ops=not args.loops, **common)
    print(out)
    if args.verify is None:
        return 0
    verdicts = verify_onnx(args.file, out, runtimes=args.verify or ["onnxruntime"], **common)
    for verdict in verdicts:
        print(verdict)
    return 0 if all(v.agrees for v in verdicts) else 1


def cmd_bench(args) -> int:
    """Runs the benchmark suite, which lives in a source checkout, not in the wheel."""
    from dsl import UsageError
    checkout = Path(__file__).resolve().parents[1]
    if not (checkout / "benchmarks" / "suite.py").is_file():
        raise UsageError("`mdlc bench` runs the benchmark suite of a source checkout "
                         "(benchmarks/ is not installed with the package): clone mdl, "
                         "`pip install -e \".[bench]\"` there and run `mdlc bench` again")
    sys.path.insert(0, str(checkout))
    from benchmarks.suite import run
    return run(args)


COMMANDS = {"check": cmd_check, "emit": cmd_emit, "graph": cmd_graph, "build": cmd_build,
            "gradcheck": cmd_gradcheck, "profile": cmd_profile, "export": cmd_export,
            "bench": cmd_bench}


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from .ir.diagnostics import MdlError, UsageError
    try:
        return COMMANDS[args.command](args)
    except BrokenPipeError:  # `mdlc check F | head`: the reader left; leave quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except MdlError as exc:
        _report(exc)
        return 1
    except UsageError as exc:
        print(f"mdlc: error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # a bug of ours: say so, never a raw traceback by default
        print(f"mdlc: internal error: {type(exc).__name__}: {exc}\n"
              f"This is a bug in mdlc; please report it to {REPORT_URL} with the input file"
              " (set MDL_DEBUG=1 for the traceback).", file=sys.stderr)
        if os.environ.get("MDL_DEBUG"):
            traceback.print_exc()
        return 3


if __name__ == "__main__":
    sys.exit(main())
