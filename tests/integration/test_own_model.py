"""A deployed model is the user's own model, placed in place: ``deploy`` returns the same
object, every module keeps its class and identity, every parameter and buffer is the same
tensor object with its storage on a worker, and references taken before the deploy (a
layer, a parameter, an optimizer over the parameters, a handle) keep working. Each case
runs on 2 and 3 workers against the same program in one process."""
import copy

import numpy as np
import pytest

import disthook as torch
from disthook import nn
from disthook.distributed import deployment_of, local_cluster
from disthook.distributed.parameters import RemoteBuffer, RemoteParameter


@pytest.fixture(scope="module", params=[2, 3], ids=lambda n: f"{n}-workers")
def cluster(request, shared_clusters):
    with shared_clusters.lend(request.param) as c:
        yield c


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.act = nn.ReLU()
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(4 * 5 * 5, 8), nn.Tanh(),
                                  nn.Linear(8, 3))
        self.calls = 0

    def forward(self, x):
        self.calls += 1  # a side effect of the forward: once per call
        return self.head(self.act(self.bn(self.conv(x))))


def made(seed=0):
    torch.manual_seed(seed)
    return Net()


def close(a, b, tol=1e-5):
    np.testing.assert_allclose(np.asarray(a.detach().numpy()), np.asarray(b.detach().numpy()),
                               rtol=tol, atol=tol)


def test_deploy_returns_the_same_objects_with_their_classes(cluster):
    model, local = made(), made()
    conv, weight, head_last = model.conv, model.conv.weight, model.head[-1]
    running = model.bn.running_mean
    stages = len(cluster.workers())
    assert cluster.deploy(model, stages=stages) is model
    try:
        assert model.conv is conv and model.conv.weight is weight and model.head[-1] is head_last
        assert model.bn.running_mean is running
        assert type(model.conv) is nn.Conv2d and type(model.head) is nn.Sequential
        assert isinstance(weight, nn.Parameter) and isinstance(weight, RemoteParameter)
        assert isinstance(running, RemoteBuffer)
        # truth and len only where torch's classes define them: a leaf is truthy
        assert bool(model.conv) and any(model.head.children()) and len(model.head) == 4
        assert [n for n, _ in model.named_modules()] == [n for n, _ in local.named_modules()]
        assert repr(model) == repr(local)
        # metadata without a round trip, values fetched when read
        assert weight.shape == local.conv.weight.shape and torch.zeros_like(weight).sum() == 0
        close(weight, local.conv.weight)
        x = torch.randn(2, 1, 5, 5)
        close(model(x), local(x))
        close(running, local.bn.running_mean)  # the statistics moved on the worker
        assert model.calls == local.calls == 1
        assert deployment_of(model) is not None and deployment_of(local) is None
    finally:
        model.close()


def test_references_taken_before_the_deploy_keep_working(cluster):
    model, local = made(), made()
    results = {}
    x = torch.randn(3, 1, 5, 5)
    for name, m in (("local", local), ("remote", model)):
        opt = torch.optim.SGD(m.parameters(), lr=0.1)  # made before the deploy
        target = m.head[1]  # a layer picked before the deploy
        seen = []
        handle = target.register_forward_hook(
            lambda mod, args, out, seen=seen, target=target: seen.append(
                (mod is target, tuple(out.shape))))
        if name == "remote":
            cluster.deploy(m, stages=len(cluster.workers()))  # the bare call: no rebinding
        for _ in range(2):
            opt.zero_grad()
            m(x).pow(2).sum().backward()
            opt.step()
        handle.remove()  # a handle made before the deploy removes the hook there too
        m(x)
        results[name] = (seen, [p.detach().numpy().copy() for p in m.parameters()])
    try:
        assert results["remote"][0] == results["local"][0] == [(True, (3, 8))] * 2
        for a, b in zip(results["remote"][1], results["local"][1]):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    finally:
        model.close()


def test_close_brings_the_model_back_with_its_values(cluster):
    model, local = made(), made()
    weight = model.head[1].weight
    cluster.deploy(model, stages=len(cluster.workers()))
    x = torch.randn(2, 1, 5, 5)
    with torch.no_grad():
        model.head[1].weight.mul_(2.0)
        local.head[1].weight.mul_(2.0)
    model(x), local(x)
    model.close()
    assert deployment_of(model) is None and model.head[1].weight is weight
    assert type(weight) is nn.Parameter and type(model.bn.running_mean) is torch.Tensor
    close(model(x), local(x))  # runs here now, with the values the workers had
    again = cluster.deploy(model, stages=len(cluster.workers()))  # and can go again
    try:
        close(again(x), local(x))
    finally:
        again.close()


def test_a_deployed_model_is_refused_a_second_deploy_and_copies_are_plain(cluster):
    model, local = made(), made()
    cluster.deploy(model, stages=len(cluster.workers()))
    try:
        with pytest.raises(ValueError, match=r"deployed already .*close"):
            cluster.deploy(model, stages=1)
        with pytest.raises(ValueError, match=r"its module '0' is deployed already"):
            cluster.deploy(nn.Sequential(model.head), stages=1)
        copied = copy.deepcopy(model)  # a plain local model with the workers' values
        assert deployment_of(copied) is None and type(copied.conv.weight) is nn.Parameter
        x = torch.randn(2, 1, 5, 5)
        close(copied(x), local(x))
        copied.conv.weight.data.zero_()  # the copy is the program's own
        close(model(x), local(x))
    finally:
        model.close()


def test_training_mode_and_state_dict_round_trip(cluster):
    model, local = made(), made()
    cluster.deploy(model, stages=len(cluster.workers()))
    try:
        model.eval(), local.eval()
        assert all(not m.training for m in model.modules())
        x = torch.randn(2, 1, 5, 5)
        close(model(x), local(x))  # eval-mode batch norm on the worker
        model.head.train()  # one placed part alone
        assert model.head.training and not model.conv.training
        model.train(), local.train()
        model.bn.training = False  # one module's flag, set as an attribute: on its worker too
        local.bn.training = False
        close(model(x), local(x))  # the worker's batch norm uses its running statistics
        state = {k: v * 0.5 if v.is_floating_point() else v for k, v in local.state_dict().items()}
        model.load_state_dict(state)
        local.load_state_dict(state)
        model.eval(), local.eval()
        for (k, a), (k2, b) in zip(model.state_dict().items(), local.state_dict().items()):
            assert k == k2
            close(a, b)
        close(model(x), local(x))
    finally:
        model.close()


def test_a_model_whose_workers_were_lost_is_not_deployed_again_with_no_values():
    import os
    import signal

    from disthook.distributed import WorkerLost

    model = made()
    with local_cluster(workers=2) as cluster:
        cluster.deploy(model, stages=2)
        victim = model.workers()[1][1]
        os.kill(next(w.pid for w in cluster.workers() if w.id == victim), signal.SIGKILL)
        with pytest.raises(WorkerLost):
            model(torch.randn(2, 1, 5, 5))
        model.close()  # its values cannot come back: the placements stay, and say so
        assert deployment_of(model) is not None
        with pytest.raises(ValueError, match=r"workers were lost before its values came "
                                             r"back.*Load a checkpoint"):
            cluster.deploy(model, stages=1)
