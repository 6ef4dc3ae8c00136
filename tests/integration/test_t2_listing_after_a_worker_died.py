"""Listing a cluster just after a worker's process died (the coordinator still lists it
alive until it has been silent a few seconds): models(), full_status() and the questions
asked of every worker end at once, the dead worker's figures None or its error named.
Before, each asked the dead worker and waited for the request deadline (30 s here)."""
import os
import signal
import time

import pytest

from disthook import nn
from disthook.distributed import ClusterError, local_cluster

pytestmark = pytest.mark.timeout(180)


def test_listings_right_after_a_worker_died_end_at_once():
    with local_cluster(workers=2, timeout=30) as cluster:
        remote = cluster.deploy(nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2)), stages=2,
                                name="mlp")
        (_, victim, _), = [w for w in remote.workers() if w[0] == 1]
        pid = next(w.pid for w in cluster.workers() if w.id == victim)
        os.kill(pid, signal.SIGKILL)
        time.sleep(0.3)
        assert next(w for w in cluster.workers() if w.id == victim).alive  # not yet silent
        started = time.monotonic()
        stages = {s["worker"]: s for s in cluster.models()[0]["stages"]}
        assert stages[victim]["forwards"] is None and stages[remote.workers()[0][1]][
            "forwards"] == 0
        own = {w["id"]: w for w in cluster.full_status()["workers"]}
        assert own[victim]["own"] is None and "refuses connections" in own[victim]["error"]
        with pytest.raises(ClusterError, match=f"worker {victim} .* refuses connections"):
            cluster.hook_counts()
        assert time.monotonic() - started < 10  # the request deadline is 30 s
        remote.close()
