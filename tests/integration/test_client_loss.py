"""A client that goes away (killed, hung, or just gone without clean-up) while the workers
hold its graphs or wait on its hooks: within a few heartbeats every worker drops what it held
for that client and ends its waits, and serves everyone else meanwhile and afterwards."""
import copy
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from clusters import open_graphs, wait_until, worker_statuses

import disthook as torch
from disthook import nn
from disthook.distributed import local_cluster
from disthook.wire import HEARTBEAT_S, LOST_AFTER_BEATS

pytestmark = pytest.mark.timeout(120)

LOSS_S = LOST_AFTER_BEATS * HEARTBEAT_S  # how long a worker waits on a silent client

CLIENT = textwrap.dedent("""
    import os, sys, time
    import disthook as torch
    from disthook import nn
    from disthook.distributed import connect

    cluster = connect(sys.argv[1])
    remote = cluster.deploy(nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 2)),
                            stages=2)
    how = sys.argv[2]

    def stuck(*args):  # a hook that never returns: the worker waits for its answer
        print("in hook", flush=True)
        time.sleep(600)

    if how == "forward hook":
        remote[2].register_forward_hook(stuck)
        remote(torch.ones(3, 4))
    elif how == "backward hook":
        remote[0].register_full_backward_hook(stuck)
        remote(torch.ones(3, 4)).sum().backward()
    else:
        outs = [remote(torch.ones(3, 4)) for _ in range(5)]  # 5 graphs, no backward
        print("graphs open", flush=True)
        if how == "vanish":
            os._exit(0)  # no close, no release
        time.sleep(600)  # "hang": stopped by the test
""")


def start_client(cluster, how: str, until: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", CLIENT, cluster.address, how],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if until not in line:
        proc.kill()
        raise AssertionError(f"the client printed {line!r}: {proc.stderr.read()}")
    return proc


def trains_like_one_process(cluster) -> None:
    """A new client deploys on the same workers and a step is exactly one process's."""
    torch.manual_seed(0)
    local = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))
    remote = cluster.deploy(copy.deepcopy(local), stages=2)
    x = torch.randn(5, 4)
    local(x).pow(2).sum().backward()
    remote(x).pow(2).sum().backward()
    grads = remote.named_gradients()
    for name, p in local.named_parameters():
        np.testing.assert_allclose(grads[name].numpy(), p.grad.numpy(), rtol=1e-6, atol=1e-7)
    remote.close()


@pytest.mark.parametrize("how", ["forward hook", "backward hook"])
def test_a_client_killed_inside_its_hook_frees_the_worker_at_once(how):
    with local_cluster(workers=2) as cluster:
        proc = start_client(cluster, how, "in hook")
        try:
            # the worker waits on the hook, and still answers status meanwhile
            waiting = list(worker_statuses(cluster, timeout=LOSS_S).values())
            assert sum(s["waits"] for s in waiting) == 1, waiting
            proc.kill()
            proc.wait(10)
            took = wait_until(
                lambda: sum(s["waits"] for s in worker_statuses(cluster).values()) == 0,
                LOSS_S + 2)
            assert took < LOSS_S + 1
            assert sum(open_graphs(cluster).values()) == 0
            trains_like_one_process(cluster)
        finally:
            proc.kill()
            proc.wait(10)


def test_graphs_of_a_vanished_client_are_dropped_when_its_connection_closes():
    with local_cluster(workers=2) as cluster:
        proc = start_client(cluster, "vanish", "graphs open")
        proc.wait(30)
        wait_until(lambda: sum(open_graphs(cluster).values()) == 0, LOSS_S + 2)
        trains_like_one_process(cluster)


def test_graphs_of_a_hung_client_are_dropped_after_its_missed_heartbeats():
    with local_cluster(workers=2) as cluster:
        proc = start_client(cluster, "hang", "graphs open")
        try:
            assert sum(open_graphs(cluster).values()) == 10  # 5 graphs on each of the 2 stages
            os.kill(proc.pid, signal.SIGSTOP)  # alive, but its pings go unanswered
            took = wait_until(lambda: sum(open_graphs(cluster).values()) == 0, LOSS_S + 5)
            assert took > HEARTBEAT_S  # not before it missed its beats
            trains_like_one_process(cluster)
        finally:
            proc.kill()
            proc.wait(10)


def test_graphs_a_live_client_keeps_past_their_deadline_expire():
    with local_cluster(workers=2, context_ttl=2.0) as cluster:
        remote = cluster.deploy(nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 2)),
                                stages=2)
        outs = [remote(torch.ones(3, 4)) for _ in range(3)]
        assert sum(open_graphs(cluster).values()) == 6
        wait_until(lambda: sum(open_graphs(cluster).values()) == 0, 10)
        with pytest.raises(Exception, match="expired"):
            outs[0].sum().backward()
        remote.close()
