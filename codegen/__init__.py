"""mdl's compiler back half: IR, primitives, autodiff, reference interpreter, backends."""
