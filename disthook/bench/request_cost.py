"""``python -m disthook.bench.request_cost [--calls N] [--gpt-steps N]``: a worker's CPU per
request, part by part (docs/performance.md, *A request's cost on a worker*).

Two programs on 2 local workers, each worker timing its own parts (``workers/timing.py``:
thread CPU, the parts inside a part subtracted) and writing them when it exits:

- the toy: four ``Linear(8, 8)`` parts whose forward runs on the client (``x = a(x);
  x = b(x) + 0.0; x = c(x); d(x)``), forward and backward of a batch of 4, ``--calls``
  calls after 20;
- the GPT's chunked training step (``disthook.bench.gpt``: 4 blocks, d = 128, T = 64,
  batch 16, ``chunks=4`` under 1F1B), ``--gpt-steps`` steps after 2, with each worker's
  CPU per step from ``/proc/<pid>/stat`` (the parts' timers cost CPU of their own: run
  with ``--no-parts`` for that figure alone).

The workers load the timers through a ``sitecustomize`` module put first on their
``PYTHONPATH`` (one of the environment's own is shadowed meanwhile). To compare two trees,
run this from each, alternating, in one session: the spread between rounds is large on a
loaded machine.
"""
from __future__ import annotations

import argparse
import contextlib
import glob
import json
import os
import shutil
import sys
import tempfile
import time
from unittest import mock

__all__ = ["OUT_VAR", "PARTS", "gpt_step", "main", "table", "toy"]

OUT_VAR = "DISTHOOK_REQUEST_COST_OUT"  # the folder the timed workers write their parts to

# the rows of the table: (what, the timers' parts it sums)
PARTS = [("the job's own Python", ("job:",)), ("compute", ("compute",)),
         ("decode", ("decode",)), ("encode", ("encode",)),
         ("ZeroMQ send and receive", ("zmq",)), ("the loop round", ("loop",)),
         ("WorkerState.handle", ("state",)), ("graph_nbytes", ("graph_nbytes",))]

_SITE = """import os, sys
_argv = getattr(sys, "orig_argv", [])
if os.environ.get("{var}") and "workers" in _argv[1:3]:
    from deploy.threads import apply_from_argv
    apply_from_argv(_argv[_argv.index("workers") + 1:])  # before numpy loads
    from workers import timing
    timing.install(os.environ["{var}"])  # (in the worker: disthook never imports workers)
"""


@contextlib.contextmanager
def _timed_workers(parts: bool = True):
    """Workers started inside time their parts into the folder this yields (None
    without ``parts``)."""
    if not parts:
        yield None
        return
    site, out = tempfile.mkdtemp(prefix="disthook-site-"), tempfile.mkdtemp(prefix="disthook-cost-")
    with open(os.path.join(site, "sitecustomize.py"), "w") as f:
        f.write(_SITE.format(var=OUT_VAR))
    path = os.pathsep.join([site, *filter(None, [os.environ.get("PYTHONPATH")])])
    try:
        # cold starts: the site hook above runs as an interpreter starts, not in a role
        # forked from a preloaded one (deploy.warm)
        with mock.patch.dict(os.environ, {OUT_VAR: out, "PYTHONPATH": path,
                                          "DISTHOOK_WARM_START": "0"}):
            yield out  # (what the workers started meanwhile inherit)
    finally:
        shutil.rmtree(site, ignore_errors=True)


