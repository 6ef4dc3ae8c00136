"""Custom autograd Functions inside placed parts (R17): a part holding its Function class in
an attribute (``self.fn = MemoryEfficientSwish``, with a ``@once_differentiable`` backward)
deploys and trains with one process's gradients; differentiated twice (a Hamiltonian
network's time derivative, ``create_graph=True``) it raises on the worker as in one process,
never a gradient without the Function's second-order term."""
import numpy as np
import pytest
from helpers import deployed_run

import disthook as torch
from disthook import nn
from disthook.autograd.function import once_differentiable


class SwishOnce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * torch.sigmoid(x)

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(x)
        return g * (s * (1 + x * (1 - s)))


class Act(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn.apply(x)


class Energy(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(2, 6), Act(SwishOnce), nn.Linear(6, 6))
        self.head = nn.Sequential(Act(SwishOnce), nn.Linear(6, 1))

    def forward(self, x):
        return self.head(self.body(x))


def energy():
    torch.manual_seed(0)
    return Energy().double()


X = np.random.RandomState(1).randn(5, 2)


def train_once(model):
    x = torch.from_numpy(X).requires_grad_()
    model(x).pow(2).sum().backward()
    return [x.grad.numpy()] + [p.grad.numpy().copy() for p in model.parameters()]


def time_derivative_loss(model):
    x = torch.from_numpy(X).requires_grad_()
    (dh,) = torch.autograd.grad(model(x).sum(), x, create_graph=True)
    return (dh[:, 1] + x[:, 0]).pow(2).mean()


def test_once_differentiable_function_in_a_part_trains_as_one_process(cluster):
    got, want = deployed_run(cluster, energy, train_once)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)


@pytest.mark.filterwarnings("ignore:the backward of the deployed Energy raised")
def test_once_differentiable_function_differentiated_twice_raises_on_its_worker(cluster):
    with pytest.raises(RuntimeError, match="once_differentiable"):
        time_derivative_loss(energy()).backward()
    model = cluster.deploy(energy(), stages=2)
    try:
        with pytest.raises(RuntimeError, match="trying to differentiate twice a function that "
                                               "was marked with @once_differentiable"):
            time_derivative_loss(model).backward()
    finally:
        model.close()


class DropInputGrad(torch.autograd.Function):
    """Scales by ``w``; gives ``w`` its gradient and the input none (None)."""

    @staticmethod
    def forward(ctx, x, w):
        return x * w

    @staticmethod
    def backward(ctx, g):
        return None, g.sum(0)


class Cutter(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(4, dtype=torch.float64))

    def forward(self, x):
        return DropInputGrad.apply(x, self.w)


class CutTree(nn.Module):
    def __init__(self):
        super().__init__()
        self.low = nn.Sequential(nn.Linear(3, 4), nn.Tanh())
        self.high = nn.Sequential(nn.Linear(4, 4), Cutter(), nn.Linear(4, 2))

    def forward(self, x):
        return self.high(self.low(x))


def cut_chain():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 4), Cutter(),
                         nn.Linear(4, 2)).double()


def cut_tree():
    torch.manual_seed(0)
    return CutTree().double()


def backward_past_a_cut(model):
    x = torch.from_numpy(X[:, :1].repeat(3, 1)).requires_grad_()
    model(x).pow(2).sum().backward()
    return ([np.asarray(x.grad is None)]
            + [np.asarray("None") if p.grad is None else p.grad.numpy().copy()
               for p in model.parameters()])


@pytest.mark.parametrize("make", [cut_chain, cut_tree], ids=["chain", "tree"])
def test_stages_below_a_function_that_returns_none_keep_grad_none(cluster, make):
    got, want = deployed_run(cluster, make, backward_past_a_cut)
    assert want[0] and [str(w) for w in want[1:5]] == ["None"] * 4  # one process: the cut
    for g, w in zip(got, want, strict=True):
        if w.dtype.kind in "US":
            assert str(g) == str(w)
        else:
            np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)
