"""A local cluster whose coordinator died closes at once: its workers are stopped directly
(nobody is left to tell them), and every process is reaped. Before, close() asked the dead
coordinator for its 5 s deadline, then gave the workers 5 s to stop on their own: 11 s."""
import os
import signal
import time

import pytest

import disthook as torch
from disthook import nn
from disthook.distributed import local_cluster

pytestmark = pytest.mark.timeout(120)


def test_close_after_the_coordinator_died_stops_the_workers_at_once():
    cluster = local_cluster(workers=2, timeout=20)
    procs = list(cluster._processes)
    try:
        remote = cluster.deploy(nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2)), stages=2)
        os.kill(procs[0].pid, signal.SIGKILL)
        procs[0].wait(10)
        assert remote(torch.ones(2, 4)).shape == (2, 2)  # the workers serve on meanwhile
        started = time.monotonic()
        cluster.close()
        took = time.monotonic() - started
    finally:
        cluster.close()
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert all(proc.returncode is not None for proc in procs)
    assert all(proc.returncode == 0 for proc in procs[1:]), [p.returncode for p in procs]
    assert took < 5, f"close took {took:.1f} s"