def _collect(out: str | None, workers: int) -> list[dict]:
    """What each worker wrote at its exit (waited for a few seconds)."""
    if out is None:
        return []
    deadline = time.monotonic() + 10.0
    while len(glob.glob(os.path.join(out, "*.json"))) < workers and time.monotonic() < deadline:
        time.sleep(0.1)
    found = []
    for path in sorted(glob.glob(os.path.join(out, "*.json"))):
        with open(path) as f:
            found.append(json.load(f))
    shutil.rmtree(out, ignore_errors=True)
    return found


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def toy(calls: int = 320, parts: bool = True) -> dict:
    """The toy's calls; each worker's parts and CPU per call (``/proc``)."""
    import disthook as torch
    from disthook import nn
    from disthook.distributed import local_cluster

    class Toy(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b, self.c, self.d = (nn.Linear(8, 8) for _ in range(4))

        def forward(self, x):
            x = self.a(x)
            x = self.b(x) + 0.0
            x = self.c(x)
            return self.d(x)

    torch.manual_seed(0)
    with _timed_workers(parts) as out:
        cluster = local_cluster(workers=2, threads=1)
    try:
        model = cluster.deploy(Toy(), stages=2, placement={"a": 0, "b": 0, "c": 1, "d": 1})
        x = torch.randn(4, 8)
        for _ in range(20):
            model(x).sum().backward()
        pids = [p.pid for p in cluster._processes[1:]]
        cpu = [_cpu_s(p) for p in pids]
        for _ in range(calls):
            model(x).sum().backward()
        per_call = [(_cpu_s(p) - c) / calls for p, c in zip(pids, cpu)]
    finally:
        cluster.close()
    return {"per_call_s": per_call, "workers": _collect(out, 2)}


def gpt_step(steps: int = 10, parts: bool = True) -> dict:
    """The GPT's chunked step; each worker's parts and CPU per step (``/proc``)."""
    import copy

    import disthook as torch
    import disthook.nn.functional as F
    from disthook.bench.gpt import GPT
    from disthook.distributed import local_cluster

    torch.manual_seed(0)
    local = GPT(context=64, width=128)
    x, y = torch.randint(0, 65, (16, 64)), torch.randint(0, 65, (16, 64))
    with _timed_workers(parts) as out:
        cluster = local_cluster(workers=2, threads=1)
    try:
        model = cluster.deploy(copy.deepcopy(local), stages=2, chunks=4, schedule="1f1b")
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

        def step():
            opt.zero_grad()
            model.train_step(x, y, lambda logits, target: F.cross_entropy(
                logits.reshape(-1, logits.size(-1)), target.reshape(-1)))
            opt.step()

        for _ in range(2):
            step()
        pids = [p.pid for p in cluster._processes[1:]]
        cpu = [_cpu_s(p) for p in pids]
        for _ in range(steps):
            step()
        per_step = [(_cpu_s(p) - c) / steps for p, c in zip(pids, cpu)]
    finally:
        cluster.close()
    return {"per_step_s": per_step, "workers": _collect(out, 2)}


def table(workers: list[dict]) -> list[tuple[str, list[float]]]:
    """Per row of ``PARTS``, each worker's CPU per job (µs), and all but compute."""
    rows = []
    jobs = [sum(n for k, n in w["calls"].items() if k.startswith("job:")) or 1
            for w in workers]
    for what, prefixes in PARTS:
        rows.append((what, [sum(s for k, s in w["seconds"].items() if k.startswith(prefixes))
                            / n * 1e6 for w, n in zip(workers, jobs)]))
    rows.append(("all but compute", [
        sum(s for k, s in w["seconds"].items() if k != "compute") / n * 1e6
        for w, n in zip(workers, jobs)]))
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m disthook.bench.request_cost",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=320, help="the toy's calls (default 320)")
    p.add_argument("--gpt-steps", type=int, default=0,
                   help="GPT chunked steps after the toy (default 0: none)")
    p.add_argument("--no-parts", action="store_true",
                   help="workers' CPU from /proc only, without the parts' timers")
    a = p.parse_args(argv)
    runs = [("toy", toy(a.calls, not a.no_parts), "per_call_s", "call")]
    if a.gpt_steps:
        runs.append(("GPT chunked step", gpt_step(a.gpt_steps, not a.no_parts), "per_step_s",
                     "step"))
    for name, run, key, unit in runs:
        print(f"{name}: workers' CPU per {unit} (/proc): "
              + ", ".join(f"{s * 1e3:.2f} ms" for s in run[key]))
        for what, per_job in table(run["workers"]):
            print(f"  {what:26s} " + "  ".join(f"{us:7.0f} µs" for us in per_job))
    return 0


if __name__ == "__main__":
    sys.exit(main())
