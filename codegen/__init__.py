"""mdl's compiler back half: IR, primitives, autodiff, reference interpreter, backends."""

def load(path, target="cpu", defines=None, dtype="f32", model=None, specialize=None,
         name=None, vjp=False, *, emulate=False):
    """Build (through the cache) and import the native module of a .mdl file:
    `load("model.mdl", target="cpu", defines={"H": 512})`; `emulate=True` with
    `target="cuda"` runs the CUDA code on the CPU. See codegen.pipeline."""
    from .pipeline import load as load_module
    return load_module(path, target, defines, dtype, model, specialize, name, vjp,
                       emulate=emulate)
