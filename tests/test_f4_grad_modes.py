"""What the hook fuzzer's F4 shapes (hooks acting inside a grad mode of their own) found in
one process, each run under disthook and torch with the same asserts (the ``lib`` fixture).

Inside ``inference_mode`` nothing records a graph, whatever grad mode is set there: an
``enable_grad`` (or ``set_grad_enabled(True)``) within it makes ``is_grad_enabled()`` say
True and records nothing (its results are inference tensors that require no grad), an
in-place change of a leaf that requires grad goes through as under ``no_grad``, and one of
a non-leaf keeps its ``grad_fn``. disthook recorded there: the leaf's change raised "a leaf
Variable that requires grad is being used in an in-place operation", the non-leaf's
"Inference tensors cannot be saved for backward", and a forward hook's result made there
required grad (seeds 6323, 6475, 7394)."""
from __future__ import annotations

import pytest
import test_module_api

lib = test_module_api.lib  # the fixture: disthook, then torch


@pytest.mark.parametrize("how", ["enable_grad", "set_grad_enabled"])
def test_enable_grad_inside_inference_mode_records_nothing(lib, how):
    torch = lib.torch
    x = torch.ones(2, 3, requires_grad=True)
    h = x * 1
    with torch.inference_mode():
        with torch.enable_grad() if how == "enable_grad" else torch.set_grad_enabled(True):
            assert torch.is_grad_enabled() and torch.is_inference_mode_enabled()
            y = x * 2
            assert not y.requires_grad and y.grad_fn is None and y.is_inference()
            assert x.mul_(-1) is x  # a leaf that requires grad: as under no_grad
            node = h.grad_fn
            h.mul_(3)
            assert h.grad_fn is node and h.requires_grad
        assert not torch.is_grad_enabled()
    assert torch.is_grad_enabled()
    assert x.requires_grad and x.grad_fn is None and x._version == 1


def test_inference_mode_false_inside_records(lib):
    torch = lib.torch
    x = torch.ones(2, requires_grad=True)
    with torch.inference_mode(), torch.inference_mode(False):
        y = x * 2
        assert y.requires_grad and not y.is_inference()
    y.sum().backward()
    assert x.grad.tolist() == [2.0, 2.0]


def test_a_forward_hook_s_result_made_under_enable_grad_in_inference_mode(lib):
    torch = lib.torch
    torch.manual_seed(0)
    lin = torch.nn.Linear(3, 3)

    def hook(module, args, out):
        with torch.enable_grad():
            return -out

    lin.register_forward_hook(hook)
    x = torch.ones(2, 3, requires_grad=True)
    with torch.inference_mode():
        out = lin(x)
    assert not out.requires_grad and out.is_inference()
