"""``python disthook/bench/idle_cost.py [--workers 8] [--seconds 12]``: the CPU an idle
cluster spends on its timers (beats, their answers, ticks, ZeroMQ's pings), per process
role, in ms a second (docs/performance.md, *Outside compute on 2 cores, the fourth round*).

A ``local_cluster`` of ``--workers`` workers holds a model of as many stages
(workspan's, at width 256), runs one training step, rests 2 s, then measures every
process's CPU over ``--seconds`` from ``/proc`` (all its threads, and ZeroMQ's I/O threads
apart). Run it by path with ``PYTHONPATH`` naming the tree to measure, so that one copy of
this file measures two trees alternately.
"""
from __future__ import annotations

import argparse
import copy
import os
import time


def measure(workers: int = 8, seconds: float = 12.0) -> dict:
    """ms of CPU a second of the coordinator, the workers together and this client (each
    with its ZeroMQ I/O threads' part) while the cluster is idle."""
    import disthook as torch
    from disthook import nn
    from disthook.bench.stages import spec
    from disthook.bench.timing import cpu_seconds, io_thread_seconds
    from disthook.distributed import local_cluster

    whole, cut = spec(1, 256, 64), spec(workers, 256, 64)
    torch.manual_seed(0)
    net = whole.whole(nn)
    x, y = whole.data(torch)
    with local_cluster(workers=workers) as cluster:
        remote = cluster.deploy(copy.deepcopy(net), stages=workers,
                                split_points=cut.split_points() or None, chunks=4)
        remote.train_step(x, y, nn.functional.cross_entropy)
        time.sleep(2)
        pids = [proc.pid for proc in cluster._processes] + [os.getpid()]  # coordinator first

        def take():
            return [(cpu_seconds(pid), io_thread_seconds(pid)) for pid in pids]

        before = take()
        time.sleep(seconds)
        after = take()
        remote.close()
    rate = [((a - b) * 1000 / seconds, (ai - bi) * 1000 / seconds)
            for (a, ai), (b, bi) in zip(after, before)]

    def summed(part):
        return tuple(sum(values) for values in zip(*part))

    return {"coordinator": rate[0], "workers": summed(rate[1:-1]), "client": rate[-1],
            "load": os.getloadavg()[0]}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--seconds", type=float, default=12.0)
    args = p.parse_args(argv)
    out = measure(args.workers, args.seconds)
    print("ms of CPU a second (of it ZeroMQ's I/O threads): " + ", ".join(
        f"{role} {out[role][0]:.2f} ({out[role][1]:.2f})"
        for role in ("coordinator", "workers", "client")) + f"; load {out['load']:.1f}")


if __name__ == "__main__":
    main()
