"""The PNG of a run: for every timed row, the ratio ours/peer for each peer on a log
scale, with the line at 1 (left of it mdl is faster). matplotlib is optional."""
from __future__ import annotations

from pathlib import Path


def plot(result: dict, path: Path) -> str:
    """Draws the ratios into `path`; returns what it did, or why not."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "no plot: matplotlib is not installed (pip install matplotlib)"
    rows = [r for r in result["rows"] if any("ratio" in v for v in r["results"].values())]
    if not rows:
        return "no plot: no row has a ratio to a peer"
    peers = list(dict.fromkeys(fw for r in rows for fw, v in r["results"].items()
                               if "ratio" in v))
    height = 0.8 / len(peers)
    fig, ax = plt.subplots(figsize=(8, 1.5 + 0.35 * len(rows) * max(1, len(peers) / 2)))
    for k, peer in enumerate(peers):
        bars = [(i + k * height, r["results"][peer]["ratio"]) for i, r in enumerate(rows)
                if "ratio" in r["results"].get(peer, {})]
        ax.barh(*zip(*bars), height=height, label=f"mdl / {peer}")
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_yticks([i + 0.4 - height / 2 for i in range(len(rows))],
                  [f"{r['case']} {r['pass']}" for r in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("time ratio mdl / peer (log scale; < 1: mdl is faster)")
    ax.set_title(f"{result['meta']['machine']}, {result['meta']['threads']} thread(s)",
                 fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return f"plot: {path}"
