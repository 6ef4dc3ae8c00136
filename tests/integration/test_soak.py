"""Endurance: 10,000 training steps on 2 workers (``pytest -m soak``; not in the default run).

After a warm-up, the resident memory of the client, the coordinator and both workers grows by
less than 5%, and no forward graph is left open on any worker. ``DISTHOOK_SOAK_STEPS`` sets
the number of steps (default 10,000); the figures are printed (``-s`` shows them).
"""
import os

import pytest
from clusters import worker_statuses

import disthook as torch
from disthook import nn
from disthook.distributed import DistributedOptimizer, hooks, local_cluster

STEPS = int(os.environ.get("DISTHOOK_SOAK_STEPS", "10000"))
WARMUP = max(1, STEPS // 10)

pytestmark = [pytest.mark.soak, pytest.mark.timeout(3600)]


def rss(pid: int) -> int:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_ten_thousand_steps_keep_memory_flat_and_leave_no_contexts():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                        nn.Linear(64, 10))
    x, y = torch.randn(64, 32), torch.randint(0, 10, (64,))
    with local_cluster(workers=2) as cluster:
        remote = cluster.deploy(net, stages=2, chunks=2, schedule="1f1b")
        remote[0].register_forward_hook(hooks.check_finite())  # a worker hook every step
        seen = []
        remote[4].register_forward_hook(lambda m, a, out: seen.append(out.shape[0]))  # client
        opt = DistributedOptimizer(torch.optim.SGD, remote.parameters(), lr=0.01)
        pids = {"client": os.getpid()} | {
            f"process {p.args[2]}-{i}": p.pid for i, p in enumerate(cluster._processes)}
        baseline = {}
        for step in range(STEPS):
            opt.zero_grad()
            if step % 2:  # both paths: a pipelined train_step, and forward + backward
                remote.train_step(x, y, nn.functional.cross_entropy)
            else:
                nn.functional.cross_entropy(remote(x), y).backward()
            opt.step()
            if step == WARMUP:
                baseline = {name: rss(pid) for name, pid in pids.items()}
            if step % 1000 == 0:
                cluster.captured("none")  # and a control-plane call now and then
        final = {name: rss(pid) for name, pid in pids.items()}
        for name in pids:
            print(f"{name}: {baseline[name] / 2**20:.1f} MiB after {WARMUP} steps, "
                  f"{final[name] / 2**20:.1f} MiB after {STEPS} "
                  f"({(final[name] / baseline[name] - 1) * 100:+.1f}%)")
        for name in pids:
            assert final[name] < 1.05 * baseline[name], (name, baseline[name], final[name])
        for status in worker_statuses(cluster).values():
            assert status["contexts"] == 0 and status["mailbox"] == 0, status
        assert len(seen) == STEPS * 2  # the client hook: once per micro-batch, every step
