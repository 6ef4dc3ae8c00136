"""``disthook bench --plot PATH``: the figures of the pipeline and scaleout suites.

From the rows of ``disthook bench pipeline``: for GPipe and 1F1B, the measured speedup over
one process at each m; beside them the ideal 2m/(m+1) of two equal stages with no cost per
micro-batch, and the machine's limit measured in the same run (the ideal times the loss of
per-sample speed at smaller batches). From those of ``disthook bench scaleout``: the speedup
at each number of stages p, disthook's and torch pipelining's, beside the bound p·m/(m+p-1)
and the cores available. Needs matplotlib (the ``demo`` extra).
"""
from __future__ import annotations

import os


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError("--plot needs matplotlib: pip install -e '.[demo]'") from None
    return plt


def _save(plt, fig, ax, path: str, legend: str) -> str:
    """The common finish of a figure: the line of one process, legend, grid; written."""
    ax.axhline(1.0, color="lightgray", lw=0.8)
    ax.legend(loc=legend, fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def draw(rows: list[dict], path: str) -> list[str]:
    """The figures the rows hold, written to ``path``; with both suites' rows the scaleout
    figure goes beside it, its name ending in -scaleout. The paths written."""
    suites = {r.get("suite") for r in rows}
    if "pipeline" in suites and "scaleout" in suites:
        stem, ext = os.path.splitext(path)
        return [pipeline_plot(rows, path), scaleout_plot(rows, f"{stem}-scaleout{ext}")]
    if "scaleout" in suites:
        return [scaleout_plot(rows, path)]
    return [pipeline_plot(rows, path)]


def pipeline_plot(rows: list[dict], path: str) -> str:
    plt = _pyplot()
    pipe = [r for r in rows if r.get("suite") == "pipeline"]
    if not pipe:
        raise ValueError("--plot draws the pipeline and scaleout suites' figures: run one of "
                         "them with 'disthook bench pipeline --plot PATH' (or scaleout, or "
                         "'all')")
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=120)
    ms = sorted({r["m"] for r in pipe})
    ax.plot(ms, [2 * m / (m + 1) for m in ms], "k--", label="ideal 2m/(m+1)")
    limits = {r["m"]: r["limit"] for r in pipe if r["schedule"] == "gpipe"}
    ax.plot(ms, [limits[m] for m in ms], ":", color="gray",
            label="this machine's limit (measured)")
    for schedule, marker in (("gpipe", "o-"), ("1f1b", "s-")):
        mine = sorted((r["m"], r["speedup"]) for r in pipe if r["schedule"] == schedule)
        ax.plot([m for m, _ in mine], [s for _, s in mine], marker,
                label=f"disthook {'GPipe' if schedule == 'gpipe' else '1F1B'}")
    ax.set_xscale("log", base=2)
    ax.set_xticks(ms, [str(m) for m in ms])
    ax.set_xlabel("micro-batches m")
    ax.set_ylabel("throughput / one process")
    ax.set_title("2-stage pipeline, 2 workers on 2 cores")
    return _save(plt, fig, ax, path, "lower right")


def scaleout_plot(rows: list[dict], path: str) -> str:
    plt = _pyplot()
    out = sorted((r for r in rows if r.get("suite") == "scaleout"), key=lambda r: r["stages"])
    if not out:
        raise ValueError("--plot of scaleout needs its rows: run 'disthook bench scaleout "
                         "--plot PATH'")
    first = out[0]
    ps = [r["stages"] for r in out]
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=120)
    ax.plot(ps, [r["bound"] for r in out], "k--", label=f"bound p·m/(m+p-1), m={first['micro']}")
    ax.axhline(first["cores"], color="gray", ls=":",
               label=f"cores available here ({first['cores']})")
    ax.plot(ps, [r["speedup"] for r in out], "o-", label="disthook 1F1B / one disthook process")
    theirs = [(r["stages"], r["torch_pipelining_speedup"]) for r in out
              if r.get("torch_pipelining_speedup") is not None]
    if theirs:
        ax.plot([p for p, _ in theirs], [s for _, s in theirs], "s-",
                label="torch pipelining 1F1B / one torch process")
    ax.set_xscale("log", base=2)
    ax.set_xticks(ps, [str(p) for p in ps])
    ax.set_xlabel("stages p (one worker process each)")
    ax.set_ylabel("throughput / one process")
    ax.set_title(f"{first['layers']} x Linear({first['width']}, {first['width']}), batch "
                 f"{first['batch']}, one thread per process")
    return _save(plt, fig, ax, path, "upper left")
