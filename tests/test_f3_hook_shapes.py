"""What the hook fuzzer's new program shapes (f1_programs.EXTRAS) found in one process, each
run under disthook and torch with the same asserts (the ``lib`` fixture).

``register_multi_grad_hook`` in mode "all" hands its hook a list, as torch does (disthook
gave a tuple); in mode "any" a tensor that requires no grad is left out (disthook raised
the AssertionError that mode "all" raises); mode "all" over a leaf that the autograd.grad
running differentiates to raises torch's RuntimeError (disthook went on)."""
from __future__ import annotations

import pytest
import test_module_api

lib = test_module_api.lib  # the fixture: disthook, then torch


def test_a_multi_grad_hook_in_mode_all_gets_a_list(lib):
    torch = lib.torch
    a = torch.ones(2, requires_grad=True)
    b = torch.ones(2, requires_grad=True)
    got = []
    torch.autograd.graph.register_multi_grad_hook((a, b), got.append)
    (a * 3).sum().backward()
    assert type(got[0]) is list
    assert got[0][0].tolist() == [3.0, 3.0] and got[0][1] is None


def test_a_multi_grad_hook_in_mode_any_leaves_out_what_requires_no_grad(lib):
    torch = lib.torch
    a = torch.ones(2, requires_grad=True)
    got = []
    torch.autograd.graph.register_multi_grad_hook((torch.ones(2), a), got.append, mode="any")
    (a * 3).sum().backward()
    assert [g.tolist() for g in got] == [[3.0, 3.0]]


@pytest.mark.parametrize("wrt", ["x", "w_and_x", "out", "w"])
def test_a_multi_grad_hook_on_a_leaf_autograd_grad_takes_is_refused(lib, wrt):
    """Mode "all" over a leaf that the running autograd.grad differentiates to: torch's
    RuntimeError, raised when the hook first fires; other inputs go through."""
    torch = lib.torch
    x = torch.ones(2, requires_grad=True)
    w = torch.ones(2, requires_grad=True)
    out = x * w
    torch.autograd.graph.register_multi_grad_hook((out, x), lambda grads: None)
    inputs = {"x": [x], "w_and_x": [w, x], "out": [out], "w": [w]}[wrt]
    loss = (out * 2).sum()
    if wrt in ("out", "w"):
        torch.autograd.grad(loss, inputs)
        return
    with pytest.raises(RuntimeError, match="^A leaf node was passed to "
                                           "_will_engine_execute_node but we are currently "
                                           "running autograd.grad"):
        torch.autograd.grad(loss, inputs)


@pytest.mark.parametrize("pin_memory", [False, True])
def test_save_on_cpu_keeps_the_tensor_itself_unless_pinned(lib, pin_memory):
    """On the CPU torch's ``save_on_cpu`` keeps a saved tensor as it is (``tensor.cpu()`` is
    the tensor): tanh's result changed in place afterwards reaches its backward, unchecked;
    ``pin_memory=True`` keeps a copy (disthook always kept a copy; fuzzer seed 579)."""
    torch = lib.torch
    x = torch.ones(2, requires_grad=True)
    with torch.autograd.graph.save_on_cpu(pin_memory=pin_memory):
        y = (x * 1).tanh()
    y.mul_(2)
    y.sum().backward()
    t = 2 * 0.7615941559557649 if not pin_memory else 0.7615941559557649
    assert x.grad.tolist() == pytest.approx([2 * (1 - t * t)] * 2, rel=1e-5)
