"""The driver's side of the worker processes (benchmarks/worker.py): one process per
framework and thread count, started when first needed and kept for every case after it,
so that the driver can interleave their repetitions; a worker's stderr goes to its log."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


class WorkerError(Exception):
    """A request the worker could not carry out; `missing`: its framework is not installed."""

    def __init__(self, message: str, missing: bool = False):
        super().__init__(message)
        self.missing = missing


class Process:
    """One worker process and its pipes."""

    def __init__(self, framework: str, threads: int, quick: bool, logs: Path, env: dict):
        self.framework = framework
        logs.mkdir(parents=True, exist_ok=True)
        self.log_path = logs / f"{framework}-{threads}t.log"
        paths = [str(CHECKOUT), *filter(None, [os.environ.get("PYTHONPATH")])]
        env = {**os.environ, **env, **{v: str(threads) for v in THREAD_VARIABLES},
               "PYTHONPATH": os.pathsep.join(paths)}
        with open(self.log_path, "a") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "benchmarks.worker", framework, "--threads",
                 str(threads), *(["--quick"] if quick else [])],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True, env=env)
        try:
            hello = self._read()
        except WorkerError:
            self.close()
            raise
        self.distribution, self.version = hello["distribution"], hello["version"]

    def call(self, op: str, **fields) -> dict:
        """Sends one request and returns its reply; a failure raises WorkerError."""
        try:
            self.proc.stdin.write(json.dumps({"op": op, **fields}) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass  # the worker is gone: _read says why
        return self._read()

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            status = self.proc.wait()
            tail = self.log_path.read_text().strip().splitlines()[-1:] or ["(empty log)"]
            raise WorkerError(f"the {self.framework} worker exited with status {status}: "
                              f"{tail[0]} (log: {self.log_path})")
        reply = json.loads(line)
        if "error" in reply:
            raise WorkerError(reply["error"], reply.get("missing", False))
        return reply

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write('{"op": "quit"}\n')
                self.proc.stdin.close()
            except BrokenPipeError:
                pass
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Pool:
    """The run's worker processes by (framework, threads), with `env` added to their
    environment. A framework that cannot be imported is remembered, so that its later
    cases say so without trying again."""

    def __init__(self, threads: int, quick: bool, logs: Path, env: dict[str, str]):
        self.threads, self.quick, self.logs, self.env = threads, quick, logs, env
        self.running: dict[tuple[str, int], Process] = {}
        self.missing: dict[str, str] = {}
        self.versions: dict[str, str] = {}  # by distribution, of every worker started

    def get(self, framework: str, threads: int | None = None) -> Process:
        """The running worker of `framework`, started if needed."""
        if framework in self.missing:
            raise WorkerError(self.missing[framework], missing=True)
        key = (framework, threads or self.threads)
        if key not in self.running:
            self.running[key] = self.fresh(framework, key[1])
        return self.running[key]

    def fresh(self, framework: str, threads: int | None = None) -> Process:
        """A new worker of its own (the caller closes it)."""
        try:
            process = Process(framework, threads or self.threads, self.quick, self.logs,
                              self.env)
        except WorkerError as exc:
            if exc.missing:
                self.missing[framework] = str(exc)
            raise
        self.versions[process.distribution] = process.version
        return process

    def close(self) -> None:
        for process in self.running.values():
            process.close()
        self.running.clear()

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
