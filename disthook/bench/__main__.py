"""``python -m disthook.bench [suite] [--quick] [--json PATH] [--plot PNG] [--stages P,..]
[--width N] [--batch N] [--micro M]``: what ``disthook bench`` runs (the runner starts it
again this way with one BLAS thread)."""
import argparse
import sys

from disthook.bench import SUITES
from disthook.bench.runner import main, stages_list

p = argparse.ArgumentParser(prog="python -m disthook.bench")
p.add_argument("suite", nargs="?", default="all", choices=["all", *sorted(SUITES)])
p.add_argument("--quick", action="store_true")
p.add_argument("--json")
p.add_argument("--plot")
p.add_argument("--stages", type=stages_list)
p.add_argument("--width", type=int)
p.add_argument("--batch", type=int)
p.add_argument("--micro", type=int)
a = p.parse_args()
sys.exit(main(a.suite, quick=a.quick, json_path=a.json, plot_path=a.plot, stages=a.stages,
              width=a.width, batch=a.batch, micro=a.micro))
