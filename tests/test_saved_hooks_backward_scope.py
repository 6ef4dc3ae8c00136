"""Saved-tensor hooks entered or exited inside a backward (from a hook) end with that
backward, as torch's engine runs each graph task under a copy of the caller's
thread-local state; exiting more often than entered raises torch's RuntimeError.

Each test runs under disthook and torch (when installed) with the same asserts.
"""
from __future__ import annotations

import gc
import weakref

import pytest
from test_module_api import lib  # noqa: F401 - the fixture: disthook, then torch


def test_exit_inside_backward_does_not_pop_the_callers_stack(lib):
    torch = lib.torch
    seen = []
    inner = torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: inner.__exit__() or t)
    outer = torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t)

    for _ in range(3):
        with outer:
            inner.__enter__()
            x = torch.randn(4, requires_grad=True)
            x.exp().sum().backward()  # the unpack exits `inner` inside backward
            seen.append(x.grad.shape)
    # inside backward the exit was undone: each round left one entry on the stack,
    # the outer `with` having popped the inner pair; three exits now empty it
    for _ in range(3):
        inner.__exit__()
    with pytest.raises(RuntimeError):
        inner.__exit__()
    assert seen == [torch.Size([4])] * 3


def test_enter_inside_backward_keeps_no_reference(lib):
    torch = lib.torch

    def scope():
        def unpack(t):
            ctx_ref().__enter__()  # pushed inside backward: gone when it ends
            return t

        ctx = torch.autograd.graph.saved_tensors_hooks(lambda t: t, unpack)
        ctx_ref = weakref.ref(ctx)
        x = torch.randn(3, requires_grad=True)
        with ctx:
            x.sin().sum().backward()
        return weakref.ref(unpack)

    gc.disable()
    try:
        assert scope()() is None
    finally:
        gc.enable()
    # and no hooks are left active: a fresh save packs nothing of ours
    packed = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: packed.append(1) or t, lambda t: t):
        torch.randn(2, requires_grad=True).exp().sum().backward()
    assert packed == [1]


def test_extra_exit_raises_runtime_error(lib):
    torch = lib.torch
    ctx = torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t)
    with pytest.raises(RuntimeError):
        ctx.__exit__(None, None, None)
