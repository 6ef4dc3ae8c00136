"""``disthook bench scaleout``: one model pipelined over p worker processes, p = 2, 4, 8.

The model is 16 x Linear(1024, 1024) with a ReLU between, trained with cross-entropy over
the last layer's 1024 outputs, batch 512, float32, SGD, under 1F1B at m = 16 micro-batches
(``--width``, ``--batch``, ``--micro``; ``--quick``: width 256, p = 2 and 4, fewer
rounds). It is cut into p equal stages, one per worker process (``--stages``). For each p:

- the step time of ``train_step`` and its speedup over the same model and batch in one
  disthook process and in one torch process, the three timed in turn round by round (each
  speedup the median of the rounds' ratios);
- the bound p·m/(m + p - 1) of p equal stages with no cost per micro-batch, and the
  fraction of it reached;
- each stage's bubble, 1 - busy / step, where busy is the compute time its worker reports;
- with torch installed, torch.distributed.pipelining at the same p (gloo, CPU, one thread
  per process, Schedule1F1B with the same m): its step time, its speedup over one torch
  process and disthook's step time over its (the median of the rounds' ratios).

Every process has one thread, so the speedup cannot pass the cores available, printed with
the table: where p is above them the processes share the cores (the suite still runs), and
a worker's busy time counts the time it waited for a core in the middle of its compute.
"""
from __future__ import annotations

import copy
import importlib.util
import os
import statistics

from disthook.bench.stages import (
    LAYERS,
    LR,
    bound,
    check,
    one_torch_step,
    pipelining_seconds,
    spec,
)
from disthook.bench.timing import paired, paired_ratio

STAGES, QUICK_STAGES = (2, 4, 8), (2, 4)
WIDTH, QUICK_WIDTH = 1024, 256
BATCH, MICRO = 512, 16


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity on this system
        return os.cpu_count() or 1


def settings(quick: bool = False, stages=None, width: int | None = None,
             batch: int | None = None, micro: int | None = None) -> dict:
    """The run's stages, width, batch and micro-batches (None: the default, which --quick
    makes smaller), checked."""
    def given(value, default):
        return default if value is None else value

    chosen = {"stages": tuple(given(stages, QUICK_STAGES if quick else STAGES)),
              "width": given(width, QUICK_WIDTH if quick else WIDTH),
              "batch": given(batch, BATCH), "micro": given(micro, MICRO)}
    check(**chosen)
    return chosen


def run(quick: bool = False, stages=None, width: int | None = None, batch: int | None = None,
        micro: int | None = None) -> list[dict]:
    import disthook as torch
    from disthook import nn
    from disthook.service.loop import tune_malloc

    chosen = settings(quick, stages, width, batch, micro)
    width, batch = chosen["width"], chosen["batch"]
    has_torch = importlib.util.find_spec("torch") is not None
    tune_malloc()  # as in the workers, so that page faults do not favour either side
    whole = spec(1, width, batch)
    torch.manual_seed(0)
    net = whole.whole(nn)
    opt = torch.optim.SGD(net.parameters(), lr=LR)
    x, y = whole.data(torch)

    def one_step():
        opt.zero_grad()
        nn.functional.cross_entropy(net(x), y).backward()
        opt.step()

    ones = [one_step] + ([one_torch_step(whole)] if has_torch else [])
    options = {**chosen, "quick": quick, "repeats": 3 if quick else 5,
               "rounds": 1 if quick else 2}
    return [_run_at(p, net, x, y, ones, options) for p in chosen["stages"]]


