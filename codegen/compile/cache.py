"""The build cache's protocol (after PyTensor's cmodule): one directory per key under
`cache_dir()`, made in a temporary directory inside the cache and renamed into place
under a per-key file lock, re-checked after taking the lock, so no process ever sees
half a build and concurrent processes build a key once. A failed build is kept as
`failed-<key>` for inspection. See docs/build.md."""
from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

from ..ir.diagnostics import MdlBuildError

# Part of every build-cache key: bump it when generated code changes in a way that the
# key's other parts (the sources, runtime headers, flags, compiler) would not show.
CODEGEN_VERSION = 1

T = TypeVar("T")


class Failed(Exception):
    """A build step failed: `log` is kept in the failed directory's build.log, and
    `describe(kept)` says what happened, naming the kept directory."""

    def __init__(self, log: str, describe: Callable[[Path, str], str]):
        super().__init__(log)
        self.log, self.describe = log, describe


def stderr_is_terminal() -> bool:
    """Whether stderr is a terminal, where a build shows its progress and notices: not a
    log or a pipe, nor a stderr closed when the process started (sys.stderr None, as
    in pythonw), which was an AttributeError of every build that compiled."""
    return sys.stderr is not None and sys.stderr.isatty()


def cache_dir() -> Path:
    """The cache root: `$MDL_CACHE_DIR`, else `$XDG_CACHE_HOME/mdl`, else `~/.cache/mdl`."""
    if os.environ.get("MDL_CACHE_DIR"):
        return Path(os.environ["MDL_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mdl"


def sha256(data: str | bytes) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


def digest(fields: dict) -> str:
    """The cache's one key recipe: a sha256 of the fields as sorted JSON, 32 hex digits."""
    return sha256(json.dumps(fields, sort_keys=True))[:32]


def write_key(directory: Path, fields: dict) -> None:
    """A build directory's key.json: what its key was computed from, readable."""
    (directory / "key.json").write_text(json.dumps(fields, indent=2, sort_keys=True) + "\n")


def read_key(directory: Path) -> dict:
    """What a build directory's key was computed from (its key.json)."""
    return json.loads((directory / "key.json").read_text())


def record_product(product: Path, also: tuple[str, ...] = ()) -> None:
    """Add the product's size and sha256 to its directory's key.json, by which `intact`
    knows it later, and the sizes of the files `also` names (relative to it: the runtime's
    precompiled header, 57 MB, too large to hash at every build)."""
    fields = read_key(product.parent)
    fields["verify"] = {"file": product.name, "size": product.stat().st_size,
                        "sha256": sha256(product.read_bytes()),
                        "also": {name: (product.parent / name).stat().st_size for name in also}}
    write_key(product.parent, fields)


def intact(product: Path) -> bool:
    """Whether a cached product is still the file that was built: its size and sha256
    those key.json recorded, and the sizes recorded of the files beside it. A truncated
    module would crash the process that loads it (SIGBUS), and a truncated precompiled
    header failed every build, so anything else (no record, an older mdl's entry) is a
    miss."""
    try:
        recorded = read_key(product.parent)["verify"]
        return (recorded["file"] == product.name
                and product.stat().st_size == recorded["size"]
                and all((product.parent / name).stat().st_size == size
                        for name, size in recorded.get("also", {}).items())
                and sha256(product.read_bytes()) == recorded["sha256"])
    except (OSError, ValueError, KeyError, TypeError):
        return False


def cached(key: str, product: str, make: Callable[[Path, Path], None],
           also: tuple[str, ...] = ()) -> Path:
    """`cache/<key>/<product>`, made by `make(work, final)` in a temporary directory `work`
    that is renamed to `final` once complete (`make` writes its key.json; the product's
    size and sha256 are added to it, and the sizes of the files `also` names). A product
    damaged since (`intact`) is built again.
    A cache directory that cannot be written (read-only, full) is an MdlBuildError naming
    it; so is a `Failed` build, whose directory is kept as `failed-<key>`."""
    root = cache_dir()
    built = root / key / product
    if intact(built):  # complete: a key directory only ever appears by rename
        return used(built)
    try:
        with _locked(lock_path(root, key)):
            if intact(built):  # another process finished it while we waited
                return used(built)
            _discard_leftovers(root, key)
            _sweep_abandoned(root, key)
            work = Path(tempfile.mkdtemp(prefix=f"tmp-{key}-", dir=root))
            work.chmod(0o755)  # mkdtemp's 0700 would hide the entry from a cache's other users
            try:
                make(work, root / key)
                record_product(work / product, also)
                work.rename(root / key)
            except Failed as failed:
                raise MdlBuildError(_keep_failed(work, root / f"failed-{key}", failed)) from None
            except BaseException:
                shutil.rmtree(work, ignore_errors=True)
                raise
    except OSError as error:
        raise MdlBuildError(_unusable_cache(root, error)) from None
    return built


LOCK_PATIENCE = 20  # tries 50 ms apart before a wait for a lock says so


def lock_path(root: Path, key: str) -> Path:
    return root / "locks" / f"{key}.lock"


def used(product: Path) -> Path:
    """Mark a cached product's entry used now (its directory's time, which `mdlc cache
    prune` goes by: docs/build.md), where the cache lets us; the product."""
    with contextlib.suppress(OSError):
        os.utime(product.parent)
    return product


def take_lock(path: Path, mode: int, wait: bool = True):
    """An open lock file, flocked with `mode` (LOCK_EX or LOCK_SH), or None where `wait` is
    False and another process holds it. The lock is on the file that `path` names once it
    is held: a prune (cache_entries.py) removes a key's lock file while holding it, so a
    process that opened it before then took a lock on a file nobody else will open, and
    opens the path again."""
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        handle = open(path, "a")
        try:
            if wait:
                fcntl.flock(handle, mode)
            else:
                fcntl.flock(handle, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            return None
        except BaseException:
            handle.close()
            raise
        try:
            same = os.path.samestat(os.fstat(handle.fileno()), os.stat(path))
        except FileNotFoundError:
            same = False
        if same:
            return handle
        handle.close()


@contextlib.contextmanager
def _locked(path: Path):
    """Hold an exclusive flock on `path` (created if needed); released when the file closes,
    also when the process dies, so a crashed build never blocks the next one. Waiting for
    another process's build more than a second says so on a terminal's stderr, once
    (behind a stopped one, Ctrl-Z, a build waited silently for ever)."""
    for _ in range(LOCK_PATIENCE):
        handle = take_lock(path, fcntl.LOCK_EX, wait=False)
        if handle is not None:
            break
        time.sleep(0.05)
    else:
        if stderr_is_terminal():  # as the progress line: logs stay as they were
            print(f"mdl: waiting for another process's build of the same product (it "
                  f"holds {path})", file=sys.stderr, flush=True)
        handle = take_lock(path, fcntl.LOCK_EX)
    with handle:
        yield


@contextlib.contextmanager
def reading(find: Callable[[], T], products: Callable[[T], Iterable[Path]]):
    """What `find()` returns (the runtime a module links, a module), built or found in the
    cache, while a build reads its `products` (a module's compile and link read the
    runtime's object and precompiled header; `mdlc build -o` copies a module, `load`
    imports it): a shared lock on each one's key, which a prune (cache_entries.py) needs
    exclusively to remove the entry. One removed before its lock was taken is found
    (built) again."""
    root = cache_dir()
    while True:
        found = find()
        paths = list(products(found))
        with contextlib.ExitStack() as held:
            for lock in sorted({_entry_lock(root, p) for p in paths}):
                handle = _shared_lock(lock)
                if handle is not None:
                    held.enter_context(handle)
            if all(p.exists() for p in paths):
                yield found
                return


def _entry_lock(root: Path, product: Path) -> Path:
    """The lock of the cache entry that holds `product`: its key's. The index names a
    module by the path it was built at, which may be another path to the cache (a copy,
    a bind mount): there the entry is the product's directory."""
    try:
        return lock_path(root, product.relative_to(root).parts[0])
    except ValueError:
        return lock_path(product.parent.parent, product.parent.name)


def _shared_lock(path: Path):
    """A shared lock on `path`, or None where the cache cannot take one (a read-only
    cache, whose entries were found there and are read as they are)."""
    try:
        return take_lock(path, fcntl.LOCK_SH)
    except OSError:
        return None


def _sweep_abandoned(root: Path, key: str) -> None:
    """Temporary directories of other keys whose builds died (SIGKILL, a power cut): a
    key's lock that nobody holds means no build of it runs. Once an edit changed the key,
    nothing else ever removed them."""
    for stale in root.glob("tmp-*"):
        other = stale.name.split("-")[1]
        if other == key:
            continue
        try:
            handle = take_lock(lock_path(root, other), fcntl.LOCK_EX, wait=False)
        except OSError:
            continue
        if handle is None:  # held: that build is running
            continue
        with handle:
            shutil.rmtree(stale, ignore_errors=True)


def _unusable_cache(root: Path, error: OSError) -> str:
    why = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is used up",
           errno.EROFS: "it is on a read-only file system",
           errno.EACCES: "it is not writable for this user",
           errno.EPERM: "it is not writable for this user"}.get(error.errno, error.strerror)
    return (f"cannot use the build cache {root}: {why} ({error.filename or root}); set "
            f"MDL_CACHE_DIR to a writable directory with free space")


def _discard_leftovers(root: Path, key: str) -> None:
    """Under the key's lock: temporary directories of builds that died (only the lock holder
    builds this key), and a key directory someone emptied or damaged by hand."""
    for stale in root.glob(f"tmp-{key}-*"):
        shutil.rmtree(stale, ignore_errors=True)
    if (root / key).exists():
        shutil.rmtree(root / key)


def _keep_failed(work: Path, kept: Path, failed: Failed) -> str:
    """Move a failed build to `kept` (replacing an older failure) and describe it."""
    shutil.rmtree(kept, ignore_errors=True)
    work.rename(kept)
    log = failed.log.replace(str(work), str(kept))  # the tools named the temporary directory
    (kept / "build.log").write_text(log)
    return failed.describe(kept, log)
