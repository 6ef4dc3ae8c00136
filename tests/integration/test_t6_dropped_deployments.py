"""What a client keeps over many deploys: a closed deployment is forgotten, and a model the
program drops without ``close()`` (a notebook cell deploying again and again) unloads from
the workers and closes its sockets once collected, as a dropped model's memory goes in one
process. Before, the cluster held every deployment until it closed: each dropped model kept
two sockets (and their descriptors) per worker here and its stage loaded on the workers,
and each closed one stayed in memory with its model, each deployment ever made added an
exit function to the interpreter's list, and an attached model dropped unclosed stayed
counted by the coordinator against the client's limit of attachments."""
import atexit
import gc

import pytest
import zmq
from clusters import wait_until, worker_statuses

import disthook as torch
from coordinator.server import MAX_ATTACHED_PER_CLIENT
from disthook import nn
from disthook.distributed import connect
from disthook.distributed.deployment import Deployment

pytestmark = pytest.mark.timeout(180)
CLUSTER_WORKERS = 2
ROUNDS = 12


def _net():
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))


def _open_sockets() -> int:
    gc.collect()
    return sum(1 for o in gc.get_objects() if isinstance(o, zmq.Socket) and not o.closed)


def _alive(cls) -> int:
    gc.collect()
    return sum(1 for o in gc.get_objects() if type(o) is cls)


def _stages_held(cluster) -> int:
    return sum(len(s["stages"]) for s in worker_statuses(cluster).values())


def test_closed_deployments_are_not_kept(cluster):
    x = torch.ones(2, 4)
    before, exit_functions = _alive(Deployment), atexit._ncallbacks()
    for _ in range(ROUNDS):
        model = cluster.deploy(_net(), stages=2)
        model(x).sum().item()
        model.close()
    del model
    assert _alive(Deployment) - before == 0
    assert len(cluster._deployments) == 0
    assert atexit._ncallbacks() - exit_functions <= 1  # (one for every model's channel)


def test_a_dropped_model_unloads_and_closes_its_sockets(cluster):
    x = torch.ones(2, 4)
    sockets = _open_sockets()
    for _ in range(ROUNDS):
        model = cluster.deploy(_net(), stages=2)
        model(x).sum().item()
        del model  # never closed
    assert _open_sockets() == sockets
    wait_until(lambda: _stages_held(cluster) == 0, 10)  # (the unload goes without a reply)


def test_an_output_outlives_its_dropped_model(cluster):
    torch.manual_seed(0)
    net, x = _net(), torch.randn(2, 4)
    want = net(x).detach().numpy().copy()
    model = cluster.deploy(net, stages=2)
    out = model(x)
    del model, net
    gc.collect()
    assert _stages_held(cluster) == 2  # the output's value is on the last stage
    assert abs(out.detach().numpy() - want).max() < 1e-6
    del out
    gc.collect()
    wait_until(lambda: _stages_held(cluster) == 0, 10)


def test_a_published_model_stays_when_its_deployer_drops_it(cluster):
    torch.manual_seed(0)
    net, x = _net(), torch.randn(2, 4)
    want = net(x).detach().numpy().copy()
    cluster.deploy(net, stages=2, name="t6-kept")
    del net
    gc.collect()
    with connect(cluster.address) as other:
        attached = other.attach("t6-kept")
        assert abs(attached(x).detach().numpy() - want).max() < 1e-6
        sockets = _open_sockets()
        for _ in range(ROUNDS):  # attached and dropped: this client's sockets go, nothing
            again = other.attach("t6-kept")  # unloads (they are not its stages)
            again(x).sum().item()
            del again
        assert _open_sockets() == sockets
        assert abs(attached(x).detach().numpy() - want).max() < 1e-6
    for remote in list(cluster._deployments.values()):
        remote.close()
    assert _stages_held(cluster) == 0


def test_attaching_and_dropping_past_the_coordinators_limit(cluster):
    # the coordinator counts a client's attachments to a name and refuses one past its
    # limit: a dropped one detaches (before, the program was refused from then on)
    torch.manual_seed(0)
    net, x = _net(), torch.randn(2, 4)
    want = net(x).detach().numpy().copy()
    published = cluster.deploy(net, stages=2, name="t6-many")
    with connect(cluster.address) as other:
        for _ in range(MAX_ATTACHED_PER_CLIENT + 2):
            attached = other.attach("t6-many")
            del attached
        gc.collect()  # (each collected one detaches before the next attach)
        attached = other.attach("t6-many")
        assert abs(attached(x).detach().numpy() - want).max() < 1e-6
        [entry] = other.models(calls=False)
        assert len(entry["clients"]) == 1, entry["clients"]
    published.close()
