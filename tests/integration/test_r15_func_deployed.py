"""torch.func transforms over a deployed model whose weights require grad: their results are
tracked as torch's are. A gradient penalty written with torch.func.grad (input-gradient or
Jacobian regularisation) trains the weights with one process's gradients where the forward
runs on the client; through a chain of stages, whose gradients travel without a graph, the
values come and a backward that reaches them says so, rather than adding nothing."""
import numpy as np
import pytest
from helpers import deployed_run

import disthook as torch
from disthook import nn
from disthook.func import grad, jacrev, vjp


class Tree(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 6), nn.Tanh())
        self.head = nn.Linear(6, 3)

    def forward(self, x):
        return self.head(self.body(x))


def tree():
    torch.manual_seed(0)
    return Tree().double()


def chain():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3)).double()


X = np.random.RandomState(1).randn(5, 4)
Y = [0, 2, 1, 1, 0]


def penalised(model):
    x, y = torch.from_numpy(X), torch.tensor(Y)
    gx = grad(lambda inp: nn.functional.cross_entropy(model(inp), y))(x)
    assert gx.requires_grad
    loss = nn.functional.cross_entropy(model(x), y) + 5.0 * gx.pow(2).sum()
    loss.backward()
    return [gx.detach().numpy()] + [p.grad.numpy().copy() for p in model.parameters()]


def saliency(model):
    x, y = torch.from_numpy(X), torch.tensor(Y)
    gx = grad(lambda inp: nn.functional.cross_entropy(model(inp), y))(x)
    out, fn = vjp(model, x)
    (g,) = fn(torch.ones_like(out))
    return [gx.detach().numpy(), g.detach().numpy(),
            np.asarray([gx.requires_grad, g.requires_grad])]


def _same(got, want):
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-12)


def test_gradient_penalty_with_torch_func_on_a_tree(cluster):
    got, want = deployed_run(cluster, tree, penalised)
    _same(got, want)


def test_saliency_with_torch_func_on_a_chain(cluster):
    got, want = deployed_run(cluster, chain, saliency)
    _same(got, want)


def test_gradient_penalty_through_a_chain_says_so(cluster):
    model = cluster.deploy(chain(), stages=2)
    try:
        with pytest.raises(NotImplementedError, match="chain of stages"):
            penalised(model)
    finally:
        model.close()


def test_jacrev_on_a_chain(cluster):
    def run(model):
        J = jacrev(model)(torch.from_numpy(X[0]))
        return [J.detach().numpy(), np.asarray([J.requires_grad])]
    got, want = deployed_run(cluster, chain, run)
    _same(got, want)
    model = cluster.deploy(chain(), stages=2)
    try:
        J = jacrev(model)(torch.from_numpy(X[0]))
        with pytest.raises(NotImplementedError, match="chain of stages"):
            J.pow(2).sum().backward()
    finally:
        model.close()
