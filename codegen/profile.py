"""Where a model's time goes: the report of a profiled build (`mdlc build --profile`,
`load(..., profile=True)`), whose code times each of its sites (codegen/backend/profile.py)
into counts its model's `profile()` returns, and `mdlc profile`, which builds a model so,
runs it on random inputs or a file's, and prints the report."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Row:
    """The counts of the sites at one place doing one thing inside one row (two products of
    one line; a specialization's site and the generic code's), summed; `depth`: how many
    rows it runs inside."""
    function: str
    where: str
    what: str
    depth: int
    runs: int = 0
    seconds: float = 0.0
    children: list[Row] = field(default_factory=list)


def rows(profile: list[dict]) -> list[Row]:
    """The sites of `profile()` as trees, one a function, in the order of the code (a Row
    for the sites of one place, what and parent); sites that never ran are left out."""
    roots: list[Row] = []
    made: dict[int, Row] = {}
    for site in profile:
        parent = made.get(site["parent"]) if site["parent"] >= 0 else None
        if site["parent"] >= 0 and parent is None:
            continue  # inside a site that is left out
        siblings = parent.children if parent is not None else roots
        key = (site["function"], site["where"], site["what"])
        row = next((r for r in siblings if (r.function, r.where, r.what) == key), None)
        if row is None:
            if site["runs"] == 0:
                continue
            row = Row(site["function"], site["where"], site["what"],
                      parent.depth + 1 if parent is not None else 0)
            siblings.append(row)
        row.runs += site["runs"]
        row.seconds += site["seconds"]
        made[site["site"]] = row
    return roots


def table(profile: list[dict], calls: int | None = None) -> str:
    """`profile()`'s counts as a table: each function, then what ran inside it, indented
    under the loops and branches holding it, with its runs, its time (per call, given how
    many `calls` there were: None for totals) and its share of its function's time."""
    if calls is not None and (isinstance(calls, bool) or not isinstance(calls, int)):
        raise TypeError(f"table(calls=...) takes an int or None, got {calls!r}")
    if calls is not None and calls < 1:
        raise ValueError(f"table(calls=...) takes the number of calls profiled (>= 1) or None "
                         f"for totals, got {calls}")
    per = f"ms/call ({calls} calls)" if calls else "ms"
    scale = 1e3 / calls if calls else 1e3
    lines: list[tuple[str, str, str, str, str]] = []

    def add(row: Row, total: float) -> None:
        runs = row.runs / calls if calls else row.runs
        share = 100.0 * row.seconds / total if total > 0 else 0.0
        lines.append(("  " * row.depth + row.what, _shown(row.where), f"{runs:g}",
                      f"{row.seconds * scale:.4f}", f"{share:.1f}"))
        for child in row.children:
            add(child, total)
    for root in rows(profile):
        add(Row(root.function, "", f"{root.function} (whole)", 0, root.runs, root.seconds,
                root.children), root.seconds)
        lines.append(("", "", "", "", ""))
    head = ("what", "where", "runs/call" if calls else "runs", per, "%")
    widths = [max(len(x[i]) for x in [head, *lines]) for i in range(5)]
    out = [_line(head, widths), _line(tuple("-" * w for w in widths), widths)]
    out += [_line(x, widths) for x in lines[:-1]]
    return "\n".join(out)


def _shown(where: str) -> str:
    """A site's source as a table shows it: a file under the working directory relative
    to it."""
    if not where:
        return "-"
    file, line, col = where.rsplit(":", 2)
    path = Path(file)
    if path.is_absolute() and path.is_relative_to(Path.cwd()):
        return f"{path.relative_to(Path.cwd()).as_posix()}:{line}:{col}"
    return where


def _line(cells: tuple[str, ...], widths: list[int]) -> str:
    left = [c.ljust(w) for c, w in zip(cells[:2], widths[:2])]
    right = [c.rjust(w) for c, w in zip(cells[2:], widths[2:])]
    return "  ".join(left + right).rstrip()


@dataclass
class Measured:
    """`calls` calls of a model (forward, or forward(training=True) and backward()), the
    time each took as Python saw it, and its `profile()` over them; `plain_seconds`: the
    same calls of the plain build's model, timed in turns with them, where one was given."""
    calls: int
    train: bool
    seconds: float
    profile: list[dict]
    plain_seconds: float | None = None

    def in_code(self) -> float:
        """The seconds the model's code took in all: its functions' whole sites."""
        return sum(r["seconds"] for r in self.profile if r["parent"] < 0)


# How far apart the plain build's time may be from the profiled one's (plain / profiled)
# before the report says that the parts' shares may not be the plain build's: the clocks
# cost up to a seventh (the char LM at T=35, B=8: 0.87x, AMD EPYC of Zen 5), and calls
# on a busy machine move by a tenth or more
PLAIN_APART = (0.8, 1.25)
ROUNDS = 4  # turns of the two builds' calls, so that both see the machine's same moments


def measure(model, inputs: dict, calls: int, train: bool, warmup: int = 2,
            plain=None) -> Measured:
    """Run `model` (of a profiled build) on `inputs`: `warmup` calls, then its counts reset
    and `calls` more, timed. `plain`: the same model of a plain build, given the same
    calls in turns with the profiled one's (in up to ROUNDS rounds)."""
    def caller(m):
        def call() -> None:
            if train:
                m.forward(**inputs, training=True)
                m.backward()
            else:
                m.forward(**inputs)
        return call
    runs = [caller(model)] + ([caller(plain)] if plain is not None else [])
    for run in runs:
        for _ in range(warmup):
            run()
    model.reset_profile()
    rounds = min(calls, ROUNDS) if plain is not None else 1
    spent = [0.0, 0.0]
    for r in range(rounds):
        share = calls * (r + 1) // rounds - calls * r // rounds
        for k, run in enumerate(runs):
            start = time.perf_counter()
            for _ in range(share):
                run()
            spent[k] += time.perf_counter() - start
    return Measured(calls, train, spent[0], model.profile(),
                    spent[1] if plain is not None else None)


def report(name: str, dims: dict[str, int], measured: Measured,
           specialized: bool = False) -> str:
    """What `mdlc profile` prints: the calls (`specialized`: of code compiled for `dims`),
    their time from Python and in the model's code, the plain build's time where it was
    measured, then the table."""
    what = "forward(training=True) and backward()" if measured.train else "forward()"
    sizes = ", ".join(f"{k}={v}" for k, v in dims.items())
    at = f" at {sizes}{' (code for these sizes)' if specialized else ''}" if sizes else ""
    per = 1e3 / measured.calls
    head = (f"{name}{at}: {measured.calls} call{'' if measured.calls == 1 else 's'} of {what}, "
            f"{measured.seconds * per:.4f} ms a call from Python, "
            f"{measured.in_code() * per:.4f} ms of it in the model's code")
    if measured.plain_seconds is not None:
        ratio = measured.plain_seconds / measured.seconds if measured.seconds > 0 else 1.0
        head += (f"\nThe plain build (no clocks), the same calls in turns: "
                 f"{measured.plain_seconds * per:.4f} ms a call, {ratio:.2f}x the profiled "
                 "build's")
        if not PLAIN_APART[0] <= ratio <= PLAIN_APART[1]:
            head += (": further apart than the clocks cost, so the shares below may not be "
                     "the plain build's (docs/profiling.md)")
    return head + "\n\n" + table(measured.profile, measured.calls)
