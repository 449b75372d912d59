"""Reading an .npz archive a user names on the command line or to `load`: what is not
one (an .npy, a cut or damaged archive, text) is the user's to fix, never a crash."""
from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from .diagnostics import UsageError


def read_npz(path: str | Path, what: str, name: str | None = None) -> dict[str, np.ndarray]:
    """Every array of the .npz archive `path`, read whole (a damaged member shows only when
    read); else a UsageError that `name` (the path, or the flag and path) is not `what`."""
    name = name or str(path)
    try:
        loaded = np.load(path, allow_pickle=False)
        if not isinstance(loaded, np.lib.npyio.NpzFile):
            raise UsageError(f"{name}: not {what} (it holds one array, an .npy, not an "
                             "archive of named ones as np.savez writes)")
        with loaded:
            return {k: loaded[k] for k in loaded.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        if isinstance(exc, ValueError) and "pickled" in str(exc):  # NumPy's last guess
            raise UsageError(f"{name}: not {what} (neither an .npz archive nor an .npy: a "
                             "text, or a file of another kind)") from None
        raise UsageError(f"{name}: not {what} ({type(exc).__name__}: {exc})") from None
