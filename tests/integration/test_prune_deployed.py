"""torch.nn.utils.prune and a deployed model, against one process. A pruning is a forward
pre-hook that recomputes ``weight`` from ``weight_orig`` and ``weight_mask``. A module pruned
after the deploy has its parameters changed here, so its forward runs here between its
hooks (model surgery), reading its tensors from its worker and sending their gradients
there; a module deployed pruned recomputes its tensor on its worker. Either way outputs,
gradients to ``weight_orig``, training steps, ``state_dict`` keys and ``prune.remove`` are
one process's. A model whose own forward runs on the client keeps its own parameters here:
those are pruned as in one process."""
import numpy as np
import pytest
from helpers import deployed_run, same_logs

import disthook as torch
from disthook import nn
from disthook.nn.utils import prune

pytestmark = pytest.mark.timeout(240)
CLUSTER_WORKERS = 2


def chain():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 6), nn.Tanh(),
                         nn.Linear(6, 2))


def pruned(permanent: bool):
    model = chain()
    prune.l1_unstructured(model[0], "weight", 0.5)
    prune.ln_structured(model[2], "weight", 2, n=2, dim=0)
    if permanent:
        prune.remove(model[0], "weight")
        prune.remove(model[2], "weight")
    return model


class Net(nn.Module):
    """Parts on workers, and a parameter of its own used by its forward on the client."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b = nn.Linear(4, 6), nn.Linear(6, 2)
        self.scale = nn.Parameter(torch.tensor([1.0, -2.0, 0.5, 3.0, -0.1, 0.2]))

    def forward(self, x):
        return self.b(torch.relu(self.a(x)) * self.scale)


X = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)


def pruning_run(model, prune_now: bool) -> list:
    """Prune (when ``prune_now``), train two SGD steps, read, remove the pruning."""
    x = torch.tensor(X)
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    if prune_now:
        prune.l1_unstructured(linears[0], "weight", 0.3)
        prune.global_unstructured([(m, "weight") for m in linears[1:]],
                                  prune.L1Unstructured, amount=0.4)
    log = [model(x).detach().numpy(), sorted(model.state_dict())]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        opt.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        log.append(loss.detach().numpy())
    log += [linears[0].weight.detach().numpy(), linears[0].weight_orig.grad.numpy(),
            int((linears[-1].weight.detach().numpy() == 0).sum())]
    for m in linears:
        if prune.is_pruned(m):
            prune.remove(m, "weight")
    log += [model(x).detach().numpy(), sorted(model.state_dict()),
            [n for n, _ in model.named_parameters()]]
    return log


@pytest.mark.parametrize("make", [chain, Net], ids=["chain", "own-forward"])
def test_pruning_a_deployed_model_trains_and_removes_as_in_one_process(cluster, make):
    same_logs(*deployed_run(cluster, make, lambda m: pruning_run(m, prune_now=True)),
              rtol=1e-5, atol=1e-7)


def test_a_model_deployed_whole_is_pruned_as_in_one_process(cluster):
    def run(model):
        prune.ln_structured(model, "weight", 1, n=2, dim=0)
        out = model(torch.tensor(X))
        out.pow(2).sum().backward()
        return [out.detach().numpy(), model.weight_orig.grad.numpy(), sorted(model.state_dict())]

    def linear():
        torch.manual_seed(0)
        return nn.Linear(4, 2)

    same_logs(*deployed_run(cluster, linear, run, stages=1), rtol=1e-5, atol=1e-7)


def test_a_model_deployed_pruned_trains_as_in_one_process(cluster):
    def run(model):
        return [prune.is_pruned(model), *pruning_run(model, prune_now=False)]

    same_logs(*deployed_run(cluster, lambda: pruned(permanent=False), run), rtol=1e-5,
              atol=1e-7)


def test_a_pruning_made_permanent_before_deploying_runs_as_in_one_process(cluster):
    local = pruned(permanent=True)
    want = local(torch.tensor(X))
    want.pow(2).sum().backward()
    remote = cluster.deploy(pruned(permanent=True), stages=2)
    try:
        got = remote(torch.tensor(X))
        got.pow(2).sum().backward()
        np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-6)
        assert (remote[0].weight.detach().numpy() == 0).sum() == 12
        assert (remote[2].weight.detach().numpy() == 0).all(axis=1).sum() == 2
        for (name, p), (_, q) in zip(remote.named_parameters(), local.named_parameters()):
            np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-5, atol=1e-7,
                                       err_msg=name)
    finally:
        remote.close()


def test_the_own_parameter_of_a_model_run_here_is_pruned_as_in_one_process(cluster):
    local = Net()
    prune.l1_unstructured(local, "scale", 2)
    want = local(torch.tensor(X))
    want.pow(2).sum().backward()
    remote = cluster.deploy(Net(), stages=2)
    try:
        prune.l1_unstructured(remote, "scale", 2)
        got = remote(torch.tensor(X))
        got.pow(2).sum().backward()
        np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-6)
        assert list(remote.state_dict()) == list(local.state_dict())
        for (name, p), (_, q) in zip(remote.named_parameters(), local.named_parameters()):
            np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-5, atol=1e-7,
                                       err_msg=name)
        prune.remove(remote, "scale")
        prune.remove(local, "scale")
        assert [n for n, _ in remote.named_parameters()] == [n for n, _ in
                                                            local.named_parameters()]
        np.testing.assert_array_equal(remote.scale.detach().numpy(),
                                      local.scale.detach().numpy())
    finally:
        remote.close()


class SmallLeNet(nn.Module):
    """The pruning tutorial's LeNet, smaller: two convolutions and two linears, its own
    forward (so it runs here, each part on its worker)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv1, self.conv2 = nn.Conv2d(1, 3, 3), nn.Conv2d(3, 4, 3)
        self.fc1, self.fc2 = nn.Linear(4 * 3 * 3, 8), nn.Linear(8, 3)

    def forward(self, x):
        x = torch.nn.functional.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = torch.relu(self.conv2(x))
        x = torch.relu(self.fc1(x.flatten(1)))
        return self.fc2(x)


def test_a_conv_net_deployed_pruned_trains_as_in_one_process(cluster):
    """A convolution's weight gradient computed on the worker that holds its operands takes the
    convolution's settings along as data (a named tuple); they arrived as a plain tuple and the
    step failed on the worker with AttributeError."""
    def make():
        model = SmallLeNet()
        prune.l1_unstructured(model.conv1, "weight", 0.3)
        prune.ln_structured(model.fc1, "weight", 0.5, n=2, dim=0)
        return model

    def run(model):
        x = torch.tensor(np.linspace(-1, 1, 2 * 144, dtype=np.float32).reshape(2, 1, 12, 12))
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        log = []
        for _ in range(2):
            opt.zero_grad()
            loss = model(x).pow(2).mean()
            loss.backward()
            opt.step()
            log += [loss.detach().numpy()] + [p.grad.numpy() for p in model.parameters()]
        return log + [model(x).detach().numpy(), sorted(model.state_dict())]

    same_logs(*deployed_run(cluster, make, run), rtol=1e-5, atol=1e-6)
