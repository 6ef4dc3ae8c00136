"""The clusters that modules share (conftest's ``cluster``): a module gets one with every
worker alive and holding nothing, what it deployed is closed after it, and a cluster it left
broken is reaped instead of lent again."""
import os
import signal

import pytest
from clusters import SharedClusters, wait_until

import disthook as torch
from disthook import nn

pytestmark = pytest.mark.timeout(180)


def test_what_a_module_deployed_is_closed_and_the_same_cluster_is_lent_again():
    shared = SharedClusters()
    try:
        with shared.lend(2) as cluster:
            model = cluster.deploy(nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2)), stages=2)
            assert model(torch.randn(1, 3)).shape == (1, 2)
            assert all(w.stages for w in cluster.workers())  # left deployed by the "module"
        with shared.lend(2) as again:
            assert again is cluster
            assert [w.stages for w in again.workers()] == [[], []]
    finally:
        shared.close()
    with pytest.raises(Exception, match="closed"):
        cluster.workers()


def test_a_cluster_left_with_a_worker_killed_is_reaped_and_a_fresh_one_lent():
    shared = SharedClusters()
    try:
        with shared.lend(2) as cluster:
            victim = cluster._processes[1]
            os.kill(victim.pid, signal.SIGKILL)
            wait_until(lambda: victim.poll() is not None, 10)
        assert all(proc.poll() is not None for proc in cluster._processes)  # reaped
        with shared.lend(2) as fresh:
            assert fresh is not cluster
            assert len([w for w in fresh.workers() if w.alive]) == 2
    finally:
        shared.close()
