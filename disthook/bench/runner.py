"""The ``disthook bench`` command: fix one BLAS thread, run the suites, print their tables,
write ``--json`` and draw ``--plot``. Each suite is imported only when it runs."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from deploy.threads import THREAD_VARS
from disthook.bench import SUITES

# suites that print tables of their own; the others share the table of disthook.bench.table
OWN_TABLES = ("pipeline", "scaling", "scaleout", "workspan", "peers", "tenancy")  # printed in this order
# the suites that take the options --stages, --width, --batch and --micro
OPTIONS = {"stages": ("peers", "scaleout", "workspan"), "width": ("scaleout", "workspan"),
           "batch": ("scaleout", "workspan"), "micro": ("scaleout", "workspan")}


def stages_list(text: str) -> tuple[int, ...]:
    """``--stages 2,4,8`` as (2, 4, 8); the suites check the counts themselves."""
    try:
        return tuple(int(p) for p in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError("expected stage counts separated by commas (2,4,8), "
                                         f"got {text!r}") from None


def check_options(suite: str, quick: bool, options: dict) -> None:
    """Refuse options the suite does not take, and values its suites cannot run, before
    anything runs."""
    for name in options:
        if suite not in ("all", *OPTIONS[name]):
            *others, last = OPTIONS[name]
            names = f"{', '.join(others)} and {last}" if others else last
            raise ValueError(f"--{name} applies to the suite{'s' * bool(others)} {names}, "
                             f"not {suite}")
    if "stages" in options and suite in ("all", "peers"):
        from disthook.bench import peers

        peers.check(options["stages"])
    if suite in ("all", "scaleout"):
        from disthook.bench import scaleout

        scaleout.settings(quick, **options)
    if suite in ("all", "workspan"):
        from disthook.bench import workspan

        workspan.settings(quick, **options)


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


def _own_table(name: str, quick: bool, options: dict) -> list[dict]:
    """Run suite ``name`` (one of OWN_TABLES) with the ``options`` it takes, print its
    table; its rows for --json."""
    options = {k: v for k, v in options.items() if name in OPTIONS[k]}
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
    if name == "scaleout":
        from disthook.bench import scaleout

        rows = scaleout.run(quick, **options)
        scaleout.print_rows(rows)
        return rows
    if name == "workspan":
        from disthook.bench import workspan

        rows = workspan.run(quick, **options)
        workspan.print_rows(rows)
        return rows
    if name == "tenancy":
        from disthook.bench import tenancy

        rows = tenancy.run(quick)
        tenancy.print_rows(rows)
        return rows
    from disthook.bench import peers

    rows = peers.run(quick, **options)
    peers.print_rows(rows)
    return rows


def _blas() -> str:
    """Which library takes the engine's products: MKL where ``disthook[mkl]`` is installed,
    else numpy's own BLAS (disthook._blas)."""
    import numpy as np

    from disthook import _blas as products

    if products.backend().startswith("mkl"):
        return "MKL (disthook[mkl]) for 2-D float products"
    try:
        deps = np.show_config(mode="dicts")["Build Dependencies"]
        blas = deps.get("blas", {})
        return f"{blas.get('name', '?')} {blas.get('version', '')}".strip()
    except Exception:  # older numpy
        return "unknown"


def main(suite: str = "all", *, quick: bool = False, json_path: str | None = None,
         plot_path: str | None = None, stages: tuple[int, ...] | None = None,
         width: int | None = None, batch: int | None = None, micro: int | None = None) -> int:
    """Run ``suite`` (one of SUITES, or "all") and print its figures; the exit status.
    ``stages`` (peers, scaleout), ``width``, ``batch``, ``micro`` (scaleout): None for each
    suite's own."""
    options = {k: v for k, v in (("stages", stages), ("width", width), ("batch", batch),
                                 ("micro", micro)) if v is not None}
    check_options(suite, quick, options)
    if any(os.environ.get(v) != "1" for v in THREAD_VARS):
        # thread counts must be fixed before numpy loads its BLAS: run again in a child
        env = dict(os.environ, **{v: "1" for v in THREAD_VARS})
        cmd = [sys.executable, "-m", "disthook.bench", suite] + (["--quick"] if quick else [])
        cmd += ["--json", json_path] if json_path else []
        cmd += ["--plot", plot_path] if plot_path else []
        for name, value in options.items():
            cmd += [f"--{name}", ",".join(map(str, value)) if name == "stages" else str(value)]
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
            rows += _own_table(name, quick, options)
    if json_path:
        with open(json_path, "w") as f:
            json.dump(rows, f, indent=2)
    if plot_path:
        from disthook.bench.plot import draw

        for path in draw(rows, plot_path):
            print(f"plot: {path}")
    return 0
