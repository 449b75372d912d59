"""What the build cache holds, and removing what builds no longer use (`mdlc cache`;
docs/build.md, "What the cache holds, and pruning it"). Nothing in the cache expires by
itself, so without this it only grows: a day of edits leaves a module of a megabyte or
more for every edit, and a new compiler or flag set a runtime of about 60 MB.

An entry's time is its directory's: the time it was built, and then the last time a
build or an import found it (cache.used). An entry is removed only under an exclusive
lock on its key, which a build holds while it makes the entry and shares while it reads
a runtime's files (cache.reading): an entry in use stays, and is reported so."""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from .cache import cache_dir, lock_path, read_key, take_lock

KEY = re.compile(r"[0-9a-f]{32}")
DAY = 86400.0
DEFAULT_DAYS = 30.0  # `mdlc cache prune` without a limit

# the kinds of entries, in the order reports list them
MODULE, RUNTIME, FAILED, UNFINISHED = "module", "runtime", "failed build", "unfinished build"
KINDS = (MODULE, RUNTIME, FAILED, UNFINISHED)


@dataclass(frozen=True)
class Entry:
    path: Path
    key: str
    kind: str
    name: str     # a module's name, or which runtime object ("runtime", "cuda runtime", ...)
    size: int     # bytes on disk
    used: float   # when a build last made or found it (seconds since the epoch)


@dataclass
class Pruned:
    removed: list[Entry]
    in_use: list[Entry]     # chosen, but a build holds its key: kept
    index_entries: int      # the index's entries of modules that are gone
    lock_files: int         # lock files of keys that have no entry left


def entries(root: Path) -> list[Entry]:
    """The cache's entries, least recently used first (none where the cache is missing).
    Only what the cache itself names is listed (and ever removed): `<key>/`,
    `failed-<key>/`, `tmp-<key>-*/`."""
    found = []
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        for child in root.iterdir():
            entry = _entry(child)
            if entry is not None:
                found.append(entry)
    return sorted(found, key=lambda e: (e.used, e.path.name))


def _entry(path: Path) -> Entry | None:
    name = path.name
    if KEY.fullmatch(name):
        key, kind = name, None
    elif name.startswith("failed-") and KEY.fullmatch(name[len("failed-"):]):
        key, kind = name[len("failed-"):], FAILED
    elif name.startswith("tmp-") and KEY.fullmatch(name.split("-")[1]):
        key, kind = name.split("-")[1], UNFINISHED
    else:
        return None
    try:
        if not path.is_dir() or path.is_symlink():
            return None
        used = path.stat().st_mtime
    except OSError:
        return None   # removed meanwhile
    try:
        fields = read_key(path)
    except (OSError, ValueError):
        fields = {}
    product = fields.get("product") if isinstance(fields, dict) else None
    if kind is None:
        kind = MODULE if product == "module" else RUNTIME
    label = fields.get("module") if product == "module" else product
    return Entry(path, key, kind, str(label or "?"), _disk_size(path), used)


def _disk_size(path: Path) -> int:
    """Bytes a directory takes on disk (its files' blocks, as `du` counts them)."""
    total = 0
    stack = [path]
    while stack:
        try:
            with os.scandir(stack.pop()) as listing:
                for item in listing:
                    with contextlib.suppress(OSError):
                        info = item.stat(follow_symlinks=False)
                        total += info.st_blocks * 512
                        if item.is_dir(follow_symlinks=False):
                            stack.append(Path(item.path))
        except OSError:
            continue
    return total


def index_entries(root: Path) -> list[Path]:
    with contextlib.suppress(OSError):
        return [p for p in (root / "index").iterdir() if p.is_file()]
    return []


def choose(found: list[Entry], older_than: float | None, max_bytes: int | None,
           now: float) -> list[Entry]:
    """The entries a prune removes: unfinished builds (their locks decide: `remove`),
    entries no build has used for `older_than` seconds, then the least recently used
    others until the rest take at most `max_bytes`."""
    chosen = [e for e in found if e.kind == UNFINISHED
              or (older_than is not None and now - e.used > older_than)]
    if max_bytes is not None:
        kept = [e for e in found if e not in chosen]
        total = sum(e.size for e in kept)
        for e in kept:   # least recently used first
            if total <= max_bytes:
                break
            chosen.append(e)
            total -= e.size
    return chosen


def remove(root: Path, chosen: list[Entry], dry_run: bool = False) -> Pruned:
    """Remove `chosen`, each under its key's lock, taken without waiting: a key a build
    holds (a build running, a runtime being read) stays, in `in_use`. Then the index's
    entries of modules that are gone, and the lock files of keys that have no entry.
    `dry_run`: only find which would go."""
    pruned = Pruned([], [], 0, 0)
    for entry in chosen:
        try:
            handle = take_lock(lock_path(root, entry.key), fcntl.LOCK_EX, wait=False)
        except OSError:
            if not dry_run:
                raise
            # a cache that cannot take a lock (read-only) is only read: say what would go
            handle = contextlib.nullcontext()
        if handle is None:
            if entry.kind != UNFINISHED:  # a build that runs is not news
                pruned.in_use.append(entry)
            continue
        with handle:
            if dry_run or _remove_directory(root, entry):
                pruned.removed.append(entry)
    # a dry run counts what the removal would leave orphaned as the run itself does
    going = {e.path for e in pruned.removed} if dry_run else None
    pruned.index_entries = _remove_orphaned_index(root, going)
    pruned.lock_files = _remove_unused_locks(root, going)
    return pruned


