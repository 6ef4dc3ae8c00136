"""A stage used by several clients (workers/stages.Stage): each client's gradients are its
own, swapped in whenever one of its jobs touches the stage; writes are its deployer's unless
it was loaded writable; a client that goes away leaves nothing behind."""
import numpy as np
import pytest

import disthook as torch
from disthook import nn
from workers.stages import Stage

A, B, C = b"client-a", b"client-b", b"client-c"


def stage(writable=False):
    torch.manual_seed(0)
    return Stage("model-1", 0, nn.Sequential(nn.Linear(3, 2), nn.Tanh(), nn.Linear(2, 1)),
                 owner=A, writable=writable)


def backward(st, scale):
    st.module(torch.ones(4, 3) * scale).sum().backward()


def grads(st):
    return [None if p.grad is None else p.grad.numpy().copy() for p in st.params]


def test_each_client_accumulates_its_own_gradients():
    st = stage()
    st.use_client(A)
    backward(st, 1.0)
    only_a = grads(st)
    st.use_client(B)
    assert grads(st) == [None] * 4  # B has none yet
    backward(st, 2.0)
    backward(st, 2.0)
    st.use_client(A)
    for got, want in zip(grads(st), only_a, strict=True):
        np.testing.assert_array_equal(got, want)
    backward(st, 1.0)  # A's second backward adds to A's only
    st.use_client(B)
    st_b = grads(st)
    st.use_client(A)
    for a, once in zip(grads(st), only_a, strict=True):
        np.testing.assert_allclose(a, 2 * once, rtol=1e-6)
    assert not np.allclose(st_b[0], grads(st)[0])  # B's inputs were twice A's
    st.module.zero_grad()  # A's zero_grad clears A's only
    st.use_client(B)
    assert all(g is not None for g in grads(st))


def test_one_client_swaps_nothing():
    st = stage()
    st.use_client(A)
    backward(st, 1.0)
    before = [p._grad for p in st.params]
    st.use_client(A)
    assert all(p._grad is g for p, g in zip(st.params, before, strict=True))
    assert st.grads == {}


def test_writes_are_the_deployers_unless_writable():
    st = stage()
    st.check_write(A, "load_state_dict")
    with pytest.raises(PermissionError, match=r"load_state_dict would change stage 0 of "
                                              r"model-1, which its deployer shares read-only"):
        st.check_write(B, "load_state_dict")
    with pytest.raises(PermissionError) as refused:  # both ways of opening writes are named
        st.check_write(B, "load_state_dict")
    assert str(refused.value).endswith(
        "(the deployer opens writes with deploy(..., writable=True), or, for a model "
        "published by `disthook serve`, with its --writable option)")
    stage(writable=True).check_write(B, "load_state_dict")


def test_a_client_that_goes_away_leaves_nothing():
    st = stage()
    st.use_client(B)
    backward(st, 1.0)
    st.optimizers[(B, 7)] = object()
    st.optimizers[(A, 7)] = object()
    st.forget(B)  # while its gradients are installed: the deployer's come back
    assert st.installed == A and grads(st) == [None] * 4
    assert B not in st.grads and list(st.optimizers) == [(A, 7)]
