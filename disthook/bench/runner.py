"""The ``disthook bench`` command: fix one BLAS thread, run the suites, print their tables,
write ``--json`` and draw ``--plot``. Each suite is imported only when it runs."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from disthook.bench import SUITES

THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
               "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")
# suites that print tables of their own; the others share the table of disthook.bench.table
OWN_TABLES = ("pipeline", "scaling", "peers", "tenancy")  # printed in this order


def run_suite(name: str, quick: bool) -> list[dict]:
    """The rows of one suite of the common table (engine, nn, dist or toolkit)."""
    if name in ("engine", "nn"):
        from disthook.bench import engine

        return engine.run(name, quick)
    if name == "dist":
        from disthook.bench import dist

        return dist.run(quick)
    if name == "toolkit":
        from disthook.bench import toolkit

        return toolkit.run(quick)
    raise ValueError(f"{name!r} is not a suite of the common table")


def _own_table(name: str, quick: bool) -> list[dict]:
    """Run suite ``name`` (one of OWN_TABLES), print its table; its rows for --json."""
    if name == "pipeline":
        from disthook.bench import pipeline

        rows = pipeline.run(quick)
        pipeline.print_rows(rows)
        return [{"suite": "pipeline", **r} for r in rows]
    if name == "scaling":
        from disthook.bench import scaling

        rows = scaling.run(quick)
        scaling.print_rows(rows)
        return rows
    if name == "tenancy":
        from disthook.bench import tenancy

        rows = tenancy.run(quick)
        tenancy.print_rows(rows)
        return rows
    from disthook.bench import peers

    rows = peers.run(quick)
    peers.print_rows(rows)
    return rows


def _blas() -> str:
    import numpy as np

    try:
        deps = np.show_config(mode="dicts")["Build Dependencies"]
        blas = deps.get("blas", {})
        return f"{blas.get('name', '?')} {blas.get('version', '')}".strip()
    except Exception:  # older numpy
        return "unknown"


def main(suite: str = "all", *, quick: bool = False, json_path: str | None = None,
         plot_path: str | None = None) -> int:
    """Run ``suite`` (one of SUITES, or "all") and print its figures; the exit status."""
    if any(os.environ.get(v) != "1" for v in THREAD_VARS):
        # thread counts must be fixed before numpy loads its BLAS: run again in a child
        env = dict(os.environ, **{v: "1" for v in THREAD_VARS})
        cmd = [sys.executable, "-m", "disthook.bench", suite] + (["--quick"] if quick else [])
        cmd += ["--json", json_path] if json_path else []
        cmd += ["--plot", plot_path] if plot_path else []
        return subprocess.call(cmd, env=env)
    import numpy as np

    print(f"disthook bench {suite}: numpy {np.__version__} with BLAS {_blas()}, one thread")
    if suite not in ("dist", "toolkit"):
        try:
            import torch

            print(f"baseline: torch {torch.__version__}, torch.set_num_threads(1)")
        except ImportError:
            print("baseline: torch is not installed (pip install torch==2.13.0); ratios are "
                  "n/a")
    if suite in ("dist", "all"):
        print("dist: baselines are raw pyzmq between two processes and one process; the "
              "workers are local processes, one BLAS thread each")
    if suite in ("toolkit", "all"):
        print("toolkit: baselines are client forward hooks and a forward without hooks, on "
              "the same 2 local workers")
    names = sorted(SUITES) if suite == "all" else [suite]
    rows = [row for name in names if name not in OWN_TABLES
            for row in run_suite(name, quick)]
    if rows:
        from disthook.bench.table import print_comparisons

        print_comparisons(rows)
    for name in OWN_TABLES:
        if name in names:
            rows += _own_table(name, quick)
    if json_path:
        with open(json_path, "w") as f:
            json.dump(rows, f, indent=2)
    if plot_path:
        from disthook.bench.plot import pipeline_plot

        print(f"plot: {pipeline_plot(rows, plot_path)}")
    return 0
