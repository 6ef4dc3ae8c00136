"""``disthook bench --plot PATH``: the figures of the pipeline and scaleout suites.

From the rows of ``disthook bench pipeline``: for GPipe and 1F1B, the measured speedup over
one process at each m; beside them the ideal 2m/(m+1) of two equal stages with no cost per
micro-batch, and the machine's limit measured in the same run (the ideal times the loss of
per-sample speed at smaller batches). The scale-out figure, from the rows of ``disthook bench
scaleout`` and ``workspan``: the speedup at each number of stages p, disthook's and torch
pipelining's, beside the bound p·m/(m+p-1): measured (scaleout) where each worker process
had a core, predicted from work and span (workspan) where the machine has fewer cores,
marked as such; disthook's ZB-H1, zb-batched and interleaved 1F1B predicted. Needs
matplotlib (the ``demo`` extra).
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
    """The figures the rows hold, written to ``path``; with the pipeline suite's rows and
    scaleout's or workspan's, the scale-out figure goes beside it, its name ending in
    -scaleout. The paths written."""
    suites = {r.get("suite") for r in rows}
    scale = bool(suites & {"scaleout", "workspan"})
    if "pipeline" in suites and scale:
        stem, ext = os.path.splitext(path)
        return [pipeline_plot(rows, path), scaleout_plot(rows, f"{stem}-scaleout{ext}")]
    if scale:
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


SERIES = ("disthook 1F1B", "torch pipelining 1F1B", "disthook ZB-H1", "disthook zb-batched",
          "disthook interleaved 1F1B")
_LABELS = {"disthook interleaved 1F1B": "disthook interleaved 1F1B, v=2 (schedule only, "
                                        "not deployable yet)"}


def scaleout_points(rows: list[dict]) -> dict:
    """The scale-out figure's points: per series (``SERIES``), ``(p, speedup, how)`` with how
    "measured" (a ``scaleout`` row whose p worker processes each had a core: p <= the
    cores available), "predicted" (the ``workspan`` row's step replayed on p dedicated
    cores, at the same width) or, where p is above the cores and no prediction is at hand,
    "shared cores" (measured with the processes taking turns on the cores), by p; plus the
    figure's width, micro-batches and bound."""
    measured = {r["stages"]: r for r in rows if r.get("suite") == "scaleout"}
    width = (next(iter(measured.values()))["width"] if measured else
             max((r["width"] for r in rows if r.get("suite") == "workspan"), default=None))
    if width is None:
        raise ValueError("the scale-out figure needs the scaleout or workspan suite's rows: "
                         "run 'disthook bench scaleout --plot PATH' (or workspan)")
    predicted = {r["stages"]: r for r in rows
                 if r.get("suite") == "workspan" and r["width"] == width}
    series: dict[str, list] = {name: [] for name in SERIES}
    bounds, micro, layers = {}, None, None
    for p in sorted(set(measured) | set(predicted)):
        row = measured.get(p)
        if row is not None and p <= row["cores"]:
            series["disthook 1F1B"].append((p, row["speedup"], "measured"))
            if row.get("torch_pipelining_speedup") is not None:
                series["torch pipelining 1F1B"].append(
                    (p, row["torch_pipelining_speedup"], "measured"))
        elif p in predicted:
            ours, theirs = predicted[p]["disthook"], predicted[p]["torch"]
            series["disthook 1F1B"].append((p, ours["predicted_speedup"], "predicted"))
            if theirs is not None:
                series["torch pipelining 1F1B"].append(
                    (p, theirs["predicted_speedup"], "predicted"))
        else:  # more processes than cores, and nothing predicts it
            series["disthook 1F1B"].append((p, row["speedup"], "shared cores"))
            if row.get("torch_pipelining_speedup") is not None:
                series["torch pipelining 1F1B"].append(
                    (p, row["torch_pipelining_speedup"], "shared cores"))
        if p in predicted:  # the other schedules are predicted only
            ours = predicted[p]["disthook"]
            for name, key in (("disthook ZB-H1", "predicted_zb_step_s"),
                              ("disthook zb-batched", "predicted_zbb_step_s"),
                              ("disthook interleaved 1F1B", "predicted_interleaved_step_s")):
                if ours.get(key):
                    series[name].append((p, ours["one_process_cpu_s"] / ours[key],
                                         "predicted"))
        source = row if row is not None else predicted[p]
        bounds[p], micro = source["bound"], source.get("micro", micro)
        layers = source.get("layers", layers)
    return {"series": series, "width": width, "micro": micro, "bound": bounds, "layers": layers,
            "cores": next((r["cores"] for r in measured.values()), None)}


def scaleout_plot(rows: list[dict], path: str) -> str:
    """Speedup over one process against p: each library's pipeline, measured where the
    cores exist and predicted where not (hollow markers), beside the bound."""
    plt = _pyplot()
    points = scaleout_points(rows)
    ps = sorted(points["bound"])
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=120)
    ax.plot(ps, [points["bound"][p] for p in ps], "k--",
            label=f"bound p·m/(m+p-1), m={points['micro']}")
    hows = {how for got in points["series"].values() for _, _, how in got}
    if points["cores"] is not None and points["cores"] < max(ps):
        beyond = ": beyond, predicted" if "predicted" in hows else ""
        ax.axhline(points["cores"], color="gray", ls=":",
                   label=f"cores here ({points['cores']}){beyond}")
    for name, marker in zip(SERIES, "osDv^"):
        got = points["series"][name]
        if not got:
            continue
        line, = ax.plot([p for p, _, _ in got], [s for _, s, _ in got], "-", lw=1.2,
                        label=_LABELS.get(name, name))
        for p, speedup, how in got:
            ax.plot([p], [speedup], "x" if how == "shared cores" else marker,
                    color=line.get_color(),
                    markerfacecolor=line.get_color() if how == "measured" else "white")
    for how, marker, face, label in (
            ("measured", "o", "gray", "filled: measured"),
            ("predicted", "o", "white", "hollow: predicted (work and span)"),
            ("shared cores", "x", "gray", "x: measured, fewer cores than processes")):
        if how in hows:
            ax.plot([], [], marker, color="gray", markerfacecolor=face, label=label)
    ax.set_xscale("log", base=2)
    ax.set_xticks(ps, [str(p) for p in ps])
    ax.set_xlabel("stages p (one worker process each)")
    ax.set_ylabel("throughput / one process")
    ax.set_title(f"{points['layers']} x Linear({points['width']}, {points['width']}), one "
                 "thread per process")
    return _save(plt, fig, ax, path, "upper left")
