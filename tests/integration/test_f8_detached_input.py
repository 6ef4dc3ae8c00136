"""A deployed model whose forward pre-hook gives the module a detached tensor: the graph of
its output does not reach the program's input, and in one process a backward runs nothing
on the way to that input. Deployed, the client's node of the call had an edge to the input
all the same: the input's tensor hooks fired with None, a ``register_multi_grad_hook(mode=
"all")`` over (output, input) fired once more with ``[None, None]`` (a hook of an earlier
round's output), and ``autograd.grad(loss, [x], allow_unused=True)`` ran a custom
Function's backward on the output that one process never runs (fuzzer seeds 1100, 1544)."""
from __future__ import annotations

import pytest

import disthook as T
from disthook import nn


class Blocks(nn.Module):  # not a chain: its parts are called from the client
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(3, 3), nn.Linear(3, 3)

    def forward(self, x):
        return self.b(self.a(x).tanh())


def _detaching(model, module):
    module.register_forward_pre_hook(lambda m, args: (args[0].detach() * -1,))
    return model


def _chain():
    model = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 3))
    return _detaching(model, model[0])


def _parts():
    model = Blocks()
    return _detaching(model, model.a)


def _hooks_log(make, deploy) -> list:
    T.manual_seed(0)
    model = deploy(make())
    x = T.ones(2, 3, requires_grad=True)
    log = []
    x.register_hook(lambda g: log.append(("x hook", None if g is None else g.sum().item())))
    for _ in range(2):  # the first round's multi-grad hook must stay silent in the second
        out = model(x)
        T.autograd.graph.register_multi_grad_hook(
            (out, x), lambda gs: log.append(("multi", [g is not None for g in gs])))
        out.sum().backward()
        log.append(("x.grad", x.grad))
    return log


CALLS = []  # what _Twice's backward did


class _Twice(T.autograd.Function):
    @staticmethod
    def forward(ctx, a):
        return a * 2

    @staticmethod
    def backward(ctx, g):
        CALLS.append("backward")
        return g * 2


def _grad_log(make, deploy) -> list:
    T.manual_seed(0)
    model = deploy(make())
    x = T.ones(2, 3, requires_grad=True)
    CALLS.clear()
    loss = _Twice.apply(model(x)).sum()
    got = T.autograd.grad(loss, [x], allow_unused=True)
    return [got, list(CALLS)]


def _deployed(cluster, run, make) -> list:
    placed = []
    try:
        return run(make, lambda m: placed.append(cluster.deploy(m, stages=2)) or placed[-1])
    finally:
        for remote in placed:
            remote.close()


@pytest.mark.parametrize("make", [_chain, _parts], ids=["chain", "parts"])
def test_a_detached_input_gets_no_hook_call_deployed(cluster, make):
    want = _hooks_log(make, lambda m: m)
    assert want == [("multi", [True, False]), ("x.grad", None)] * 2
    assert _deployed(cluster, _hooks_log, make) == want


@pytest.mark.parametrize("make", [_chain, _parts], ids=["chain", "parts"])
def test_a_grad_to_a_detached_input_runs_no_backward_deployed(cluster, make):
    want = _grad_log(make, lambda m: m)
    assert want == [(None,), []]
    assert _deployed(cluster, _grad_log, make) == want
