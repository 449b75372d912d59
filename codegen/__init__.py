"""mdl's compiler back half: IR, primitives, autodiff, reference interpreter, backends.
The checker's warnings of a file that `load` or `export_onnx` reads are issued as
`MdlWarning`s (Python's warnings) at the caller's line."""
from .ir.diagnostics import MdlWarning

__all__ = ["MdlWarning", "export_onnx", "load"]


def load(path, target="cpu", defines=None, dtype="f32", model=None, specialize=None,
         name=None, vjp=False, *, emulate=False, profile=False):
    """Build (through the cache) and import the native module of a .mdl file:
    `load("model.mdl", target="cpu", defines={"H": 512})`; `emulate=True` with
    `target="cuda"` runs the CUDA code on the CPU; `profile=True`: the code times itself
    (`model.profile()`, codegen.profile). See codegen.pipeline."""
    from .pipeline import load as load_module
    return load_module(path, target, defines, dtype, model, specialize, name, vjp,
                       emulate=emulate, profile=profile)


def export_onnx(path, out, *, model=None, params=None, defines=None, specialize=None,
                opset=None, outputs=None, dtype="f32", seed=0, rnn_ops=True):
    """Write a model's inference program as an ONNX file (`mdlc export --onnx`):
    `export_onnx("charlm.mdl", "lm.onnx", model="CharLM", params="checkpoint.npz")`.
    See codegen.export and docs/onnx.md."""
    from .export import export_onnx as export
    from .ir.diagnostics import warn_caller
    found = []
    written = export(path, out, model=model, params=params, defines=defines,
                     specialize=specialize, opset=opset, outputs=outputs, dtype=dtype,
                     seed=seed, rnn_ops=rnn_ops, warn=found.append)
    warn_caller(found)
    return written
