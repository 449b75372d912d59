"""Turn generated C++ sources into an importable pybind11 extension, through a cache.

The cache (after PyTensor's cmodule) keeps one directory per key under `cache_dir()`. The
key hashes everything that can change the built file: the sources, CODEGEN_VERSION, the
runtime headers, the rendered CMakeLists.txt (flags, paths), the compiler, Python's ABI
and pybind11's version. A build runs in a temporary directory inside the cache and is
renamed into place under a per-key file lock, so no process ever sees half a build; a
failed build is kept as `failed-<key>` for inspection. See docs/build.md.
"""
from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

import cmake
import jinja2
import ninja
import pybind11
import scipy_openblas32

from dsl.diagnostics import MdlBuildError, count

from . import CODEGEN_VERSION
from .templating import environment

REPO = Path(__file__).resolve().parents[1]
RUNTIME_DIR = REPO / "cpp_runtime"
TEMPLATES_DIR = REPO / "templates"
EXT_SUFFIX = sysconfig.get_config_var("EXT_SUFFIX")

RELEASE_FLAGS = ("-O3", "-march=native")
DEBUG_FLAGS = ("-O0", "-g")
SANITIZE_FLAGS = ("-fsanitize=address,undefined", "-fno-omit-frame-pointer")
CUDA_RELEASE_FLAGS = ("-O3",)
CUDA_DEBUG_FLAGS = ("-O0", "-g", "-lineinfo")
CUDA_LIBRARIES = ("CUDA::cudart", "CUDA::cublas")
SOURCE_SUFFIXES = (".cpp", ".cc", ".h", ".hpp")
CUDA_SUFFIXES = (".cu", ".cuh")

ERROR_LINES = 25  # of the compiler's output quoted in an MdlBuildError
FIRST_ERROR = re.compile(r"error:|CMake Error|undefined reference")
# Lines a compiler prints before an error to say where it was reached from.
CONTEXT = re.compile(r"^(In file included from |\s+from |\S+: In |\S+:\d+:\d+: +required )")
NINJA_STEP = re.compile(r"^\[\d+/\d+\]")