def _run_at(p: int, net, x, y, ones: list, options: dict) -> dict:
    """The row of ``p`` stages: the one-process steps ``ones`` (disthook's, and torch's when
    installed) and the pipelined step timed in turn, then torch's pipelining."""
    import disthook as torch
    from disthook import nn
    from disthook.distributed import DistributedOptimizer, local_cluster

    m, repeats = options["micro"], options["repeats"]
    cut = spec(p, options["width"], options["batch"])
    times = [[] for _ in range(len(ones) + 1)]  # every step of every round, per contender
    medians = [[] for _ in range(len(ones) + 1)]  # the median of each round, per contender
    theirs, busy = [], []
    with local_cluster(workers=p) as cluster:
        remote = cluster.deploy(copy.deepcopy(net), stages=p, split_points=cut.split_points() or None,
                                chunks=m, schedule="1f1b")
        ropt = DistributedOptimizer(torch.optim.SGD, remote.parameters(), lr=LR)

        def step():
            ropt.zero_grad()
            remote.train_step(x, y, nn.functional.cross_entropy)
            ropt.step()
            busy.append([s["busy"] / s["wall"] for s in remote.step_stats])

        try:
            for _ in range(options["rounds"]):
                for out, mid, t in zip(times, medians, paired([*ones, step], repeats)):
                    out += t
                    mid.append(statistics.median(t))
                if len(ones) > 1 and p > 1:
                    # torch's processes start anew each round: after disthook's steps, so
                    # that a slow spell of the machine falls on both
                    theirs.append(pipelining_seconds(cut, "1f1b", m, repeats))
        finally:
            remote.close()
    ours = times[-1]
    row = {"suite": "scaleout", "stages": p, "layers": LAYERS, "width": options["width"],
           "batch": options["batch"], "micro": m, "schedule": "1f1b",
           "quick": options["quick"], "rounds": options["rounds"], "repeats": repeats,
           "cores": cores(), "step_s": statistics.median(ours),
           "one_process_s": statistics.median(times[0]),
           "speedup": paired_ratio(times[0], ours), "bound": bound(p, m),
           "bubble_measured": [1 - statistics.median(b[s] for b in busy) for s in range(p)],
           "one_torch_process_s": None, "speedup_vs_torch_process": None,
           "torch_pipelining_s": None, "torch_pipelining_speedup": None,
           "ratio_to_torch_pipelining": None}
    row["of_bound"] = row["speedup"] / row["bound"]
    if len(ones) > 1:
        row.update(one_torch_process_s=statistics.median(times[1]),
                   speedup_vs_torch_process=paired_ratio(times[1], ours))
    if theirs:
        row.update(torch_pipelining_s=statistics.median(theirs),
                   torch_pipelining_speedup=paired_ratio(medians[1], theirs),
                   ratio_to_torch_pipelining=paired_ratio(medians[-1], theirs))
    return row


def _ms(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds * 1e3:.0f}ms"


def _times(ratio: float | None) -> str:
    return "n/a" if ratio is None else f"{ratio:.2f}x"


def print_rows(rows: list[dict]) -> None:
    if not rows:
        return
    r0 = rows[0]
    print(f"scaleout: {r0['layers']} x Linear({r0['width']}, {r0['width']}) + ReLU between, "
          f"cross-entropy, batch {r0['batch']}, 1F1B at m={r0['micro']}, p equal stages on "
          f"p worker processes, one thread each{' (--quick)' if r0['quick'] else ''}; "
          f"{r0['rounds']} round(s) of {r0['repeats']} steps")
    print(f"one process: disthook {_ms(r0['one_process_s'])}, torch "
          f"{_ms(r0['one_torch_process_s'])} per "
          f"step; cores available: {r0['cores']} (where p is above them the processes "
          "share the cores: neither side can pass that speedup)")
    print(f"{'p':>2} {'step':>8} {'speedup':>8} {'vs torch':>9} {'bound':>6} {'of bound':>9} "
          f"{'torch pipe':>11} {'its speedup':>12} {'ours/its':>9}  bubble per stage")
    for r in rows:
        bubble = "/".join(f"{b:.2f}" for b in r["bubble_measured"])
        print(f"{r['stages']:>2} {r['step_s'] * 1e3:>6.0f}ms {r['speedup']:>7.2f}x "
              f"{_times(r['speedup_vs_torch_process']):>9} {r['bound']:>5.2f}x "
              f"{r['of_bound'] * 100:>8.0f}% {_ms(r['torch_pipelining_s']):>11} "
              f"{_times(r['torch_pipelining_speedup']):>12} "
              f"{_times(r['ratio_to_torch_pipelining']):>9}  {bubble}")
    print("speedup: one disthook process / pipelined step (vs torch: one torch process / "
          "pipelined step); bound: p·m/(m+p-1); bubble: 1 - busy/step per stage; ours/its: "
          "disthook's pipelined step / torch pipelining's (below 1.0: ours is faster)")
