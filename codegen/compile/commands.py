"""Running a build step's compiler commands: side by side, each one's output collected by a
thread, a progress line on stderr while they run, everything they printed in the build
directory's build.log, and a failure described by the compiler's first error (with the
lines that say where it was reached from). Two build steps side by side (side_by_side):
a GPU target's runtime object beside the host's."""
from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, TypeVar

from ..ir.diagnostics import count
from .cache import Failed, read_key
from .process_tree import end_tree

ERROR_LINES = 25  # of the compiler's output quoted in an MdlBuildError
# ld says why a link failed on a line of its own, without `error:` (`/usr/bin/ld: final link
# failed: No space left on device`), and collect2's `error: ld returned 1 exit status` after it
FULL_DISK = ("No space left on device", "Disk quota exceeded")
# ld's own line (`/usr/bin/ld: cannot find -lomp`, `/usr/bin/ld: unrecognized option
# ...`), its warnings left out: collect2's summary after it says less
LINKER_LINE = r"^(\S*/)?(ld|ld\.\w+|lld): (?!warning)"
FIRST_ERROR = re.compile(r"error:|undefined reference|final link failed|"
                         + "|".join(FULL_DISK) + "|" + LINKER_LINE)
# collect2's summary of the linker's error before it: part of that error, not another
SUMMARY = "collect2: error: ld returned"
# Lines a compiler prints before an error to say where it was reached from.
CONTEXT = re.compile(r"^(In file included from |\s+from |\S+: In |\S+:\d+:\d+: +required )")


class Stopped(Exception):
    """A build step given up because the step beside it failed or was interrupted."""


# a side_by_side background thread's `stop`: its compilers end when the other side fails
_beside = threading.local()


def run_commands(work: Path, commands: list[list[str]], label: str, show: bool) -> None:
    """Run compiler commands side by side; their output goes to work/build.log. Raises
    `Failed` (the cache keeps the directory) when one of them fails, and `Stopped` (their
    compilers killed) on a side_by_side background thread whose other side failed."""
    stop = getattr(_beside, "stop", None)
    procs: list[_Process] = []
    watchdog = None
    try:
        with _Progress(label, show) as progress:
            watchdog = _Watchdog()
            for command in commands:
                procs.append(_Process(command))
                watchdog.watch(procs[-1].proc.pid)
            while any(p.running() for p in procs):
                if stop is not None and stop.is_set():
                    raise Stopped(label)
                progress.draw()
                time.sleep(0.05)
    finally:
        for p in procs:
            p.stop()
        if watchdog is not None:
            watchdog.done()
    log = "".join(f"{' '.join(p.command)}\n{p.output()}" for p in procs)
    with open(work / "build.log", "a") as file:  # after the build's earlier steps
        file.write(log)
    if any(p.status for p in procs):
        raise Failed(log, _describe_failure)


A = TypeVar("A")
B = TypeVar("B")


def side_by_side(background: Callable[[], A], here: Callable[[], B], label: str,
                 show: bool) -> tuple[A, B]:
    """`background()` on a thread of its own while `here()` runs on this one (each runs
    its own compilers: a GPU target's runtime object beside the host's), then waited for
    under the progress line `label` if it has not ended; its exception is raised here. If
    `here()` fails or is interrupted (Ctrl-C), the background's compilers are killed
    (`Stopped`) before its exception goes on: no build runs on unseen."""
    done: dict = {}
    stop = threading.Event()

    def run() -> None:
        _beside.stop = stop
        try:
            done["value"] = background()
        except BaseException as error:  # raised again on this thread
            done["error"] = error
    thread = threading.Thread(target=run, daemon=True)
    started = time.monotonic()
    thread.start()
    try:
        mine = here()
    except BaseException:
        stop.set()
        thread.join()
        raise
    with _Progress(label, show and thread.is_alive(), started) as progress:
        while thread.is_alive():
            progress.draw()
            thread.join(0.05)
    if "error" in done:
        raise done["error"]
    return done["value"], mine


