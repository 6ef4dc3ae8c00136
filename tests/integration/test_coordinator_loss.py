"""The coordinator dies mid-training: the data plane does not need it, so training goes on;
a coordinator started again on the same address gets the workers back (they register again
with their stages) and the client's cluster calls work again."""
import subprocess
import sys
import time

import numpy as np
import pytest
from clusters import wait_until
from test_remote import data, make_net

import disthook as torch
from disthook import nn
from disthook.distributed import DistributedOptimizer, RemoteTimeout, connect, local_cluster

pytestmark = pytest.mark.timeout(180)


def workers_come_back(cluster, n=2, timeout=30.0):
    """Wait until ``n`` workers are registered again, alive, with the stages they kept."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            workers = [w for w in cluster.workers() if w.alive]
        except RemoteTimeout:  # no coordinator (yet)
            workers = []
        if len(workers) == n and all(w.stages for w in workers):
            return
        assert time.monotonic() < deadline, "the workers did not come back"
        time.sleep(0.2)


def test_training_survives_the_coordinator_and_workers_register_again():
    x, y = data()
    local = make_net()
    opt = torch.optim.SGD(local.parameters(), lr=0.1)
    revived = None
    with local_cluster(workers=2, timeout=5) as cluster:
        try:
            remote = cluster.deploy(make_net(), stages=2)
            ropt = DistributedOptimizer(torch.optim.SGD, remote.parameters(), lr=0.1)

            def both_steps():
                for model, o in ((local, opt), (remote, ropt)):
                    o.zero_grad()
                    nn.functional.cross_entropy(model(x), y).backward()
                    o.step()

            both_steps()
            coordinator = cluster._processes[0]
            coordinator.kill()
            coordinator.wait(10)
            both_steps()  # activations and gradients go worker to worker: no coordinator
            cluster.timeout = 0.5  # what is checked is the error, not how long it waits
            with pytest.raises(RemoteTimeout):
                cluster.status()  # a clear error while it is away
            cluster.timeout = 5
            revived = subprocess.Popen([sys.executable, "-m", "coordinator", "--bind",
                                        cluster.address, "--log-level", "WARNING"],
                                       stdout=subprocess.DEVNULL)
            workers_come_back(cluster)
            both_steps()
            state = remote.state_dict()
            for name, p in local.state_dict().items():
                np.testing.assert_allclose(state[name].numpy(), p.numpy(), rtol=1e-6,
                                           atol=1e-7)
        finally:
            cluster.close()  # the revived coordinator tells the workers to stop
            if revived is not None:
                try:
                    assert revived.wait(10) == 0  # it took the shutdown and stopped
                finally:
                    if revived.poll() is None:
                        revived.kill()
                        revived.wait()


def test_restart_true_replaces_a_dead_coordinator_on_the_same_address():
    with local_cluster(workers=2, restart=True, timeout=5) as cluster:
        remote = cluster.deploy(make_net(), stages=2)
        first = cluster._processes[0]
        first.kill()
        first.wait(10)
        workers_come_back(cluster)  # to a new coordinator the restarter started
        assert cluster._processes[0].pid != first.pid
        x, _ = data()
        with torch.no_grad():
            np.testing.assert_allclose(remote(x).numpy(), make_net()(x).numpy(), rtol=1e-6)


def test_an_orphan_after_worker_serves_while_the_coordinator_answers_and_stops_once_it_goes():
    """``--orphan-after``: the worker asks the coordinator to answer its beats (answers are
    otherwise not sent), stays for as long as they come, and stops once they stop."""
    orphan_after, heartbeat = 1.0, 0.2
    coordinator = subprocess.Popen([sys.executable, "-m", "coordinator", "--bind",
                                    "tcp://127.0.0.1:0", "--heartbeat", str(heartbeat),
                                    "--log-level", "WARNING"], stdout=subprocess.PIPE, text=True)
    worker = None
    try:
        address = coordinator.stdout.readline().split()[-1]
        worker = subprocess.Popen([sys.executable, "-m", "workers", "--coordinator", address,
                                   "--orphan-after", str(orphan_after), "--log-level",
                                   "WARNING"], stdout=subprocess.DEVNULL)
        with connect(address, timeout=30) as cluster:
            cluster.wait_for_workers(1, timeout=60)
            time.sleep(3 * orphan_after)  # answered all along: it stays
            assert worker.poll() is None
            assert [w.alive for w in cluster.workers()] == [True]
        coordinator.kill()
        coordinator.wait(10)
        # orphan_after, a tick, then the process's end: 4 s under the load of a CI run (the
        # bound was orphan_after + 2); a worker that ignored --orphan-after would stay
        took = wait_until(lambda: worker.poll() is not None, 30)
        assert took < orphan_after + 15, took
        assert worker.returncode == 0
    finally:
        for proc in (worker, coordinator):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(10)
