"""Ending a compiler driver and the compilers it runs, from this process or, run as a
script, from a watchdog that outlives it.

Killing a driver (g++, nvcc) alone leaves cc1plus or cicc compiling on into a build
directory that is gone: the driver is stopped first, so that it starts nothing new, then
it and its descendants are killed. `commands.py` does so when a build is interrupted or
fails beside another. A build whose Python is killed outright (SIGKILL, the OOM killer)
runs no code of its own, so each build step also starts this file as a script before its
compilers, and writes it each driver's pid as it starts: it reads a pipe that only the
building process holds, and if the pipe closes without `done` being written, that process
died and the watchdog ends the drivers. It imports nothing of mdl's (it runs as `python -I -S` on its own)."""
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


def watch(lines) -> None:
    """Read the pids of the drivers to watch, a line each, until `done` (the build ended
    them itself) or the end of the input without it (the build died): then end each."""
    pids = []
    for line in lines:
        if line.strip() == "done":
            return
        pids.append(int(line))
    for pid in pids:
        end_tree(pid)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the builder's
    watch(sys.stdin)
