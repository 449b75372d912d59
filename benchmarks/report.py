"""The Markdown of a run: a header (machine, threads, method, versions, the sgemm peak),
one table per group with every framework's median, the ratios ours/peer and GFLOP/s,
notes for peers that did not run, and the memory table."""
from __future__ import annotations

from benchmarks.cases import COMPILE, DECODE, GROUPS, STEP

UNITS = {STEP: ("us", 1e3)}  # other passes: ms
# What a pass's check compares (every other pass: LOSS).
LOSS = ("the loss (a loss sum(hs * weights) relative to the size of its terms) and the "
        "gradients of the parameters and the float inputs")
CHECKED = {STEP: "the final states",
           DECODE: "the scores of the tokens decoded, which were the same tokens"}


def markdown(result: dict) -> str:
    """The whole report."""
    lines = _header(result)
    for group, (_, _, description) in GROUPS.items():
        rows = [r for r in result["rows"] if r["group"] == group]
        if rows:
            lines += ["", f"## {group}: {description}", "", *_timed(rows)]
    if result["memory"]:
        lines += ["", "## memory: " + GROUPS["memory"][2], "", *_memory(result["memory"])]
    return "\n".join(lines) + "\n"


def _header(result: dict) -> list[str]:
    meta, peak = result["meta"], result["peak"]
    versions = ", ".join(f"{k} {v}" for k, v in sorted(meta["versions"].items()))
    gflops = ", ".join(f"{g:.0f} GFLOP/s on {n} thread{'s' * (n != '1')}"
                       for n, g in peak["gflops"].items())
    return [f"`{meta['command']}` ({meta['date']})", "",
            *([f"On the GPU: {meta['gpu']} (float32 without TF32; every pass waits for the "
               "GPU before it returns)."] if meta.get("device") == "cuda" else []),
            f"{meta['machine']}, {meta['cpus']} CPUs; every framework in its own process "
            f"with {meta['threads']} thread(s); float32; medians of {meta['reps']} reps in "
            f"{meta['rounds']} interleaved rounds after {meta['warmups']} warm-ups; {versions}.",
            f"sgemm peak ({'PyTorch on the GPU' if meta.get('device') == 'cuda' else 'numpy'}, "
            f"{peak['n']}x{peak['n']}): {gflops}. GFLOP/s count only the "
            "matrix products (2*B*(I+H)*G*H a step for G gates; a training step is 3x the "
            "forward); % is of the peak at the run's thread count."]


def _num(x: float) -> str:
    return f"{x:.0f}" if x >= 100 else f"{x:.1f}" if x >= 10 else f"{x:.3g}"


def _timed(rows: list[dict]) -> list[str]:
    frameworks = list(rows[0]["results"])
    peers = frameworks[1:]
    dims = list(rows[0]["dims"])
    head = [*dims, "pass", *(f"{fw}" for fw in frameworks), *(f"mdl/{p}" for p in peers),
            "GFLOP/s (% of peak)"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for row in rows:
        unit, scale = UNITS.get(row["pass"], ("ms", 1))
        results = row["results"]
        times = [f"{_num(results[fw]['ms'] * scale)} {unit}" if "ms" in results[fw] else "—"
                 for fw in frameworks]
        ratios = [f"{results[p]['ratio']:.2f}" if "ratio" in results[p] else "—" for p in peers]
        speeds = ", ".join(f"{fw} {results[fw]['gflops']:.3g} ({results[fw]['peak_fraction']:.0%})"
                           for fw in frameworks if "gflops" in results[fw])
        cells = [*(str(row["dims"][d]) for d in dims), row["pass"], *times, *ratios, speeds]
        lines.append("| " + " | ".join(cells) + " |")
    return lines + [""] + _notes(rows, frameworks)


def _notes(rows: list[dict], frameworks: list[str]) -> list[str]:
    notes = []
    errors = {fw: max((r["results"][fw].get("max_rel_err", 0.0) for r in rows), default=0.0)
              for fw in frameworks[1:]}
    checked = [f"{fw} {e:.1e}" for fw, e in errors.items()
               if any("max_rel_err" in r["results"][fw] for r in rows)]
    if checked:
        notes.append("Outputs checked against mdl's on the same weights before timing, "
                     "largest normwise relative error over "
                     f"{CHECKED.get(rows[0]['pass'], LOSS)}: {', '.join(checked)}.")
    compiles = {r["case"]: r["results"][COMPILE] for r in rows
                if "compile_s" in r["results"].get(COMPILE, {})}
    if compiles:
        notes.append(f"torch.compile's first {rows[0]['pass']} (compiling), and the graphs it "
                     "made (none: Dynamo gave up on the loop, which runs eagerly): " + ", ".join(
                         f"{case} {c['compile_s']:.1f} s ({c['graphs']} graphs)"
                         for case, c in compiles.items()) + ".")
    statuses = {}
    for r in rows:
        for fw, res in r["results"].items():
            if res["status"] != "ok":
                statuses.setdefault(f"{fw}: {res['status']}", []).append(r["case"])
    notes += [f"{s} ({', '.join(dict.fromkeys(cases))})." for s, cases in statuses.items()]
    return ["- " + n for n in notes]


def _memory(rows: list[dict]) -> list[str]:
    lines = ["| loop | T | B | H | peak growth MiB | stored / this | step ms | "
             "this / stored | rel. error vs stored |", "|" + " --- |" * 9]
    for row in rows:
        d, vs = row["dims"], row.get("vs_stored", {})
        loop = row["loop"] + (f" = {d['K']}" if "K" in d else "")
        if "growth_mib" not in row:
            lines.append(f"| {loop} | {d['T']} | {d['B']} | {d['H']} | {row['status']} |"
                         + " |" * 4)
            continue
        less = vs.get("memory_less")
        cells = [loop, d["T"], d["B"], d["H"], f"{row['growth_mib']:.1f}",
                 f"{less:.2f}" if less else "—", _num(row["step_ms"]),
                 f"{vs['time_ratio']:.2f}" if vs else "—",
                 f"{vs['max_rel_err']:.1e}" if vs else "—"]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    return lines + ["", "- Growth of the peak resident set of a fresh process over its "
                    "resident set just before the first training step (the model built, "
                    "inputs made), through the steps timed. A step's time is the median "
                    "of the steps one process ran of every loop option in turn, and this / "
                    "stored the median of a round's two steps' ratio. "
                    + "".join(f"{row['loop']}: {row['status']}. " for row in rows
                              if row["status"] not in ("ok",) and "growth_mib" in row)]
