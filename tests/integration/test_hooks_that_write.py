"""Client hooks that ask the workers something or write to the model while the call that
fired them runs on a worker: a read of a weight, an attribute the module's forward reads,
a reparametrization's tensor (weight_norm, spectral_norm, pruning). Each against the same
program in one process; none may hang (they did: the call's answer, come while the hook
asked its own question, was dropped)."""
import numpy as np
import pytest
from helpers import deployed_run, same_logs

import disthook as torch
from disthook import nn

pytestmark = pytest.mark.timeout(240)
CLUSTER_WORKERS = 2


class Scaled(nn.Linear):
    """A Linear whose forward reads a plain tensor attribute (``w_eff``) set by hooks."""

    def __init__(self, a, b):
        super().__init__(a, b)
        self.w_eff = self.weight.detach() * 1.0

    def forward(self, x):
        return nn.functional.linear(x, self.w_eff, self.bias)


def chain():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 6), nn.ReLU(), Scaled(6, 6), nn.Tanh(), nn.Linear(6, 2))


X = torch.tensor(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4))


def calls(model, hook, n=3) -> list:
    model[2].register_forward_pre_hook(hook)
    return [model(X).detach().numpy() for _ in range(n)]


@pytest.mark.parametrize("hook", [
    lambda m, i: setattr(m, "seen", float((m.weight * 2).detach().sum())),  # reads a weight there
    lambda m, i: setattr(m, "w_eff", torch.ones(6, 6) * (getattr(m, "n", 0) + 1)),
    lambda m, i: setattr(m, "w_eff", m.weight.detach() * 0.5),  # from its own weight
], ids=["reads", "writes", "writes-from-weight"])
def test_a_hook_that_asks_or_writes_during_a_call_there_gives_one_process_results(
        cluster, hook):
    same_logs(*deployed_run(cluster, chain, lambda m: calls(m, hook)), rtol=1e-6)


def test_a_hook_that_sets_a_tensor_with_a_graph_says_so_once_then_computes_here(cluster):
    def reparam(m, inputs):  # a reparametrization of one's own, registered after the deploy
        m.w_eff = m.weight * 0.5

    def train(model, n):
        out = []
        for _ in range(n):
            model.zero_grad()
            y = model(X)
            y.pow(2).sum().backward()
            out += [y.detach().numpy(), model[2].weight.grad.numpy()]
        return out

    local = chain()
    local[2].register_forward_pre_hook(reparam)
    want = train(local, 2)
    remote = cluster.deploy(chain(), stages=2)
    try:
        remote[2].register_forward_pre_hook(reparam)
        with pytest.raises(RuntimeError, match=r"set 'w_eff' of the deployed module at '2' "
                                               r"to a tensor with a graph.*call the model again"):
            remote(X)
        for got, expected in zip(train(remote, 2), want):
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-7)
    finally:
        remote.close()


def reparametrized(kind: str, warm: bool):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 6), nn.Tanh(),
                          nn.Linear(6, 2))
    with pytest.warns(FutureWarning) if kind == "weight_norm" else _nothing():
        getattr(nn.utils, kind)(model[0])
        getattr(nn.utils, kind)(model[2])
    if warm:  # called once under no_grad before the deploy: its tensors hold no graph
        with torch.no_grad():
            model(X)
    return model


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def training(model, x=X) -> list:
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    log = []
    for _ in range(3):
        opt.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        log.append(loss.detach().numpy())
    log += [p.grad.numpy() for _, p in model.named_parameters()]
    return log + [sorted(model.state_dict())]


@pytest.mark.parametrize("warm", [False, True], ids=["as-made", "called-under-no_grad"])
@pytest.mark.parametrize("kind", ["weight_norm", "spectral_norm"])
def test_a_model_deployed_with_hook_reparametrizations_trains_as_in_one_process(
        cluster, kind, warm):
    same_logs(*deployed_run(cluster, lambda: reparametrized(kind, warm), training),
              rtol=1e-4, atol=1e-6)


class Block(nn.Module):
    """A TCN's temporal block: each reparametrized conv is an attribute of the block and
    also a step of the block's Sequential, so it is reached under two paths."""

    def __init__(self, kind: str):
        super().__init__()
        with pytest.warns(FutureWarning) if kind == "weight_norm" else _nothing():
            self.conv1 = getattr(nn.utils, kind)(nn.Conv1d(3, 4, 2, padding=1))
            self.conv2 = getattr(nn.utils, kind)(nn.Conv1d(4, 3, 2, padding=1))
        self.net = nn.Sequential(self.conv1, nn.ReLU(), self.conv2)

    def forward(self, x):
        return torch.relu(self.net(x)[:, :, :x.shape[2]] + x)


def blocks(kind: str, dtype):
    torch.manual_seed(0)
    return nn.Sequential(Block(kind), Block(kind), nn.Flatten(), nn.Linear(15, 2)).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("kind", ["weight_norm", "spectral_norm"])
def test_a_reparametrized_module_reached_under_two_paths_trains_as_in_one_process(
        cluster, kind, dtype):
    """Before, the block's Sequential ran whole on its worker, where the conv's
    reparametrization did not run: its weight was the one made at deploy (float32 after
    ``.double()``: a dtype error) and ``weight_v`` got no gradient."""
    x = torch.tensor(np.linspace(-1, 1, 30).reshape(2, 3, 5), dtype=dtype)
    same_logs(*deployed_run(cluster, lambda: blocks(kind, dtype), lambda m: training(m, x)),
              rtol=1e-5, atol=1e-7)
