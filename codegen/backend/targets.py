"""The targets the backend can emit for, by name (`mdlc build --target NAME`)."""
from __future__ import annotations

from .cpu import CPU
from .target import Target

TARGETS: dict[str, Target] = {CPU.name: CPU}
