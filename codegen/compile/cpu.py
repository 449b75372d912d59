"""The CPU this process runs on, as the build chooses by it (the BLAS: blas.py) and every
benchmark report names it: /proc/cpuinfo's vendor and model name, and the widest
vector ISA its flags list."""
from __future__ import annotations

import functools
import platform
from dataclasses import dataclass
from pathlib import Path

VENDORS = {"GenuineIntel": "Intel", "AuthenticAMD": "AMD"}
ISAS = (("avx512f", "AVX-512"), ("avx2", "AVX2"), ("avx", "AVX"), ("sse2", "SSE2"))


@dataclass(frozen=True)
class Cpu:
    vendor: str   # "Intel", "AMD", or the vendor_id as the kernel reports it
    model: str    # "AMD EPYC 9B14", "Intel(R) Xeon(R) CPU @ 2.20GHz"
    isa: str      # "AVX-512", "AVX2", "AVX", "SSE2", or the machine where not x86


@functools.cache
def cpu() -> Cpu:
    """The first processor's entry of /proc/cpuinfo (all are alike on the machines mdl runs
    on); the platform's own words where there is no such file."""
    info: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            info.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    flags = set(info.get("flags", "").split())
    isa = next((name for flag, name in ISAS if flag in flags), platform.machine())
    vendor_id = info.get("vendor_id", "")
    return Cpu(vendor=VENDORS.get(vendor_id, vendor_id or "unknown vendor"),
               model=info.get("model name") or platform.processor() or platform.machine(),
               isa=isa)
