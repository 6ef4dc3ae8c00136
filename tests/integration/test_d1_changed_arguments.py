"""A deployed part that changes in place a tensor the program gave it (``x.mul_(-1)`` in its
forward, ``nn.ReLU(inplace=True)`` first in a chain of stages): in one process the program's
tensor changes, and so does its version counter (and a view's base with it). Deployed, the
worker changed its copy: the program's tensor kept its old value, silently on the chain path
(a part's call refused it). The worker now says which arguments moved their version counter,
and their new values come back with the answer: the client writes them into the program's
tensors and moves their version counters as one process's move. Where the changed tensor
has a graph (a non-leaf that requires grad), one process gives it the in-place op's history,
which a deployed call does not: refused, naming the part and the argument."""
import numpy as np
import pytest
from helpers import deployed_run

import disthook as torch
from disthook import nn

CLUSTER_WORKERS = 2


class _ChangesItsArguments(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x, y=None, *, scale=None):
        x.mul_(-1)
        if y is not None:
            y.add_(1).mul_(2)  # two in-place ops: the version moves by two
        if scale is not None:
            scale.clamp_(max=0.5)
        return self.lin(x)


class _CallsIt(nn.Module):
    def __init__(self):
        super().__init__()
        self.part = _ChangesItsArguments()
        self.head = nn.Linear(3, 1)

    def forward(self, x, y, s):
        return self.head(self.part(x, y, scale=s)).tanh()


def _made(cls):
    def make():
        torch.manual_seed(0)
        return cls()
    return make


def _log(model, outs, tensors) -> dict:
    return {"out": [o.detach().numpy().copy() for o in outs],
            "values": [t.detach().numpy().copy() for t in tensors],
            "versions": [t._version for t in tensors],
            "grads": {n: p.grad.numpy().copy() for n, p in model.named_parameters()
                      if p.grad is not None}}


def _same(got: dict, want: dict) -> None:
    assert got["versions"] == want["versions"]
    for a, b in zip(got["values"], want["values"]):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    for a, b in zip(got["out"], want["out"]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert sorted(got["grads"]) == sorted(want["grads"])
    for name in want["grads"]:
        np.testing.assert_allclose(got["grads"][name], want["grads"][name], rtol=1e-5,
                                   atol=1e-6)


def test_a_part_changes_the_program_s_tensors_a_view_and_a_kwarg(cluster):
    def run(model):
        base = torch.tensor([[0.3, -0.2, 0.5], [1.0, 2.0, -3.0]])
        x = base[1:]  # a view: its base changes with it
        y = torch.tensor([0.5, -1.0, 2.0])
        s = torch.tensor([0.1, 0.7, 0.9])
        out = model(x, y, s)
        out.sum().backward()
        return _log(model, [out], [base, x, y, s])

    got, want = deployed_run(cluster, _made(_CallsIt), run, stages=2)
    assert want["versions"] == [1, 1, 2, 1]
    _same(got, want)


def test_a_leaf_that_requires_grad_changed_under_no_grad(cluster):
    def run(model):
        x = torch.tensor([[0.3, -0.2, 0.5]], requires_grad=True)
        y, s = torch.zeros(3), torch.ones(3)
        with torch.no_grad():
            out = model(x, y, s)
        return _log(model, [out], [x, y, s])

    got, want = deployed_run(cluster, _made(_CallsIt), run, stages=2)
    _same(got, want)


def _chain(chunks=1):
    torch.manual_seed(0)
    return nn.Sequential(nn.ReLU(inplace=True), nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))


@pytest.mark.parametrize("chunks", [1, 2])
def test_a_chain_whose_first_op_changes_its_input_in_place(cluster, chunks):
    def run(model):
        x = torch.tensor([[0.3, -0.2, 0.5], [-1.0, 2.0, -3.0], [0.1, 0.2, -0.3],
                          [-0.4, 0.5, 0.6]])
        out = model(x)
        out.pow(2).sum().backward()
        with torch.no_grad():
            y = torch.tensor([[-1.0, 1.0, -2.0]])
            out2 = model(y)
        return _log(model, [out, out2], [x, y])

    got, want = deployed_run(cluster, lambda: _chain(), run, stages=2, chunks=chunks)
    assert want["versions"] == [1, 1] and want["values"][0].min() == 0
    _same(got, want)


def test_a_chain_given_a_view(cluster):
    def run(model):
        base = torch.tensor([[0.3, -0.2, 0.5], [-1.0, 2.0, -3.0]])
        out = model(base[:, :])
        out.sum().backward()
        return _log(model, [out], [base])

    got, want = deployed_run(cluster, lambda: _chain(), run, stages=2)
    _same(got, want)


