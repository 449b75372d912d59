"""The targets the backend can emit for, by name (`mdlc build --target NAME`), the cuda
target built for the CPU (`--target cuda --emulate`), and the CPU target of a sanitized
build (`--sanitize`: its code marks dead arena slots) and of a profiled build
(`--profile`: its code times itself)."""
from __future__ import annotations

from ..backend.target import Target
from ..ir.diagnostics import UsageError
from .cpu import CPU, SANITIZED_CPU, CpuTarget
from .cuda import CUDA_TARGET, EMULATED_CUDA_TARGET

TARGETS: dict[str, Target] = {t.name: t for t in (CPU, CUDA_TARGET)}


def target(name: str, emulate: bool = False, sanitize: bool = False,
           profile: bool = False) -> Target:
    """The registered target `name`; with `emulate`, the cuda target's code built by the
    host compiler against mdl's emulated device; with `sanitize`, the CPU target whose
    code marks the memory plan's dead slots for AddressSanitizer (the build refuses
    sanitizers for other targets); with `profile`, the CPU target whose code times itself
    (backend/profile.py). A UsageError names what is wrong."""
    if name not in TARGETS:
        raise UsageError(f"unknown target {name!r} (targets: {', '.join(TARGETS)})")
    if profile:
        if name != "cpu":
            raise UsageError("--profile times the cpu target's code only: a GPU runs its "
                             "kernels after the host has gone on (Nsight Systems times them)")
        return CpuTarget(sanitized=sanitize, profiled=True)
    if sanitize and name == "cpu":
        return SANITIZED_CPU
    if not emulate:
        return TARGETS[name]
    if name != "cuda":
        raise UsageError("--emulate is for --target cuda: it runs the cuda target's generated "
                         "code on the CPU")
    return EMULATED_CUDA_TARGET
