"""What a tool taking a compiled model (`as_module`, `DataParallel`) asks of its argument:
an instance of a class of a generated module, not the class itself nor anything else."""
from __future__ import annotations

from typing import Any

# What every model class of a generated module has (cpp_runtime/src/python_module.cpp)
MODEL_ATTRIBUTES = ("params", "cotangents", "inputs", "gradient_layout", "forward_backward")


def check_model(model: Any, who: str) -> None:
    """A TypeError saying what `who` takes where `model` is no compiled model."""
    if isinstance(model, type):
        raise TypeError(f"{who} takes a compiled mdl model, an instance: got the class "
                        f"{model.__name__} itself (make one: {model.__name__}(seed=0))")
    if not all(hasattr(type(model), a) for a in MODEL_ATTRIBUTES):
        raise TypeError(f"{who} takes a compiled mdl model (an instance of a class of a "
                        f"module built by codegen.load or mdlc build), got "
                        f"{type(model).__name__}")
