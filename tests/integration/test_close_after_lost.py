"""close() of a deployment that lost a worker says the model could not come back."""
import os
import signal
import time

import pytest

import disthook as torch
from disthook import nn
from disthook.distributed import WorkerLost, local_cluster


def test_close_after_a_lost_worker_warns_that_the_model_did_not_come_back():
    with local_cluster(workers=2, timeout=60) as cluster:
        net = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
        remote = cluster.deploy(net, stages=2)
        x = torch.randn(3, 4)
        net(x)
        (_, victim, _), = [w for w in remote.workers() if w[0] == 1]
        pid = next(w.pid for w in cluster.workers() if w.id == victim)
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while True:  # (the kill is seen at the next call that reaches the worker)
            try:
                net(x)
            except WorkerLost:
                break
            assert time.monotonic() < deadline
            time.sleep(0.1)
        with pytest.warns(RuntimeWarning, match=f"close\\(\\) of the deployed Sequential "
                                                f"could not bring the model back to this "
                                                f"program: stage 1 on worker {victim} is lost "
                                                "with its weights"):
            remote.close()  # before: it returned as if the model were the program's again
        with pytest.raises(WorkerLost):
            net(x)  # and it says so at each use