def cache_dir() -> Path:
    """The cache root: `$MDL_CACHE_DIR`, else `$XDG_CACHE_HOME/mdl`, else `~/.cache/mdl`."""
    if os.environ.get("MDL_CACHE_DIR"):
        return Path(os.environ["MDL_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mdl"


def render_cmakelists(source_names: Iterable[str], module_name: str, *, debug: bool = False,
                      sanitize: bool = False, cuda: bool = False) -> str:
    """The CMakeLists.txt that builds `source_names` into the extension `module_name`
    (what `build_extension` compiles with and `mdlc emit` writes)."""
    debug = debug or sanitize  # sanitizer reports want line numbers and honest frames
    context = {
        "name": module_name,
        "sources": sorted(source_names),
        "cuda": cuda,
        "languages": ["CXX", "CUDA"] if cuda else ["CXX"],
        "build_type": "Debug" if debug else "Release",
        "cxx_flags": [*(DEBUG_FLAGS if debug else RELEASE_FLAGS),
                      *(SANITIZE_FLAGS if sanitize else ())],
        "cuda_flags": list(CUDA_DEBUG_FLAGS if debug else CUDA_RELEASE_FLAGS),
        "link_flags": SANITIZE_FLAGS[:1] if sanitize else [],
        "include_dirs": [str(RUNTIME_DIR), scipy_openblas32.get_include_dir()],
        "libraries": [str(_blas_library()), *(CUDA_LIBRARIES if cuda else ())],
        "rpath": scipy_openblas32.get_lib_dir(),
    }
    return _template("CMakeLists.txt.j2").render(context)


def cache_key(sources: Mapping[str, str], module_name: str, *, debug: bool = False,
              sanitize: bool = False, cuda: bool = False) -> str:
    """The cache key of a build: equal keys mean interchangeable extension files."""
    return _digest(_describe(sources, module_name, debug, sanitize, cuda)[1])


def build_extension(sources: Mapping[str, str], module_name: str, *, debug: bool = False,
                    sanitize: bool = False, cuda: bool = False,
                    progress: bool | None = None) -> Path:
    """Compile `sources` ({file name: text}) into the extension `module_name` and return
    the path of `<module_name><EXT_SUFFIX>` inside the cache; an identical earlier build
    is returned at once. Shows progress on stderr when it is a terminal (or `progress`).
    Raises MdlBuildError with the compiler's first errors when the build fails."""
    _check_names(sources, module_name, cuda)
    cmakelists, fields = _describe(sources, module_name, debug, sanitize, cuda)
    key = _digest(fields)
    root = cache_dir()
    built = root / key / (module_name + EXT_SUFFIX)
    if built.is_file():  # complete: a key directory only ever appears by rename
        return built
    with _locked(root / "locks" / f"{key}.lock"):
        if built.is_file():  # another process finished it while we waited
            return built
        _discard_leftovers(root, key)
        work = Path(tempfile.mkdtemp(prefix=f"tmp-{key}-", dir=root))
        work.chmod(0o755)  # mkdtemp's 0700 would hide the entry from a cache's other users
        try:
            _write_tree(work, sources, cmakelists, fields)
            _compile(work, root / key, module_name, cuda,
                     sys.stderr.isatty() if progress is None else progress)
            (work / "build" / built.name).rename(work / built.name)
            shutil.rmtree(work / "build")  # objects and CMake state: only the module is reused
            work.rename(root / key)
        except _CompileFailed as failed:
            raise MdlBuildError(_keep_failed(work, root / f"failed-{key}", module_name,
                                             failed.log)) from None
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
    return built


class _CompileFailed(Exception):
    def __init__(self, log: str):
        super().__init__(log)
        self.log = log


def _check_names(sources: Mapping[str, str], module_name: str, cuda: bool) -> None:
    if not module_name.isidentifier():
        raise ValueError(f"module name {module_name!r} is not a Python identifier")
    suffixes = SOURCE_SUFFIXES + (CUDA_SUFFIXES if cuda else ())
    for name in sources:
        if Path(name).name != name or not name.endswith(suffixes):
            raise ValueError(f"source {name!r}: a source is a plain file name ending in "
                             f"{' '.join(suffixes)}{'' if cuda else ' (.cu with cuda=True)'}")


def _describe(sources: Mapping[str, str], module_name: str, debug: bool, sanitize: bool,
              cuda: bool) -> tuple[str, dict]:
    """A build's CMakeLists.txt and the fields its key hashes."""
    cmakelists = render_cmakelists(sources, module_name, debug=debug, sanitize=sanitize,
                                   cuda=cuda)
    return cmakelists, _key_fields(sources, module_name, cmakelists, debug, sanitize, cuda)


def _template(name: str) -> jinja2.Template:
    return environment().get_template(name)


def _blas_library() -> Path:
    return Path(scipy_openblas32.get_lib_dir()) / f"lib{scipy_openblas32.get_library()}.so"


def _sha256(data: str | bytes) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


def _digest(fields: dict) -> str:
    return _sha256(json.dumps(fields, sort_keys=True))[:32]


def _key_fields(sources: Mapping[str, str], module_name: str, cmakelists: str, debug: bool,
                sanitize: bool, cuda: bool) -> dict:
    """What the key hashes, kept readable: it is also written to the build's key.json."""
    fields = {
        "module": module_name,
        "sources": {name: _sha256(text) for name, text in sources.items()},
        "cmakelists": _sha256(cmakelists),
        "codegen_version": CODEGEN_VERSION,
        "runtime": _runtime_digest(),
        "compiler": _compiler(),
        "python": {"ext_suffix": EXT_SUFFIX, "soabi": sysconfig.get_config_var("SOABI"),
                   "version": list(sys.version_info[:2])},
        "pybind11": pybind11.__version__,
        "variant": {"debug": debug, "sanitize": sanitize, "cuda": cuda},
    }
    if cuda:
        fields["cuda"] = {**_nvcc(), "architectures": _cuda_architectures()}
    return fields


def environment_key() -> dict:
    """What besides the sources decides a build: runtime headers, compiler, Python ABI,
    pybind11, CODEGEN_VERSION (the loader's index keys on it too)."""
    return {"codegen_version": CODEGEN_VERSION, "runtime": _runtime_digest(),
            "compiler": _compiler(), "python": [EXT_SUFFIX, sys.version_info[:2]],
            "pybind11": pybind11.__version__}


def _runtime_digest() -> str:
    """Every file under cpp_runtime/, read on each call: headers change during a session."""
    h = hashlib.sha256()
    for path in sorted(p for p in RUNTIME_DIR.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(RUNTIME_DIR)).encode() + b"\0")
        h.update(_sha256(path.read_bytes()).encode())
    return h.hexdigest()


@functools.cache
def _compiler() -> dict:
    """The C++ compiler CMake is told to use, and its identity: `--version` and what
    `-march=native` means on this machine (a shared cache may serve several CPUs)."""
    path = shutil.which(os.environ.get("CXX") or "c++")
    if path is None:
        raise MdlBuildError("no C++ compiler found: install g++ or clang++, or set CXX")
    version = _output([path, "--version"])
    native = _output([path, *RELEASE_FLAGS, "-E", "-v", "-x", "c++", os.devnull, "-o",
                      os.devnull])
    return {"path": path, "version": version.splitlines()[0], "identity": _sha256(version + native)}


@functools.cache
def _nvcc() -> dict:
    path = shutil.which(os.environ.get("CUDACXX") or "nvcc")
    if path is None:
        raise MdlBuildError("the cuda target needs nvcc: install the CUDA toolkit or set CUDACXX")
    return {"path": path, "identity": _sha256(_output([path, "--version"]))}


def _cuda_architectures() -> str:
    """CMake's own CUDAARCHS variable, else the GPUs of this machine."""
    return os.environ.get("CUDAARCHS") or "native"


def _output(cmd: list[str]) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, errors="replace")
    return done.stdout + done.stderr