class _NegatesOne(nn.Module):
    def __init__(self):
        super().__init__()
        self.part = _ChangesItsArguments()

    def forward(self, x):
        return self.part(x)


def test_a_changed_argument_with_a_graph_takes_the_call_s_history(cluster):
    def run(model):
        w = torch.tensor([[0.3, -0.2, 0.5]], requires_grad=True)
        x = w * 2  # a non-leaf: in one process it takes the in-place op's history
        out = model(x)
        assert x.requires_grad and not x.is_leaf and x.grad_fn is not None
        (out.sum() + (x * x).sum()).backward()
        return {**_log(model, [out], [x]), "w": w.grad.numpy().copy()}

    got, want = deployed_run(cluster, _made(_NegatesOne), run, stages=1)
    assert want["versions"] == [1]
    _same(got, want)
    np.testing.assert_allclose(got["w"], want["w"], rtol=1e-6)


def test_a_view_changed_with_a_graph_is_refused(cluster):
    remote = cluster.deploy(_made(_NegatesOne)(), stages=1)
    try:
        w = torch.tensor([[0.3, -0.2, 0.5], [1.0, 2.0, 3.0]], requires_grad=True)
        x = (w * 2)[:1]
        with pytest.raises(NotImplementedError, match=r"'part'.*argument 0, a view.*graph"):
            remote(x)
        assert x.tolist()[0] == pytest.approx([0.6, -0.4, 1.0]) and x._version == 0
    finally:
        remote.close()


class _AddsItsBias(nn.Module):
    def __init__(self):
        super().__init__()
        self.bias = nn.Parameter(torch.ones(3))

    def forward(self, x):
        return x.add_(self.bias)


def test_a_chain_changing_its_input_with_a_graph_is_refused(cluster):
    def run(model):
        x = torch.tensor([[0.3, -0.2, 0.5]])
        out = model(x)
        return x.grad_fn.name(), out

    assert run(nn.Sequential(_AddsItsBias(), nn.Linear(3, 2)))[0] == "AddBackward0"
    remote = cluster.deploy(nn.Sequential(_AddsItsBias(), nn.Linear(3, 2)), stages=2)
    try:
        with pytest.raises(NotImplementedError, match=r"changed its input in place with a "
                                                      r"graph.*placement="):
            run(remote)
    finally:
        remote.close()

def _doubled_by_a_hook():
    torch.manual_seed(0)
    model = _NegatesOne()
    model.part.register_forward_pre_hook(_double_first)
    return model


def _double_first(module, args):
    args[0].mul_(2)


def test_a_client_hook_changes_the_program_s_tensor(cluster):
    def run(model):
        x = torch.tensor([[0.3, -0.2, 0.5]])
        out = model(x)
        out.sum().backward()
        return _log(model, [out], [x])

    got, want = deployed_run(cluster, _doubled_by_a_hook, run, stages=1)
    assert want["versions"] == [2]
    _same(got, want)



def test_arguments_sharing_memory_one_changed_are_refused(cluster):
    remote = cluster.deploy(_made(_CallsIt)(), stages=2)
    try:
        x = torch.tensor([[0.3, -0.2, 0.5]])
        with pytest.raises(NotImplementedError, match=r"argument 0, and its argument 1 shares "
                                                      r"memory"):
            remote(x, x[0], torch.ones(3))
    finally:
        remote.close()


class _ScalesItsInput(nn.Module):
    def __init__(self):
        super().__init__()
        self.s = nn.Parameter(torch.tensor([2.0, -1.0, 0.5]))

    def forward(self, x):
        return x.mul_(self.s)


class _CallsScales(nn.Module):
    def __init__(self):
        super().__init__()
        self.part = _ScalesItsInput()

    def forward(self, x):
        out = self.part(x)
        assert out is x  # one process: the tensor changed in place is the output
        return out


@pytest.mark.parametrize("grad", [False, True])
def test_a_part_returning_the_argument_it_changed_returns_the_program_s_tensor(cluster, grad):
    def run(model):
        w = torch.tensor([[0.3, -0.2, 0.5]], requires_grad=True)
        x = w * 2 if grad else torch.tensor([[0.3, -0.2, 0.5]])
        out = model(x)
        if grad:
            (out * out).sum().backward()
        return {**_log(model, [out], [x]),
                "w": w.grad.numpy().copy() if grad else None}

    got, want = deployed_run(cluster, _made(_CallsScales), run, stages=1)
    _same(got, want)
    if grad:
        np.testing.assert_allclose(got["w"], want["w"], rtol=1e-6)
