"""How a target's generated sources become an extension: a toolchain names the compiler
and its flags, the runtime objects a module links (each compiled once per cache), and
what of this goes into a build's cache key. `codegen.compile.extension.build_extension` runs the
build itself, through the cache, the same for every toolchain; a target names its
toolchain (`Target.toolchain`).

- HOST: the C++ compiler (`c++`, or $CXX): the cpu target.
- NVCC: nvcc and cuBLAS (codegen/compile/cuda_toolkit.py): the cuda target.
- EMULATED_CUDA: the cuda target built by the host compiler (`mdlc build --target cuda
  --emulate`): the same generated CUDA compiled as C++ against the stand-in headers of
  cpp_runtime/emulated/, whose device runs every kernel on the CPU, with checks
  (docs/cuda.md). It needs neither nvcc nor cuBLAS.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass
from pathlib import Path

from ..backend.paths import RUNTIME_DIR
from ..ir.diagnostics import UsageError
from .compiler import host_compiler
from .cuda_toolkit import nvcc_host_compiler, toolkit
from .environment import environment_key
from .flags import (DEBUG_FLAGS, NVCC_HOST_CODE_FLAGS, TSAN_FLAGS, compile_flags,
                    include_dirs, link_flags, machine_flags, sanitize_link_flags)
from .commands import side_by_side
from .runtime import CUDA_RUNTIME_SOURCE, build_runtime, runtime_object
from .sanitizers import tsan_refusal

EMULATED_HEADERS = RUNTIME_DIR / "emulated"   # cuda_runtime.h, cublas_v2.h for the host compiler
EMULATOR_SOURCES = RUNTIME_DIR / "src" / "emulator"
CUDA_RUNTIME_OBJECT = "mdl_cuda_runtime.o"
EMULATED_RUNTIME_OBJECT = "mdl_emulated_cuda.o"  # cuda_device.cu and the scheduler
EMULATOR_OBJECT = "mdl_emulator.o"               # the emulator's other sources
# The emulator's sources that --sanitize compiles otherwise (-DMDL_EMULATOR_TSAN=1: the
# scheduler tells ThreadSanitizer which fiber is which CUDA thread); the others are the
# same object either way, built once for both (tests/test_build.py checks that only these
# read the define)
TSAN_EMULATOR_SOURCES = ("scheduler.cpp",)
EMULATED_LEVEL = "-O1"  # what the emulated toolchain compiles models at (its flags())


@dataclass(frozen=True)
class Linked:
    """What a module's build takes from the cache besides its sources: the runtime objects
    it links, and directories searched for headers before the others (a precompiled
    header's)."""
    objects: tuple[Path, ...]
    includes: tuple[Path, ...] = ()


class Toolchain(abc.ABC):
    name: str            # in every key: two toolchains' builds never share a cache entry
    label: str = ""      # after the module's name in the progress line
    no_sanitize: str = ""  # why --sanitize is refused, where it is
    # The least code (bytes of a generated source) worth a compile of its own when a module
    # is compiled in parts (codegen/compile/parts.py): each part parses the headers again.
    part_bytes: int

    def check(self, sanitize: bool) -> None:
        """Refuse what this toolchain cannot build, before anything is compiled: a
        request's options that do not go together (exit 2, as --sanitize with cuda)."""
        if sanitize and self.no_sanitize:
            raise UsageError(self.no_sanitize)

    @abc.abstractmethod
    def fields(self, debug: bool, sanitize: bool) -> dict:
        """What decides its builds besides their sources and the environment
        (environment.environment_key): the toolchain, its tools and its flags."""

    @abc.abstractmethod
    def runtime(self, debug: bool, sanitize: bool, progress: bool) -> Linked:
        """The runtime objects a module links, built (or found) in the cache."""

    @abc.abstractmethod
    def compile(self, source: str, flags: list[str], linked: Linked, output: Path, final: Path,
                debug: bool, sanitize: bool) -> list[str]:
        """The command that compiles `source` (with `flags`: a part's, parts.defines) into
        the object `output`, in a build directory that will be renamed to `final`."""

    @abc.abstractmethod
    def link(self, objects: list[Path], linked: Linked, output: Path, debug: bool,
             sanitize: bool) -> list[str]:
        """The command that links the compiled `objects` with `linked` into `output`."""


class HostToolchain(Toolchain):
    """The C++ compiler: the runtime's object and its precompiled mdl/python.h."""
    name = "host"
    # a part loads the precompiled header in about 0.2 s; 16 KB of a model's functions take
    # about 0.6 s to compile (docs/build.md, "Compiled in parts")
    part_bytes = 16_000

    def fields(self, debug: bool, sanitize: bool) -> dict:
        return {"toolchain": self.name, "flags": self.flags(debug, sanitize),
                "link": self.linker_flags(sanitize)}

    def flags(self, debug: bool, sanitize: bool) -> list[str]:
        """The compiler's flags for a model's code."""
        return compile_flags(debug, sanitize)

    def runtime(self, debug: bool, sanitize: bool, progress: bool) -> Linked:
        built = build_runtime(debug=debug, sanitize=sanitize, progress=progress)
        return Linked((built.object,), (built.precompiled,))

    def compile(self, source: str, flags: list[str], linked: Linked, output: Path, final: Path,
                debug: bool, sanitize: bool) -> list[str]:
        return [host_compiler()["path"], *self.flags(debug, sanitize),
                # Debug info and sanitizer reports name the sources where they will stay.
                f"-ffile-prefix-map={output.parent}={final}",
                *(f"-I{d}" for d in self.includes(linked.includes)), *flags, "-c",
                *self.language(), source, "-o", str(output)]

    def link(self, objects: list[Path], linked: Linked, output: Path, debug: bool,
             sanitize: bool) -> list[str]:
        return [host_compiler()["path"], *self.flags(debug, sanitize), "-shared",
                *map(str, objects), *map(str, linked.objects), "-o", str(output),
                *self.linker_flags(sanitize)]


    def includes(self, first: tuple[Path, ...] = ()) -> list[str]:
        return [*map(str, first), *include_dirs()]

    def language(self) -> list[str]:
        """What the compiler is told of the source's language (nothing: by its suffix)."""
        return []

    def linker_flags(self, sanitize: bool) -> list[str]:
        return link_flags(sanitize)


class NvccToolchain(Toolchain):
    """The cuda target's two halves (docs/build.md, "The cuda target's two halves"): a
    module's kernels.cu by nvcc, with the device header alone; its module.cpp, the host
    code that launches them, by the C++ compiler with the CPU target's flags and
    precompiled header, and CUDA's and cuBLAS's headers; the cuda runtime object
    (cpp_runtime/src/cuda_device.cu: the kernel primitives, compiled once) by nvcc. Linked
    with the host's runtime object, cuBLAS by RPATH and the CUDA runtime statically."""
    name = "nvcc"
    label = " (cuda)"
    # module.cpp is host code, compiled in parts as the cpu target's (HostToolchain)
    part_bytes = HostToolchain.part_bytes
    no_sanitize = ("--sanitize builds are for the cpu target and the emulated device (the "
                   "sanitizers instrument host code): build the cuda target without it, or "
                   "with --emulate to check its kernels for races under ThreadSanitizer")

    def flags(self, debug: bool) -> list[str]:
        """nvcc's flags for the cuda runtime and models: the GPU architectures, and the host
        compiler's flags as for the cpu target."""
        host = ["-fPIC", "-fvisibility=hidden", *NVCC_HOST_CODE_FLAGS,
                *(() if debug else machine_flags())]
        return ["-std=c++17", *toolkit().arch_flags, "-Xcompiler", ",".join(host),
                *(DEBUG_FLAGS if debug else ("-O3",)),
                *(f for f in compile_flags(debug) if f.startswith("-D"))]

    def kernel_flags(self, debug: bool) -> list[str]:
        """nvcc's flags for a module's kernels.cu: the host side of that file is only the
        kernels' stubs, whose addresses module.cpp launches and which never run, so it is
        compiled at -O0 (the device code is the same at any host -O: nvcc's -O is the host
        compiler's)."""
        return ["-O0" if flag == "-O3" else flag for flag in self.flags(debug)]

    def fields(self, debug: bool, sanitize: bool) -> dict:
        tk = toolkit()
        return {"toolchain": self.name, "nvcc": tk.version, "nvcc_path": tk.nvcc,
                "nvcc_host": nvcc_host_compiler(tk.nvcc),
                "cublas": str(tk.cublas_library), "cuda_flags": self.flags(debug),
                "kernel_flags": self.kernel_flags(debug),
                "host_flags": compile_flags(debug), "link": self.linker_flags()}

    def runtime(self, debug: bool, sanitize: bool, progress: bool) -> Linked:
        """The host's runtime and the cuda runtime object, built side by side (neither
        needs the other: nvcc's 30 s beside the glue's, not after them)."""
        def device() -> Path:
            return runtime_object(
                CUDA_RUNTIME_OBJECT,
                {"product": "cuda runtime", **self.fields(debug, False), **environment_key()},
                [([toolkit().nvcc, *self.flags(debug), *(f"-I{d}" for d in self.includes())],
                  RUNTIME_DIR / CUDA_RUNTIME_SOURCE)], "the mdl cuda runtime", False)
        cuda, host = side_by_side(device, lambda: build_runtime(debug=debug, progress=progress),
                                  "building the mdl cuda runtime (once per cache)", progress)
        return Linked((host.object, cuda), (host.precompiled,))

    def compile(self, source: str, flags: list[str], linked: Linked, output: Path, final: Path,
                debug: bool, sanitize: bool) -> list[str]:
        if source.endswith(".cu"):  # the kernels
            return [toolkit().nvcc, *self.kernel_flags(debug),
                    *(f"-I{d}" for d in self.includes()), *flags, "-c", source, "-o",
                    str(output)]
        # the host code, as the cpu target's is compiled, its precompiled header first
        return CUDA_HOST_CODE.compile(source, flags, linked, output, final, debug, False)

    def link(self, objects: list[Path], linked: Linked, output: Path, debug: bool,
             sanitize: bool) -> list[str]:
        return [toolkit().nvcc, *self.flags(debug), "-shared", *map(str, objects),
                *map(str, linked.objects), "-o", str(output), *self.linker_flags()]

    def includes(self) -> list[str]:
        return [*include_dirs(), toolkit().cuda_include, toolkit().cublas_include]

    def linker_flags(self) -> list[str]:
        """cuBLAS and the BLAS the runtime calls, in nvcc's spelling of linker options."""
        flags = []
        for flag in [*toolkit().link_flags(), *link_flags(False)]:
            if flag.startswith("-Wl,"):
                flags += ["-Xlinker", flag[len("-Wl,"):]]
            elif flag.startswith("/"):  # nvcc takes no versioned .so as an input file
                flags += [f"-L{Path(flag).parent}", f"-l:{Path(flag).name}"]
            else:
                flags.append(flag)
        return flags


class CudaHostCode(HostToolchain):
    """How NvccToolchain compiles a module's module.cpp: the host toolchain's command, with
    CUDA's and cuBLAS's headers after the runtime's."""

    def includes(self, first: tuple[Path, ...] = ()) -> list[str]:
        return [*super().includes(first), toolkit().cuda_include, toolkit().cublas_include]


class EmulatedCudaToolchain(HostToolchain):
    """The host toolchain with cpp_runtime/emulated/ found first: the generated CUDA is
    compiled as C++, and so are the cuda target's runtime object and the emulated device
    (cpp_runtime/src/emulator/), into one more runtime object. Sanitized (`--emulate
    --sanitize`), the kernels (a model's code and the cuda runtime's) are built for
    ThreadSanitizer, and the emulator tells it which fiber is which CUDA thread, so that it
    reports races between CUDA threads on device memory (docs/cuda.md); the emulator and
    the host's runtime are not instrumented."""
    name = "emulated-cuda"
    label = " (emulated cuda)"

    def check(self, sanitize: bool) -> None:
        if sanitize and (why := tsan_refusal()):  # a module no process here could import
            raise UsageError(f"--sanitize with --emulate builds for ThreadSanitizer, and {why}: "
                             f"build without --sanitize, or with GCC (CXX=g++)")

    def runtime(self, debug: bool, sanitize: bool, progress: bool) -> Linked:
        """The host's runtime and the emulated device's object, built side by side."""
        flags = compile_flags(debug)  # -O3, not a model's -O1: it runs every kernel
        compiler = [host_compiler()["path"], *flags, *(f"-I{d}" for d in self.includes()),
                    "-x", "c++"]
        kernels = list(TSAN_FLAGS) if sanitize else []
        sources = sorted(EMULATOR_SOURCES.glob("*.cpp"))
        units = [([*compiler, *kernels], RUNTIME_DIR / CUDA_RUNTIME_SOURCE),
                 *(([*compiler, *(("-DMDL_EMULATOR_TSAN=1",) if sanitize else ())], source)
                   for source in sources if source.name in TSAN_EMULATOR_SOURCES)]

        def variant() -> Path:
            # the sources in its key: an object of every emulator source (as built before
            # mdl_emulator.o) has the same flags and runtime files, and found in an older
            # cache it linked each of them twice
            return runtime_object(
                EMULATED_RUNTIME_OBJECT,
                {"product": "emulated cuda runtime", **self.fields(debug, sanitize),
                 "flags": flags, "kernel_flags": kernels,
                 "sources": [source.name for _, source in units], **environment_key()},
                units, "the mdl emulated cuda runtime", False)

        def emulator() -> Path:  # the same for a sanitized build and a plain one
            return runtime_object(
                EMULATOR_OBJECT,
                {"product": "cuda emulator", **self.fields(debug, False), "flags": flags,
                 **environment_key()},
                [(compiler, source) for source in sources
                 if source.name not in TSAN_EMULATOR_SOURCES],
                "the mdl cuda emulator", False)

        def device() -> tuple[Path, Path]:
            return side_by_side(variant, emulator, "", False)
        (emulated, shared), host = side_by_side(
            device, lambda: super(EmulatedCudaToolchain, self).runtime(debug, False, progress),
            "building the mdl emulated cuda runtime (once per cache)", progress)
        return Linked((*host.objects, emulated, shared), host.includes)

    def flags(self, debug: bool, sanitize: bool) -> list[str]:
        """A model's code at -O1, not -O3: the emulated device is for checking kernels, not
        for speed, and -O1 compiles them in half the time (the attention example's f32
        kernels: 7.6 s, 15.8 s at -O3) while keeping the runtime's precompiled header, which
        -O0 would not (GCC takes a header precompiled at any -O but -O0's). The emulator
        itself (the runtime objects) stays at -O3: it runs every kernel. Sanitized: at -O1
        with debug information, for ThreadSanitizer (TSAN_FLAGS)."""
        flags = [EMULATED_LEVEL if flag == "-O3" else flag
                 for flag in super().flags(debug, False)]
        return [*flags, *TSAN_FLAGS] if sanitize else flags

    def includes(self, first: tuple[Path, ...] = ()) -> list[str]:
        return [str(EMULATED_HEADERS), *super().includes(first)]

    def language(self) -> list[str]:
        return ["-x", "c++"]  # the generated CUDA, compiled as C++

    def linker_flags(self, sanitize: bool) -> list[str]:
        # -lpthread, not -pthread: that would define _REENTRANT, and the precompiled
        # mdl/python.h, made without it, would not be used
        return [*super().linker_flags(False), *(sanitize_link_flags(thread=True) if sanitize else ()),
                "-ldl", "-lpthread"]


HOST = HostToolchain()
CUDA_HOST_CODE = CudaHostCode()
NVCC = NvccToolchain()
EMULATED_CUDA = EmulatedCudaToolchain()
