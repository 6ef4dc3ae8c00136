"""Graphs follow their outputs: the workers free a forward's graph as soon as the client's
output tensor and its graph are gone (by refcount or by the garbage collector), and a
backward without ``retain_graph`` closes them at once (issue 18, item 3)."""
import gc
import time

import pytest
from clusters import open_graphs

import disthook as torch
from disthook import nn
from disthook.distributed import deployment_of

pytestmark = pytest.mark.timeout(120)

CLUSTER_WORKERS = 2  # the conftest cluster's size


@pytest.fixture
def remote(cluster):
    torch.manual_seed(0)
    deployed = cluster.deploy(nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3)),
                              stages=2)
    yield deployed
    deployed.close()


def settled(cluster, want: int, within: float = 5.0) -> dict[str, int]:
    """The workers' open graphs once each holds ``want`` (releases are one-way messages)."""
    deadline = time.monotonic() + within
    while True:
        counts = open_graphs(cluster)
        if set(counts.values()) == {want} or time.monotonic() > deadline:
            return counts
        time.sleep(0.05)


def test_a_retained_graph_is_freed_when_its_output_is_gone(cluster, remote):
    x = torch.randn(3, 4)
    for _ in range(10):
        out = remote(x)
        out.sum().backward(retain_graph=True)
    assert set(settled(cluster, 1).values()) == {1}  # only the graph of the last output
    del out
    gc.collect()
    assert set(settled(cluster, 0).values()) == {0}
    assert deployment_of(remote)._hub.pending_releases == []  # sent at once, not kept for a next call


def test_a_backward_without_retain_graph_closes_the_graphs(cluster, remote):
    x = torch.randn(3, 4)
    for _ in range(10):
        out = remote(x)
        out.sum().backward()
    assert set(settled(cluster, 0).values()) == {0}
    assert out.grad_fn is not None  # the output lives on; its graph is gone all the same


def test_an_output_dropped_without_backward_frees_its_graph(cluster, remote):
    x = torch.randn(3, 4)
    remote(x)  # dropped at once
    assert set(settled(cluster, 0).values()) == {0}
    cycle = {"out": remote(x)}
    cycle["self"] = cycle  # only the garbage collector frees this one
    del cycle
    assert set(settled(cluster, 1, within=0.5).values()) == {1}
    gc.collect()
    assert set(settled(cluster, 0).values()) == {0}


def test_an_output_dropped_during_a_call_is_released_by_the_next_call(cluster, remote):
    """A graph collected while the channel waits on a reply (here: in a client hook) is not
    released from inside the wait; the next call carries it."""
    x = torch.randn(3, 4)
    kept = [remote(x)]
    handle = remote[0].register_forward_hook(lambda m, args, out: kept.clear())
    with torch.no_grad():
        remote(x)
    assert kept == [] and len(deployment_of(remote)._hub.pending_releases) == 1
    handle.remove()  # a call: the release goes with it
    assert deployment_of(remote)._hub.pending_releases == []
    assert set(settled(cluster, 0).values()) == {0}
