"""mdl's compiler back half: IR, primitives, autodiff, reference interpreter, backends."""

# Part of every build-cache key: bump it when generated code changes in a way that the
# key's other parts (the sources, runtime headers, flags, compiler) would not show.
CODEGEN_VERSION = 1
