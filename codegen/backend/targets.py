"""The targets the backend can emit for, by name (`mdlc build --target NAME`)."""
from __future__ import annotations

from .cpu import CPU
from .cuda import CUDA_TARGET
from .target import Target

TARGETS: dict[str, Target] = {t.name: t for t in (CPU, CUDA_TARGET)}