@contextlib.contextmanager
def _locked(path: Path):
    """Hold an exclusive flock on `path` (created if needed); released when the file closes,
    also when the process dies, so a crashed build never blocks the next one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _discard_leftovers(root: Path, key: str) -> None:
    """Under the key's lock: temporary directories of builds that died (only the lock holder
    builds this key), and a key directory someone emptied by hand."""
    for stale in root.glob(f"tmp-{key}-*"):
        shutil.rmtree(stale, ignore_errors=True)
    if (root / key).exists():
        shutil.rmtree(root / key)


def _write_tree(work: Path, sources: Mapping[str, str], cmakelists: str, fields: dict) -> None:
    (work / "src").mkdir()
    for name, text in sources.items():
        (work / "src" / name).write_text(text)
    (work / "src" / "CMakeLists.txt").write_text(cmakelists)
    (work / "key.json").write_text(json.dumps(fields, indent=2, sort_keys=True) + "\n")


def _compile(work: Path, final: Path, module_name: str, cuda: bool, show: bool) -> None:
    """Configure and build with CMake and Ninja; the output goes to work/build.log."""
    cxx = _compiler()["path"]
    configure = [str(Path(cmake.CMAKE_BIN_DIR) / "cmake"), "-S", str(work / "src"),
                 "-B", str(work / "build"), "-G", "Ninja",
                 f"-DCMAKE_MAKE_PROGRAM={Path(ninja.BIN_DIR) / 'ninja'}",
                 f"-DCMAKE_CXX_COMPILER={cxx}", f"-DPython_EXECUTABLE={sys.executable}",
                 f"-Dpybind11_DIR={pybind11.get_cmake_dir()}",
                 # Debug info and sanitizer reports name the sources where they will stay.
                 f"-DCMAKE_CXX_FLAGS=-ffile-prefix-map={work}={final}"]
    env = dict(os.environ)
    if cuda:
        configure.append(f"-DCMAKE_CUDA_COMPILER={_nvcc()['path']}")
        env["CUDAARCHS"] = _cuda_architectures()
    build = [str(Path(ninja.BIN_DIR) / "ninja"), "-C", str(work / "build")]
    log = []
    with _Progress(f"building {module_name}", show) as progress:
        for step in (configure, build):
            status, output = _run(step, env, progress)
            log.append(output)
            if status:
                break
    (work / "build.log").write_text("".join(log))
    if status:
        raise _CompileFailed("".join(log))


def _run(cmd: list[str], env: dict, progress: _Progress) -> tuple[int, str]:
    """Run one build step; a background thread reads its output lines (and tells
    `progress` about Ninja's `[3/4]` steps) while this thread redraws the status line."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, errors="replace")
    lines: list[str] = []

    def read() -> None:
        for line in proc.stdout:
            lines.append(line)
            progress.saw(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        while reader.is_alive():
            progress.draw()
            reader.join(0.25)
        return proc.wait(), "".join(lines)
    finally:
        if proc.poll() is None:  # interrupted: do not leave a compiler running
            proc.kill()
            proc.wait()


class _Progress:
    """`building charlm... 12s [1/2]` on stderr, redrawn in place; nothing when disabled."""

    def __init__(self, label: str, enabled: bool):
        self.label, self.enabled = label, enabled
        self.start = time.monotonic()
        self.step = ""
        self.shown = ""

    def __enter__(self) -> _Progress:
        self.draw()
        return self

    def __exit__(self, *exc) -> None:
        self._write("")

    def saw(self, line: str) -> None:
        step = NINJA_STEP.match(line)
        if step:
            self.step = step.group(0)

    def draw(self) -> None:
        seconds = time.monotonic() - self.start
        self._write(f"{self.label}... {seconds:.0f}s {self.step}".rstrip())

    def _write(self, text: str) -> None:
        if not self.enabled or text == self.shown:
            return
        # Spaces, not terminal escapes, erase the old text: the stream may be a log file.
        sys.stderr.write("\r" + text.ljust(len(self.shown)) + ("" if text else "\r"))
        sys.stderr.flush()
        self.shown = text


def _keep_failed(work: Path, kept: Path, module_name: str, log: str) -> str:
    """Move a failed build to `kept` (replacing an older failure) and describe it."""
    shutil.rmtree(kept, ignore_errors=True)
    work.rename(kept)
    log = log.replace(str(work), str(kept))  # the compiler named the temporary directory
    (kept / "build.log").write_text(log)
    return (f"building `{module_name}` failed; the compiler said:\n{_first_errors(log)}\n"
            f"the build directory is kept at {kept} (full log: {kept / 'build.log'})")


def _first_errors(log: str) -> str:
    """The first error: the lines that say where it was reached from, the error, its source
    line and notes; then a count of what the full log holds beyond it."""
    lines = [line for line in log.splitlines() if not line.startswith(("ninja: ", "FAILED: "))]
    first = next((i for i, line in enumerate(lines) if FIRST_ERROR.search(line)), None)
    if first is None:  # no recognizable error (a crash, a killed compiler): the log's end
        return "\n".join(lines[-ERROR_LINES:])
    start = first
    while start > 0 and CONTEXT.match(lines[start - 1]):
        start -= 1
    end = next((i for i in range(first + 1, len(lines))
                if CONTEXT.match(lines[i]) or FIRST_ERROR.search(lines[i])), len(lines))
    end = min(end, start + ERROR_LINES)
    rest = sum(1 for line in lines[end:] if FIRST_ERROR.search(line))
    more = [f"... and {count(rest, 'more error')} in the full log"] if rest else []
    return "\n".join(lines[start:end] + more)
