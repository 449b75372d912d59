"""Ending a compiler driver and the compilers it runs, from this process or, run as a
script, from a watchdog that outlives it.

Killing a driver (g++, nvcc) alone leaves cc1plus or cicc compiling on into a build
directory that is gone: the driver is stopped first, so that it starts nothing new, then
it and its descendants are killed. `commands.py` does so when a build is interrupted or
fails beside another. A build whose Python is killed outright (SIGKILL, the OOM killer)
runs no code of its own, so each build step also starts this file as a script with the
drivers' pids: it waits on a pipe that only the building process holds, and if the pipe
closes without `done` being written, that process died and the watchdog ends the
drivers. It imports nothing of mdl's (it runs as `python -I -S` on its own)."""
from __future__ import annotations

import os
import signal
import sys
from pathlib import Path


def descendants(pid: int) -> list[int]:
    """The processes `pid` started, and theirs (Linux's /proc/PID/task/TID/children)."""
    found = []
    for children in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            found += [int(c) for c in children.read_text().split()]
        except OSError:
            continue
    return [d for child in found for d in (child, *descendants(child))]


def end_tree(pid: int) -> None:
    """Stop `pid`, then kill its descendants and it. Gone already: nothing."""
    try:
        os.kill(pid, signal.SIGSTOP)
        for each in [*descendants(pid), pid]:
            os.kill(each, signal.SIGKILL)
    except ProcessLookupError:  # it ended meanwhile
        pass


def watch(pids: list[int]) -> None:
    """Block until standard input closes; unless it said `done`, end each tree."""
    said = sys.stdin.read()
    if said.strip() != "done":
        for pid in pids:
            end_tree(pid)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the builder's
    watch([int(word) for word in sys.argv[1:]])
