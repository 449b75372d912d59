"""A weight given from Python (a NumPy array, a list, a torch tensor) as a NumPy array:
what export_onnx's params and codegen.torch_weights read, without importing torch."""
from __future__ import annotations

from typing import Any

import numpy as np


def host_values(value: Any) -> np.ndarray:
    """`value`'s numbers as an array: a torch tensor's detached and on the host (one that
    requires grad too; bfloat16, which NumPy has no type for, widened to float32, exactly),
    anything else as np.asarray reads it. What torch or NumPy cannot read raises their
    TypeError, ValueError or RuntimeError, for the caller to name the weight."""
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch tensor
        value = value.detach().cpu()
        if str(value.dtype) == "torch.bfloat16":
            value = value.float()
        return value.numpy()
    return np.asarray(value)
