"""``disthook bench pipeline``: pipelined training on 2 workers against one process.

The model is eight blocks of Linear(1024, 1024) + ReLU and a Linear(1024, 10) head, batch
1024, float32, SGD; on the workers it is cut after block 4 and trained with
``train_step`` for m = 1, 2, 4, 8 micro-batches under GPipe and 1F1B. Each speedup is the
median, over rounds, of one-process step time / pipelined step time, the two run in turn so
that the machine's drift hits both. Printed beside it: the limit for this machine, 2m/(m+1)
times (per-sample time of a layer at the full batch / per-sample time at the micro-batch
size), the two timed in turn in the same run; the bubble (idle time / step time) of each
stage, measured, beside (p-1)/(m+p-1); and at m = 8 the peak RSS of each worker under GPipe
and under 1F1B, each on fresh worker processes (m = 8 runs first on them: a worker keeps
freed memory mapped, so a later, smaller m would show the larger peak of m = 8).
The one-process baseline runs with the workers' malloc setting (freed memory stays mapped).
"""
from __future__ import annotations

import statistics

from disthook.bench.timing import paired, paired_ratio

BATCH, WIDTH, BLOCKS = 1024, 1024, 8
MICRO = (1, 2, 4, 8)
QUICK_REPEATS = 3  # steps timed per point under --quick


def _model():
    import disthook as torch
    from disthook import nn

    torch.manual_seed(0)
    layers = []
    for _ in range(BLOCKS):
        layers += [nn.Linear(WIDTH, WIDTH), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(WIDTH, 10))


def _layer(rows: int):
    """One Linear(1024, 1024) + ReLU forward and backward on ``rows`` rows, as a callable."""
    import disthook as torch
    from disthook import nn

    layer = nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.ReLU())
    x = torch.randn(rows, WIDTH, requires_grad=True)

    def run():
        layer(x).sum().backward()

    return run


def _limits(repeats: int) -> dict[int, float]:
    """The machine's limit at each m: 2m/(m+1) x (per-sample time of a layer at the full batch
    / at BATCH/m rows), the two timed in turn and the median taken over rounds."""
    limits = {}
    for m in MICRO:
        full, micro = paired([_layer(BATCH), _layer(BATCH // m)], repeats)
        limits[m] = 2 * m / (m + 1) / (m * paired_ratio(micro, full))
    return limits


def run(quick: bool = False) -> list[dict]:
    import disthook as torch
    from disthook import nn
    from disthook.distributed import DistributedOptimizer, local_cluster
    from disthook.distributed.schedule import bubble_fraction
    from disthook.service.loop import tune_malloc

    tune_malloc()  # as in the workers, so that page faults do not favour either side
    repeats = QUICK_REPEATS if quick else 7
    x, y = torch.randn(BATCH, WIDTH), torch.randint(0, 10, (BATCH,))
    net = _model()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)

    def local_step():
        opt.zero_grad()
        nn.functional.cross_entropy(net(x), y).backward()
        opt.step()

    limits = _limits(2 * repeats + 1)
    rows = []
    for schedule in ("gpipe", "1f1b"):
        with local_cluster(workers=2) as cluster:
            # m = 8 first: its peak RSS is then that of fresh workers, not a smaller m's
            for m in sorted(MICRO, reverse=True):
                remote = cluster.deploy(_model(), stages=2, split_points=[2 * BLOCKS // 2],
                                        chunks=m, schedule=schedule)
                ropt = DistributedOptimizer(torch.optim.SGD, remote.parameters(), lr=0.01)
                busy = []

                def step(remote=remote, ropt=ropt, busy=busy):
                    ropt.zero_grad()
                    remote.train_step(x, y, nn.functional.cross_entropy)
                    ropt.step()
                    busy.append([s["busy"] / s["wall"] for s in remote.step_stats])

                # one-process and pipelined steps in turn: the speedup is the median of
                # their ratios, so that the machine's drift between them cancels
                ones, steps = paired([local_step, step], repeats)
                speedup = paired_ratio(ones, steps)
                idle = [1 - statistics.median(b[i] for b in busy[1:]) for i in range(2)]
                rows.append({
                    "schedule": schedule, "m": m, "one_process_s": statistics.median(ones),
                    "step_s": statistics.median(steps),
                    "samples_per_s": BATCH / statistics.median(steps), "speedup": speedup,
                    "limit": limits[m], "of_limit": speedup / limits[m],
                    "bubble_measured": idle, "bubble_formula": bubble_fraction(2, m),
                    # a worker keeps freed memory mapped: its RSS after m = 8 says nothing
                    # of a smaller m, so only m = 8 (run first) reports a peak
                    "peak_rss": ([s["peak_rss"] for s in remote.step_stats]
                                 if m == max(MICRO) else None),
                })
                remote.close()
    rows.sort(key=lambda r: (r["schedule"] != "gpipe", r["m"]))
    return rows


def print_rows(rows: list[dict]) -> None:
    one = statistics.median(r["one_process_s"] for r in rows)
    print(f"one process: {one * 1e3:.0f} ms per step, {BATCH / one:.0f} samples/s "
          f"(MLP {BLOCKS}x Linear({WIDTH},{WIDTH})+ReLU + head, batch {BATCH}, SGD); each "
          f"speedup is the median of one-process / pipelined step over steps run in turn")
    print(f"{'schedule':<8} {'m':>2} {'step':>9} {'samples/s':>10} {'speedup':>8} "
          f"{'limit':>6} {'of limit':>9} {'bubble 0/1 (formula)':>22} {'peak RSS 0/1':>16}")
    for r in rows:
        bubble = "/".join(f"{b:.2f}" for b in r["bubble_measured"])
        rss = ("/".join(f"{v / 2**20:.0f}" for v in r["peak_rss"]) + " MiB" if r["peak_rss"]
               else "-")
        print(f"{r['schedule']:<8} {r['m']:>2} {r['step_s'] * 1e3:>7.0f}ms "
              f"{r['samples_per_s']:>10.0f} {r['speedup']:>7.2f}x {r['limit']:>5.2f}x "
              f"{r['of_limit'] * 100:>8.0f}% {bubble:>14} ({r['bubble_formula']:.2f}) "
              f"{rss:>16}")
    full = [r for r in rows if r["peak_rss"]]  # m = 8, run first on fresh workers
    if len(full) == 2:
        g, f = (next(r for r in full if r["schedule"] == s) for s in ("gpipe", "1f1b"))
        lower = all(b < a for a, b in zip(g["peak_rss"], f["peak_rss"]))
        print(f"1F1B's peak RSS at m = {f['m']} is {'below' if lower else 'not below'} "
              "GPipe's on every worker")
