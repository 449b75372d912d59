"""The targets the backend can emit for, by name (`mdlc build --target NAME`), the cuda
target built for the CPU (`--target cuda --emulate`), and the CPU target of a sanitized
build (`--sanitize`: its code marks dead arena slots) and of a profiled build
(`--profile`: its code times itself)."""
from __future__ import annotations

from ..backend.target import Target
from ..ir.diagnostics import UsageError
from .cpu import CPU, SANITIZED_CPU, CpuTarget
from .cuda import CUDA_TARGET, EMULATED_CUDA_TARGET, CudaTarget

TARGETS: dict[str, Target] = {t.name: t for t in (CPU, CUDA_TARGET)}


def target(name: str, emulate: bool = False, sanitize: bool = False,
           profile: bool = False) -> Target:
    """The registered target `name`; with `emulate`, the cuda target's code built by the
    host compiler against mdl's emulated device; with `sanitize`, the CPU target whose
    code marks the memory plan's dead slots for AddressSanitizer (the build refuses
    sanitizers for other targets); with `profile`, a target whose code times itself
    (backend/profile.py: the cpu's by the host's clock, the cuda's by events on its stream).
    A UsageError names what is wrong."""
    if name not in TARGETS:
        raise UsageError(f"unknown target {name!r} (targets: {', '.join(TARGETS)})")
    if emulate and name != "cuda":
        raise UsageError("--emulate is for --target cuda: it runs the cuda target's generated "
                         "code on the CPU")
    if profile:
        if name == "cuda":
            return CudaTarget(emulate=emulate, profiled=True)
        return CpuTarget(sanitized=sanitize, profiled=True)
    if sanitize and name == "cpu":
        return SANITIZED_CPU
    return EMULATED_CUDA_TARGET if emulate else TARGETS[name]
