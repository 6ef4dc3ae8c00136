"""``disthook bench --plot PATH``: pipeline throughput against micro-batches, beside the ideal.

Drawn from the rows of ``disthook bench pipeline``: for GPipe and 1F1B, the measured speedup
over one process at each m; beside them the ideal 2m/(m+1) of two equal stages with no cost
per micro-batch, and the machine's limit measured in the same run (the ideal times the loss
of per-sample speed at smaller batches). Needs matplotlib (the ``demo`` extra).
"""
from __future__ import annotations


def pipeline_plot(rows: list[dict], path: str) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError("--plot needs matplotlib: pip install -e '.[demo]'") from None
    pipe = [r for r in rows if r.get("suite") == "pipeline"]
    if not pipe:
        raise ValueError("--plot draws the pipeline suite's figures: run it with "
                         "'disthook bench pipeline --plot PATH' or 'all'")
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
    ax.axhline(1.0, color="lightgray", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xticks(ms, [str(m) for m in ms])
    ax.set_xlabel("micro-batches m")
    ax.set_ylabel("throughput / one process")
    ax.set_title("2-stage pipeline, 2 workers on 2 cores")
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
