"""Files that mdl writes where a user's code may be reading them: written beside, then
renamed over the old one, so that a reader sees the old file whole or the new one whole.

A module is the case that matters: a Python that imported `out/m.so` maps that file, and
writing the next build into it in place (what shutil.copyfile does) changed the code under
the running process, which crashed on its next call. A rename leaves the old file's inode,
and the process's mapping of it, as they were."""
from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path


def copy_over(source: str | Path, target: str | Path) -> None:
    """Copy `source` to `target`, replacing it in one rename."""
    _replace(Path(target), lambda tmp: shutil.copyfile(source, tmp))


def write_over(target: str | Path, text: str) -> None:
    """Write `text` to `target`, replacing it in one rename."""
    _replace(Path(target), lambda tmp: tmp.write_text(text))


def _replace(target: Path, write) -> None:
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        write(tmp)
        if target.exists():  # the mode it had (a module made executable by a linker)
            shutil.copymode(target, tmp)
        os.replace(tmp, target)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if isinstance(exc, OSError) and exc.filename == str(tmp):
            exc.filename = str(target)  # what the user asked for, in the message
        raise