class _Process:
    """A compiler run whose output a background thread collects (a full pipe would
    stall it)."""

    def __init__(self, command: list[str]):
        self.command = command
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, errors="replace")
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        with self.proc.stdout as pipe:  # closed here: left open, Python warned of it
            self.lines.extend(pipe)

    def running(self) -> bool:
        return self.reader.is_alive() or self.proc.poll() is None

    @property
    def status(self) -> int:
        return self.proc.wait()

    def output(self) -> str:
        self.reader.join()
        return "".join(self.lines)

    def stop(self) -> None:
        """Interrupted: end the driver and the compilers it runs (process_tree.end_tree:
        killing the driver alone left cc1plus compiling on into a deleted directory, where
        the signal reached this process only: an IDE's stop, a notebook's interrupt,
        SIGTERM)."""
        if self.proc.poll() is not None:
            return
        end_tree(self.proc.pid)
        self.proc.wait()


class _Watchdog:
    """process_tree.py run beside the compilers: it ends them if this process dies without
    a word (SIGKILL, the OOM killer), which no code here can catch. Its pipe is this
    process's alone (subprocess closes other descriptors in every child). It starts before
    the compilers and is told each one's pid as it starts; `done` written to it, once the
    compilers have ended, lets it go without ending anything."""

    def __init__(self):
        self.proc = None
        if not Path(sys.executable).name.startswith(("python", "pypy")):
            return  # an embedded or frozen Python (uWSGI's is uwsgi): none to start
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-I", "-S", str(Path(__file__).with_name("process_tree.py"))],
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, text=True)
        except OSError:  # the build goes on unwatched, as before there was a watchdog
            self.proc = None

    def watch(self, pid: int) -> None:
        if self.proc is None:
            return
        try:
            self.proc.stdin.write(f"{pid}\n")
            self.proc.stdin.flush()
        except OSError:  # it died (a broken pipe): the build goes on unwatched
            self._forget()

    def done(self) -> None:
        if self.proc is None:
            return
        try:
            self.proc.communicate("done\n")
        except OSError:  # it died: nothing of it to end
            self._forget()

    def _forget(self) -> None:
        try:
            self.proc.stdin.close()
        except OSError:  # what it could not take is dropped
            pass
        self.proc.wait()
        self.proc = None


class _Progress:
    """`building charlm... 2s` on stderr, redrawn in place; nothing when disabled."""

    def __init__(self, label: str, enabled: bool, start: float | None = None):
        self.label, self.enabled = label, enabled
        self.start = time.monotonic() if start is None else start  # counted from
        self.shown = ""

    def __enter__(self) -> _Progress:
        self.draw()
        return self

    def __exit__(self, *exc) -> None:
        self._write("")

    def draw(self) -> None:
        self._write(f"{self.label}... {time.monotonic() - self.start:.0f}s")

    def _write(self, text: str) -> None:
        if not self.enabled or text == self.shown or sys.stderr is None:
            return
        # Spaces, not terminal escapes, erase the old text: the stream may be a log file.
        sys.stderr.write("\r" + text.ljust(len(self.shown)) + ("" if text else "\r"))
        sys.stderr.flush()
        self.shown = text


def _describe_failure(kept: Path, log: str) -> str:
    what = read_key(kept)
    name = f"`{what['module']}`" if "module" in what else f"the mdl {what['product']}"
    full = ([f"a disk is full: the build cache's ({kept.parent}) or the compiler's "
             f"temporary files' ({tempfile.gettempdir()}); free space there, or set "
             "MDL_CACHE_DIR or TMPDIR to a directory with free space"]
            if any(words in log for words in FULL_DISK) else [])
    return "\n".join([f"building {name} failed; the compiler said:", _first_errors(log), *full,
                      f"the build directory is kept at {kept} (full log: "
                      f"{kept / 'build.log'})"])


def _first_errors(log: str) -> str:
    """The first error: the lines that say where it was reached from, the error, its source
    line and notes; then a count of what the full log holds beyond it."""
    lines = log.splitlines()
    first = next((i for i, line in enumerate(lines) if FIRST_ERROR.search(line)), None)
    if first is None:  # no recognizable error (a crash, a killed compiler): the log's end
        return "\n".join(lines[-ERROR_LINES:])
    start = first
    while start > 0 and CONTEXT.match(lines[start - 1]):
        start -= 1
    def another(line: str) -> bool:
        return bool(FIRST_ERROR.search(line)) and not line.startswith(SUMMARY)
    end = next((i for i in range(first + 1, len(lines))
                if CONTEXT.match(lines[i]) or another(lines[i])), len(lines))
    end = min(end, start + ERROR_LINES)
    rest = sum(1 for line in lines[end:] if another(line))
    more = [f"... and {count(rest, 'more error')} in the full log"] if rest else []
    return "\n".join(lines[start:end] + more)