def _remove_directory(root: Path, entry: Entry) -> bool:
    """Under its key's lock: the entry's directory goes away at once (renamed aside, so no
    process finds half of it), then its files."""
    aside = root / f"tmp-{entry.key}-removed-{os.getpid()}"
    try:
        if entry.kind == UNFINISHED:
            aside = entry.path
        else:
            shutil.rmtree(aside, ignore_errors=True)
            entry.path.rename(aside)
    except FileNotFoundError:
        return False   # another prune took it
    shutil.rmtree(aside, ignore_errors=True)
    return True


def _remove_orphaned_index(root: Path, going: set[Path] | None) -> int:
    """Index entries whose module is gone (they would only send a build to the full
    check), and the temporary files of index writes that died. `going` (a dry run's
    entries that would go; None in a real run): count those it would leave so, and
    remove nothing."""
    count = 0
    for entry in index_entries(root):
        if entry.suffix == ".tmp":
            pid = entry.name.split(".")[-2]
            gone = pid.isdigit() and not Path(f"/proc/{pid}").exists()
        else:
            try:
                built = Path(json.loads(entry.read_text())["built"])
                gone = not built.exists() or any(built.is_relative_to(p) for p in going or ())
            except (OSError, ValueError, KeyError, TypeError):
                gone = True   # unreadable: no entry, as index.lookup reads it
        if gone and going is not None:
            count += 1
        elif gone:
            with contextlib.suppress(FileNotFoundError):
                entry.unlink()
                count += 1
    return count


def _remove_unused_locks(root: Path, going: set[Path] | None) -> int:
    """Lock files of keys that have no entry: removed while held (cache.take_lock: a
    process that opened one before then opens the path again). `going`: as for
    _remove_orphaned_index."""
    count = 0
    try:
        locks = list((root / "locks").glob("*.lock"))
    except OSError:
        return 0
    for path in locks:
        key = path.stem
        if _has_entry(root, key, going):
            continue
        if going is not None:
            count += 1
            continue
        handle = take_lock(path, fcntl.LOCK_EX, wait=False)
        if handle is None:
            continue
        with handle:
            if not _has_entry(root, key, going):   # a build may have made one meanwhile
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                    count += 1
    return count


def _has_entry(root: Path, key: str, going: set[Path] | None) -> bool:
    going = going or set()
    return any(p not in going for p in (root / key, root / f"failed-{key}") if p.exists()) \
        or any(p not in going for p in root.glob(f"tmp-{key}-*"))


def where() -> tuple[Path, str]:
    """The cache's root, and what chose it."""
    if os.environ.get("MDL_CACHE_DIR"):
        return cache_dir(), "$MDL_CACHE_DIR"
    if os.environ.get("XDG_CACHE_HOME"):
        return cache_dir(), "$XDG_CACHE_HOME/mdl"
    return cache_dir(), "the default"


def summary(root: Path, chosen_by: str, found: list[Entry], now: float) -> str:
    """`mdlc cache`: where the cache is, and what it holds by kind."""
    if not found and not index_entries(root):
        return f"the build cache {root} ({chosen_by}) is empty"
    lines = [f"the build cache {root} ({chosen_by}):"]
    for kind in KINDS:
        of_kind = [e for e in found if e.kind == kind]
        if of_kind or kind in (MODULE, RUNTIME):
            plural = kind + ("es" if kind.endswith("h") else "s")
            lines.append(f"  {len(of_kind):6}  {(kind if len(of_kind) == 1 else plural):18}"
                         f"{size_text(sum(e.size for e in of_kind)):>10}")
    lines.append(f"  {size_text(sum(e.size for e in found))} in all, and "
                 f"{len(index_entries(root))} index entries")
    if found:
        lines.append(f"  used: the least recently {age_text(now - found[0].used)} ago, the "
                     f"most recently {age_text(now - found[-1].used)} ago")
    return "\n".join(lines)


def listing(found: list[Entry]) -> str:
    """`mdlc cache list`: an entry a line, least recently used first."""
    return "\n".join(f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(e.used))}  "
                     f"{size_text(e.size):>10}  {e.kind:16}  {e.name:24}  {e.path.name}"
                     for e in found)


def pruned_text(pruned: Pruned, dry_run: bool) -> str:
    """What a prune or a clear did (or, `dry_run`, would do), an entry a line."""
    verb = "would remove" if dry_run else "removed"
    lines = [f"{verb} {e.kind} {e.name} ({size_text(e.size)}, last used "
             f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(e.used))}): {e.path.name}"
             for e in pruned.removed]
    lines += [f"kept {e.kind} {e.name}: a build is using it ({e.path.name})"
              for e in pruned.in_use]
    freed = sum(e.size for e in pruned.removed)
    entries_word = "entry" if len(pruned.removed) == 1 else "entries"
    lines.append(f"{verb} {len(pruned.removed)} {entries_word}, {size_text(freed)}, "
                 f"{counted(pruned.index_entries, 'index entry', 'index entries')} and "
                 f"{counted(pruned.lock_files, 'lock file', 'lock files')}")
    return "\n".join(lines)


def counted(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def size_text(size: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def age_text(seconds: float) -> str:
    for unit, length in (("day", DAY), ("hour", 3600.0), ("minute", 60.0)):
        if seconds >= length:
            count = int(seconds // length)
            return f"{count} {unit}{'s' if count != 1 else ''}"
    return "less than a minute"


def parse_size(text: str) -> int:
    """A size as `--max-size` takes it: bytes, or a number with K, M, G or T (KiB, MiB,
    GiB, TiB: 1024s; a trailing B or iB is optional)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*([KMGT]?)(?:I?B)?\s*", text.upper())
    if match is None:
        raise ValueError(f"expected a size such as 500M or 2G, got {text!r}")
    return int(float(match[1]) * 1024 ** " KMGT".index(match[2] or " "))
