"""What the hook fuzzer's seeds left by round seven came down to on deployed models (F12),
each as the small program it came down to.

Seeds 1963, 1975, 2186: a forward pre-hook of a deployed part changes the call's argument
in place, where that argument is the program's leaf that requires grad. In one process the
hook's tensor is that leaf, and the change raises torch's leaf error at the statement (a
hook that catches it goes on). Deployed, the hook got the worker's copy as a tensor computed
by an op, whose change went through; the error came later, on the worker, after the hook's
next statements had run. The hook's tensor now refuses the change at the statement, as the
program's leaf does (given_tensors.mark_leaf_argument).
"""
from __future__ import annotations

import pytest
from helpers import deployed_run

import disthook as torch
from disthook import nn

CLUSTER_WORKERS = 2


def _make():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 3), nn.Tanh(), nn.Linear(3, 2))


def _changing_the_argument(change):
    """A forward pre-hook of the first part changes its argument (``change``), catching
    what that raises, and logs what came and that it went on; then the model's output."""
    def run(model):
        log = []

        def pre(module, args):
            try:
                change(args[0])
                log.append("changed")
            except RuntimeError as e:
                log.append(("raised", str(e)))
            log.append("went on")

        model[0].register_forward_pre_hook(pre)
        x = torch.tensor([[1.0, -2.0, 3.0], [0.5, 0.0, -1.0]], requires_grad=True)
        out = model(x)
        out.sum().backward()
        log.append(("out", out.detach().numpy().round(5).tolist()))
        log.append(("x.grad", x.grad.numpy().round(5).tolist()))
        log.append(("x", x.detach().numpy().round(5).tolist()))
        return log
    return run


def _setitem(t):
    t[:, 0] = 0.0


@pytest.mark.parametrize("change", [lambda t: t.mul_(-1), lambda t: t.add_(1.0), _setitem,
                                    lambda t: t[0].zero_()],
                         ids=["mul_", "add_", "setitem", "view"])
def test_a_pre_hook_changing_the_programs_leaf_raises_at_the_statement(cluster, change):
    got, want = deployed_run(cluster, _make, _changing_the_argument(change))
    assert want[0][0] == "raised" and "leaf Variable" in want[0][1]
    assert got == want


def test_an_uncaught_change_stops_the_hook_at_the_statement(cluster):
    """The hook's statements after the change do not run; the call raises the leaf error."""
    def run(model):
        log = []

        def pre(module, args):
            args[0].mul_(-1)
            log.append("after the change")

        model[0].register_forward_pre_hook(pre)
        x = torch.ones(2, 3, requires_grad=True)
        with pytest.raises(RuntimeError, match="a leaf Variable that requires grad") as e:
            model(x)
        return log, type(e.value).__name__

    got, want = deployed_run(cluster, _make, run)
    assert want == ([], "RuntimeError")
    assert got[0] == []


def test_a_pre_hook_may_change_a_leaf_argument_under_no_grad(cluster):
    """Under ``no_grad`` inside the hook the change is allowed in one process, and made on
    the worker's copy deployed (the output follows it)."""
    def change(t):
        with torch.no_grad():
            t.mul_(-1)

    got, want = deployed_run(cluster, _make, _changing_the_argument(change))
    assert want[0] == "changed"
    assert got == want
