"""In-place ops and version counters: the leaf check, no_grad updates (SGD), ``_version``,
saved-tensor modification errors, gradients through in-place ops on non-leaves, index
assignment, and in-place ``.grad`` accumulation.

Each test runs under disthook and (when installed) torch 2.13 via the ``T`` fixture against
hard-coded values; disthook-only failures are ``xfail(strict=True)`` on the disthook case.
"""
from __future__ import annotations

import importlib
import importlib.util
import re

import numpy as np
import pytest

HAS_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")


def libs(xfail: str | None = None):
    dh = "disthook" if xfail is None else pytest.param(
        "disthook", marks=pytest.mark.xfail(strict=True, reason=xfail))
    return pytest.mark.parametrize("T", [dh, pytest.param("torch", marks=needs_torch)],
                                   indirect=True)


@pytest.fixture(params=["disthook", pytest.param("torch", marks=needs_torch)])
def T(request):
    return importlib.import_module(request.param)


def exact(exc, msg: str):
    return pytest.raises(exc, match="^" + re.escape(msg) + "$")


def close(t, expected, rtol=1e-6, atol=1e-6):
    np.testing.assert_allclose(np.array(t.tolist(), dtype=np.float64),
                               np.asarray(expected, dtype=np.float64), rtol=rtol, atol=atol)


LEAF_MSG = "a leaf Variable that requires grad is being used in an in-place operation."
MODIFIED = ("one of the variables needed for gradient computation has been modified by an "
            "inplace operation: ")
HINT = (" Hint: enable anomaly detection to find the operation that failed to compute its "
        "gradient, with torch.autograd.set_detect_anomaly(True, check_nan=False).")


def _x(T):
    return T.tensor([1.0, 2.0, 3.0], requires_grad=True)


# ---- the leaf check ------------------------------------------------------------------------

LEAF_OPS = {
    "add_": lambda x, T: x.add_(1),
    "sub_": lambda x, T: x.sub_(1),
    "mul_": lambda x, T: x.mul_(2),
    "div_": lambda x, T: x.div_(2),
    "zero_": lambda x, T: x.zero_(),
    "fill_": lambda x, T: x.fill_(3.0),
    "copy_": lambda x, T: x.copy_(T.ones(3)),
    "clamp_": lambda x, T: x.clamp_(0.0, 1.0),
    "neg_": lambda x, T: x.neg_(),
    "exp_": lambda x, T: x.exp_(),
    "pow_": lambda x, T: x.pow_(2),
    "relu_": lambda x, T: x.relu_(),
    "add_tensor": lambda x, T: x.add_(T.ones(3), alpha=2),
    "masked_fill_": lambda x, T: x.masked_fill_(T.tensor([True, False, False]), 0.0),
}


@pytest.mark.parametrize("op", list(LEAF_OPS))
def test_inplace_on_leaf_requiring_grad_raises(T, op):
    x = _x(T)
    with exact(RuntimeError, LEAF_MSG):
        LEAF_OPS[op](x, T)
    close(x, [1.0, 2.0, 3.0])  # untouched
    assert x._version == 0
    assert x.is_leaf and x.grad_fn is None


@pytest.mark.parametrize("op", ["uniform_", "normal_"])
def test_random_inplace_on_leaf_requiring_grad_raises(T, op):
    x = _x(T)
    with exact(RuntimeError, LEAF_MSG):
        getattr(x, op)()


def test_random_inplace_on_leaf_under_no_grad(T):
    x = _x(T)
    with T.no_grad():
        x.uniform_(-1.0, 1.0)
        x.normal_()
    assert x.requires_grad and x.is_leaf and x.shape == (3,)


@pytest.mark.parametrize("op,node", [("uniform_", "UniformBackward0"),
                                     ("normal_", "NormalBackward0"),
                                     ("zero_", "ZeroBackward0"),
                                     ("fill_", "FillBackward2")])
def test_overwriting_inplace_ops_on_non_leaf(T, op, node):
    # the old values do not reach the result: the gradient through them is zero
    x = _x(T)
    a = x * 2
    getattr(a, op)(*([1.5] if op == "fill_" else []))
    assert a.grad_fn.name() == node and a._version == 1
    (a * 3).sum().backward()
    close(x.grad, [0.0, 0.0, 0.0])


def test_setitem_on_leaf_requiring_grad_raises(T):
    x = _x(T)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad is being used in "
                       "an in-place operation."):
        x[0] = 5.0


def test_setitem_on_leaf_requiring_grad_exact_message(T):
    x = _x(T)
    with exact(RuntimeError, "a view of a leaf Variable that requires grad is being used in "
               "an in-place operation."):
        x[0] = 5.0
    with exact(RuntimeError, "a view of " + LEAF_MSG):
        x[1:] = 5.0
    # advanced indexing writes into x itself, not through a view
    with exact(RuntimeError, LEAF_MSG):
        x[T.tensor([0])] = 5.0
    with exact(RuntimeError, LEAF_MSG):
        x[x > 1] = 5.0
    assert x._version == 0


def test_augmented_assignment_on_leaf_requiring_grad_raises(T):
    x = _x(T)
    for fn in (lambda t: t.__iadd__(1), lambda t: t.__isub__(1),
               lambda t: t.__imul__(2), lambda t: t.__itruediv__(2)):
        with exact(RuntimeError, LEAF_MSG):
            fn(x)


@pytest.mark.parametrize("op", list(LEAF_OPS))
def test_inplace_on_leaf_allowed_under_no_grad(T, op):
    x = _x(T)
    with T.no_grad():
        out = LEAF_OPS[op](x, T)
    assert out is x
    assert x.requires_grad and x.is_leaf and x.grad_fn is None
    assert x._version == 1


def test_inplace_on_leaf_not_requiring_grad_is_fine(T):
    x = T.tensor([1.0, 2.0, 3.0])
    x.add_(1)
    x.mul_(2)
    close(x, [4.0, 6.0, 8.0])
    assert x.is_leaf and not x.requires_grad and x._version == 2


def test_sgd_update_with_sub_(T):
    w = T.tensor([1.0, 2.0], requires_grad=True)
    for _ in range(3):
        loss = (w * w).sum()
        loss.backward()
        with T.no_grad():
            w.sub_(0.1 * w.grad)
        w.grad.zero_()
    close(w, [0.512, 1.024])
    assert w.is_leaf and w.requires_grad and w.grad_fn is None
    assert w._version == 3


def test_sgd_update_with_augmented_assignment(T):
    w = T.tensor([1.0, 2.0], requires_grad=True)
    w0 = w
    for _ in range(3):
        loss = (w * w).sum()
        loss.backward()
        with T.no_grad():
            w -= 0.1 * w.grad
        w.grad.zero_()
    assert w is w0
    assert w.is_leaf and w.requires_grad and w.grad_fn is None
    assert w._version == 3
    close(w, [0.512, 1.024])


def test_augmented_assignment_is_in_place(T):
    x = _x(T)
    a = x * 1
    a0 = a
    a += 1
    a *= 2
    assert a is a0
    assert a._version == 2
    assert a.grad_fn.name() == "MulBackward0"
    a.sum().backward()
    close(x.grad, [2.0, 2.0, 2.0])
    b = T.ones(3)
    b0 = b
    b += 1
    assert b is b0 and b._version == 1


def test_augmented_power_and_bitwise_are_in_place(T):
    x = _x(T)
    a = x * 1
    a0 = a
    a **= 2
    assert a is a0 and a._version == 1 and a.grad_fn.name() == "PowBackward0"
    a.sum().backward()
    close(x.grad, [2.0, 4.0, 6.0])
    m = T.tensor([True, False, True])
    m0 = m
    m &= T.tensor([True, True, False])
    m |= T.tensor([False, True, False])
    m ^= True
    assert m is m0 and m._version == 3 and m.tolist() == [False, False, True]


def test_augmented_true_division_of_integer_tensor_raises(T):
    i = T.tensor([1, 2])
    with exact(RuntimeError, "result type Float can't be cast to the desired output type Long"):
        i /= 2
    with exact(RuntimeError, "result type Float can't be cast to the desired output type Long"):
        i.pow_(0.5)
    assert i.tolist() == [1, 2] and i._version == 0
    i += 1
    assert i.tolist() == [2, 3] and i._version == 1


def test_setitem_under_no_grad_on_leaf(T):
    x = _x(T)
    with T.no_grad():
        x[1] = 0.0
        x[0:1] = T.tensor([7.0])
    close(x, [7.0, 0.0, 3.0])
    assert x.is_leaf and x.requires_grad and x.grad_fn is None
    assert x._version == 2
    (x * x).sum().backward()
    close(x.grad, [14.0, 0.0, 6.0])


# ---- version counters ------------------------------------------------------------------------

def test_version_counter_increments(T):
    t = T.tensor([1.0, 2.0, 3.0])
    assert t._version == 0
    t.add_(1)
    t.sub_(T.ones(3), alpha=2)
    t.mul_(2)
    t.div_(2)
    assert t._version == 4
    t.zero_()
    t.fill_(1.0)
    t.copy_(T.tensor([3.0, 2.0, 1.0]))
    t.clamp_(min=1.5)
    assert t._version == 8
    t[0] = 4.0
    t.masked_fill_(T.tensor([False, True, False]), 0.0)
    assert t._version == 10


def test_out_of_place_ops_do_not_bump_version(T):
    t = T.tensor([1.0, 2.0, 3.0])
    _ = t + 1, t * 2, t.exp(), t.sum(), t.clone(), t[0], t.view(3)
    assert t._version == 0


def test_views_share_the_version_counter(T):
    t = T.tensor([1.0, 2.0, 3.0])
    v = t.view(3)
    s = t[1:]
    v.add_(1)
    assert t._version == 1 and v._version == 1 and s._version == 1
    s.mul_(2)
    assert t._version == 2
    close(t, [2.0, 6.0, 8.0])


VIEW_CASES = {
    "select_0d": lambda a: a[1],
    "slice": lambda a: a[1:],
    "view": lambda a: a.view(3),
    "t": lambda a: a.t(),
    "unsqueeze": lambda a: a.unsqueeze(0),
    "expand": lambda a: a.expand(2, 3),
    "reshape": lambda a: a.reshape(3),
    "squeeze_noop": lambda a: a.squeeze(),
    "detach": lambda a: a.detach(),
    "ellipsis": lambda a: a[...],
    "none_index": lambda a: a[None],
}
VIEW_XFAIL: dict[str, str] = {}


def _view_params():
    out = []
    for case in VIEW_CASES:
        for req in (False, True):
            marks = ([pytest.mark.xfail(strict=True, reason=VIEW_XFAIL[case])]
                     if case in VIEW_XFAIL else [])
            out.append(pytest.param("disthook", case, req, marks=marks,
                                    id=f"disthook-{case}-{'grad' if req else 'nograd'}"))
            out.append(pytest.param("torch", case, req, marks=needs_torch,
                                    id=f"torch-{case}-{'grad' if req else 'nograd'}"))
    return out


@pytest.mark.parametrize("T,case,req", _view_params(), indirect=["T"])
def test_view_sees_inplace_change_of_base_and_shares_version(T, case, req):
    x = T.tensor([1.0, 2.0, 3.0], requires_grad=req)
    a = x * 1
    v = VIEW_CASES[case](a)
    a.mul_(2)
    assert a._version == 1
    assert v._version == 1
    assert np.array(v.tolist()).ravel()[-1] == 6.0 or case == "select_0d"
    if case == "select_0d":
        assert v.item() == 4.0


def test_inplace_through_0d_select_writes_base(T):
    t = T.zeros(3)
    t[0].fill_(5)
    t[1].add_(2)
    assert t.tolist() == [5.0, 2.0, 0.0]
    assert t._version == 2
    w = T.zeros(3, requires_grad=True)
    with T.no_grad():
        w[2].fill_(1.0)
    assert w.tolist() == [0.0, 0.0, 1.0]


def test_inplace_through_row_select_writes_base(T):
    m = T.zeros(2, 2)
    m[0][1] = 3.0
    m[1].fill_(7.0)
    assert m.tolist() == [[0.0, 3.0], [7.0, 7.0]]
    assert m._version == 2


def test_0d_elements_are_views_of_their_tensor(T):
    m = T.zeros(2, 2)
    m[1, 1].fill_(3.0)
    m[..., 0][0].add_(2.0)
    assert m.tolist() == [[2.0, 0.0], [0.0, 3.0]] and m._version == 2
    t = T.zeros(3)
    for e in t:  # iteration unbinds into 0-d views
        e.add_(1.0)
    assert t.tolist() == [1.0, 1.0, 1.0] and t._version == 3
    s = t.squeeze(0)  # nothing to squeeze: still a new view
    assert s is not t
    s.mul_(2.0)
    assert t.tolist() == [2.0, 2.0, 2.0] and t._version == 4 and s._version == 4


def test_clone_has_its_own_version_counter(T):
    t = T.tensor([1.0, 2.0, 3.0])
    c = t.clone()
    c.add_(1)
    assert t._version == 0 and c._version == 1


# ---- in-place op values -----------------------------------------------------------------------

VALUE_CASES = [
    ("add_", lambda t, T: t.add_(2), [3.0, 4.0, 5.0]),
    ("add_alpha", lambda t, T: t.add_(T.ones(3), alpha=3), [4.0, 5.0, 6.0]),
    ("sub_", lambda t, T: t.sub_(2), [-1.0, 0.0, 1.0]),
    ("sub_alpha", lambda t, T: t.sub_(T.ones(3), alpha=2), [-1.0, 0.0, 1.0]),
    ("mul_", lambda t, T: t.mul_(2), [2.0, 4.0, 6.0]),
    ("mul_tensor", lambda t, T: t.mul_(T.tensor([1.0, 0.5, -1.0])), [1.0, 1.0, -3.0]),
    ("div_", lambda t, T: t.div_(2), [0.5, 1.0, 1.5]),
    ("zero_", lambda t, T: t.zero_(), [0.0, 0.0, 0.0]),
    ("fill_", lambda t, T: t.fill_(7), [7.0, 7.0, 7.0]),
    ("fill_tensor", lambda t, T: t.fill_(T.tensor(2.5)), [2.5, 2.5, 2.5]),
    ("copy_", lambda t, T: t.copy_(T.tensor([9, 8, 7])), [9.0, 8.0, 7.0]),
    ("copy_broadcast", lambda t, T: t.copy_(T.tensor(5.0)), [5.0, 5.0, 5.0]),
    ("clamp_", lambda t, T: t.clamp_(1.5, 2.5), [1.5, 2.0, 2.5]),
    ("clamp_min", lambda t, T: t.clamp_(min=2), [2.0, 2.0, 3.0]),
    ("clamp_max", lambda t, T: t.clamp_(max=2), [1.0, 2.0, 2.0]),
    ("neg_", lambda t, T: t.neg_(), [-1.0, -2.0, -3.0]),
    ("broadcast_add", lambda t, T: t.add_(T.tensor([10.0])), [11.0, 12.0, 13.0]),
]


@pytest.mark.parametrize("case", VALUE_CASES, ids=[c[0] for c in VALUE_CASES])
def test_inplace_values_return_self(T, case):
    _, fn, expected = case
    t = T.tensor([1.0, 2.0, 3.0])
    out = fn(t, T)
    assert out is t
    assert t.dtype == T.float32
    close(t, expected)
    assert t._version == 1


def test_inplace_on_int_tensor_keeps_dtype(T):
    t = T.tensor([1, 2, 3])
    t.add_(2)
    t.mul_(3)
    assert t.dtype == T.int64
    assert t.tolist() == [9, 12, 15]


# ---- gradients through in-place ops on non-leaves ----------------------------------------------

def test_inplace_chain_on_non_leaf(T):
    x = _x(T)
    y = T.tensor([4.0, 5.0, 6.0], requires_grad=True)
    a = x * 1
    a.add_(y)
    a.mul_(2)
    assert a.grad_fn.name() == "MulBackward0"
    assert a._version == 2
    assert not a.is_leaf
    close(a, [10.0, 14.0, 18.0])
    a.sum().backward()
    close(x.grad, [2.0, 2.0, 2.0])
    close(y.grad, [2.0, 2.0, 2.0])


def test_inplace_exp_on_non_leaf(T):
    x = _x(T)
    a = x * 1
    a.exp_()
    assert a.grad_fn.name() == "ExpBackward0"
    a.sum().backward()
    close(x.grad, np.exp([1.0, 2.0, 3.0]), rtol=1e-6)


def test_inplace_div_and_sub_alpha_on_non_leaf(T):
    x = _x(T)
    y = T.tensor([2.0, 4.0, 5.0], requires_grad=True)
    a = x * 1
    a.div_(y)
    a.sub_(y, alpha=2)
    (a * a).sum().backward()
    xv, yv = np.array([1.0, 2.0, 3.0]), np.array([2.0, 4.0, 5.0])
    av = xv / yv - 2 * yv
    close(x.grad, 2 * av / yv, rtol=1e-6)
    close(y.grad, 2 * av * (-xv / yv ** 2 - 2), rtol=1e-6)


def test_inplace_clamp_on_non_leaf(T):
    x = _x(T)
    a = x * 1
    a.clamp_(1.5, 2.5)
    assert a.grad_fn.name() == "ClampBackward1"
    a.sum().backward()
    close(x.grad, [0.0, 1.0, 0.0])


def test_inplace_zero_and_fill_cut_the_gradient(T):
    x = _x(T)
    a = x * 3
    a.zero_()
    (a + x).sum().backward()
    close(x.grad, [1.0, 1.0, 1.0])
    x.grad = None
    b = x * 3
    b.fill_(2.0)
    (b * x).sum().backward()
    close(x.grad, [2.0, 2.0, 2.0])


def test_inplace_add_into_constant_makes_it_require_grad(T):
    y = T.tensor([4.0, 5.0, 6.0], requires_grad=True)
    a = T.ones(3)
    a.add_(y)
    assert a.requires_grad and not a.is_leaf
    assert a.grad_fn.name() == "AddBackward0"
    (a * a).sum().backward()
    close(y.grad, [10.0, 12.0, 14.0])


def test_copy_into_constant(T):
    y = T.tensor([4.0, 5.0, 6.0], requires_grad=True)
    a = T.zeros(3)
    a.copy_(y * 2)
    assert a.requires_grad and type(a.grad_fn).__name__ == "CopyBackwards"
    (a * a).sum().backward()
    close(y.grad, [32.0, 40.0, 48.0])


def test_copy_into_non_leaf_overwrites_its_history(T):
    x = _x(T)
    y = T.tensor([4.0, 5.0, 6.0], requires_grad=True)
    a = x * 5
    a.copy_(y)
    (a * 2).sum().backward()
    close(x.grad, [0.0, 0.0, 0.0])
    close(y.grad, [2.0, 2.0, 2.0])


def test_setitem_with_grad_on_non_leaf(T):
    x = _x(T)
    a = x * 2
    a[1] = 10.0
    assert type(a.grad_fn).__name__ == "CopySlices"
    assert a._version == 1
    close(a, [2.0, 10.0, 6.0])
    (a * a).sum().backward()
    close(x.grad, [8.0, 0.0, 24.0])


def test_setitem_slice_from_other_graph(T):
    x = _x(T)
    y = T.tensor([4.0, 5.0, 6.0], requires_grad=True)
    a = x * 1
    a[0:2] = y[1:] * 3
    close(a, [15.0, 18.0, 3.0])
    (a * T.tensor([1.0, 2.0, 3.0])).sum().backward()
    close(x.grad, [0.0, 0.0, 3.0])
    close(y.grad, [0.0, 3.0, 6.0])


def test_setitem_into_constant_from_graph(T):
    y = T.tensor([4.0, 5.0, 6.0], requires_grad=True)
    a = T.zeros(3)
    a[1] = y[0] * 2
    assert a.requires_grad
    a.sum().backward()
    close(y.grad, [2.0, 0.0, 0.0])


def test_setitem_bool_mask_with_grad(T):
    x = _x(T)
    a = x * 1
    a[a > 1.5] = 0.0
    close(a, [1.0, 0.0, 0.0])
    a.sum().backward()
    close(x.grad, [1.0, 0.0, 0.0])


def test_inplace_on_view_of_non_leaf(T):
    x = _x(T)
    a = x * 1
    v = a[:2]
    v.mul_(2)
    close(a, [2.0, 4.0, 3.0])
    a.sum().backward()
    close(x.grad, [2.0, 2.0, 1.0])


# ---- in-place on views: the base's history is rebased (CopySlices) ----------------------------

def _view_of_view(T):
    x = _x(T)
    b = x * 1
    v = b[1:]
    v[:1].mul_(5)
    (b * b).sum().backward()
    return x.grad, [[2.0, 100.0, 6.0]]


def _transpose_then_select(T):
    x = T.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    b = x * 1
    b.t()[0].mul_(10)
    (b * T.tensor([[1.0, 2.0], [3.0, 4.0]])).sum().backward()
    return x.grad, [[[10.0, 2.0], [30.0, 4.0]]]


def _view_times_tensor(T):
    x, y = _x(T), T.tensor([4.0, 5.0], requires_grad=True)
    b = x * 1
    b[:2].mul_(y)
    b.sum().backward()
    return x.grad, [[4.0, 5.0, 1.0], y.grad, [1.0, 2.0]]


def _broadcast_operand(T):
    x, y = _x(T), T.tensor([2.0], requires_grad=True)
    b = x * 1
    b[1:].mul_(y)
    (b * b).sum().backward()
    return x.grad, [[2.0, 16.0, 24.0], y.grad, [52.0]]


def _unary_on_view(T):
    x = _x(T)
    b = x * 1
    b[:2].exp_()
    b.sum().backward()
    return x.grad, [np.exp([1.0, 2.0]).tolist() + [1.0]]


def _two_views_and_twice(T):
    x = _x(T)
    b = x * 1
    v = b[:2]
    v.mul_(2)
    v.mul_(3)
    b[1:].mul_(3)
    (b * b).sum().backward()
    return x.grad, [[72.0, 1296.0, 54.0]]


def _backward_from_the_view(T):
    x = _x(T)
    b = x * 1
    v = b[:2]
    v.mul_(2)
    v.sum().backward()
    return x.grad, [[2.0, 2.0, 0.0]]


def _base_changed_then_old_view_used(T):
    x = _x(T)
    b = x * 1
    v = b[1:]
    b.mul_(2)
    (v * v).sum().backward()
    return x.grad, [[0.0, 16.0, 24.0]]


def _setitem_through_view(T):
    x = _x(T)
    b = x * 1
    v = b.view(3, 1)
    v[1] = x[:1] * 7
    (b * 2).sum().backward()
    return x.grad, [[16.0, 0.0, 2.0]]


def _chain_of_views(T):
    x = T.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    b = x * 1
    b.view(4)[1:3].view(2, 1).mul_(T.tensor([[2.0], [3.0]]))
    (b * b).sum().backward()
    return x.grad, [[[2.0, 16.0], [54.0, 8.0]]]


def _permuted(T):
    z = T.ones(2, 3, requires_grad=True)
    b = z * 1
    b.permute(1, 0)[1:].mul_(T.tensor([[2.0, 3.0], [4.0, 5.0]]))
    (b * b).sum().backward()
    return z.grad, [[[2.0, 8.0, 32.0], [2.0, 18.0, 50.0]]]


def _plain_base_gets_history(T):
    y = T.tensor([1.0, 2.0], requires_grad=True)
    b = T.ones(3)
    w = b[1:]
    b[:2].mul_(y)
    assert b.requires_grad and not b.is_leaf and w.requires_grad
    (b * T.tensor([1.0, 2.0, 3.0])).sum().backward()
    return y.grad, [[1.0, 2.0]]


VIEW_INPLACE_GRADS = {
    "view_of_view": _view_of_view,
    "transpose_then_select": _transpose_then_select,
    "view_times_tensor": _view_times_tensor,
    "broadcast_operand": _broadcast_operand,
    "unary_on_view": _unary_on_view,
    "two_views_and_twice": _two_views_and_twice,
    "backward_from_the_view": _backward_from_the_view,
    "base_changed_then_old_view_used": _base_changed_then_old_view_used,
    "setitem_through_view": _setitem_through_view,
    "chain_of_views": _chain_of_views,
    "permuted": _permuted,
    "plain_base_gets_history": _plain_base_gets_history,
}


@pytest.mark.parametrize("case", list(VIEW_INPLACE_GRADS))
def test_inplace_on_view_gradients(T, case):
    got, expected = VIEW_INPLACE_GRADS[case](T)
    close(got, expected[0], rtol=1e-5)
    for g, e in zip(expected[1::2], expected[2::2]):
        close(g, e, rtol=1e-5)


def test_inplace_on_view_rebases_base_and_views(T):
    x = _x(T)
    b = x * 1
    v = b[:2]
    w = b.unsqueeze(0)
    hooked = []
    v.register_hook(lambda g: hooked.append(1))  # stays with the view's old history
    v.mul_(2)
    assert type(b.grad_fn).__name__ == "CopySlices"
    assert b.grad_fn.name() == "torch::autograd::CopySlices"
    assert repr(b).endswith("grad_fn=<CopySlices>)")
    assert v.grad_fn.name() == w.grad_fn.name() == "AsStridedBackward0"
    assert v.grad_fn.next_functions == ((b.grad_fn, 0),)
    assert [type(n).__name__ for n, _ in b.grad_fn.next_functions] == ["MulBackward0",
                                                                       "NoneType"]
    assert b._version == v._version == w._version == 1
    b.sum().backward()
    assert hooked == []
    close(x.grad, [2.0, 2.0, 1.0])


def test_inplace_on_view_double_backward(T):
    x = _x(T)
    b = x * x
    b[:2].mul_(x[1:])
    (g,) = T.autograd.grad(b.sum(), x, create_graph=True)
    close(g, [4.0, 13.0, 10.0])
    (gg,) = T.autograd.grad(g.sum(), x)
    close(gg, [6.0, 12.0, 6.0])


def test_saved_base_modified_through_a_view(T):
    x = _x(T)
    b = x * 1
    s = b.sin()
    b[:2].mul_(2)
    with exact(RuntimeError, MODIFIED + "[torch.FloatTensor [3]], which is output 0 of "
               "torch::autograd::CopySlices, is at version 1; expected version 0 instead."
               + HINT):
        s.sum().backward()


NO_GRAD_VIEW_MSG = (
    "A view was created in no_grad mode and is being modified inplace with grad mode "
    "enabled. Given that this use case is ambiguous and error-prone, it is forbidden. You can "
    "clarify your code by moving both the view and the inplace either both inside the no_grad "
    "block (if you don't want the inplace to be tracked) or both outside (if you want the "
    "inplace to be tracked).")
MULTI_VIEW_HINT = (
    " This view is the output of a function that returns multiple views. Such functions do "
    "not allow the output views to be modified inplace. You should replace the inplace "
    "operation by an out-of-place one.")


def _in_no_grad(T, fn):
    with T.no_grad():
        return fn()


def _no_grad_view(T, base):
    with T.no_grad():
        return base[:2]


VIEW_OF_LEAF_MSG = "a view of " + LEAF_MSG
VIEW_INPLACE_ERRORS = {
    "view_of_leaf": (lambda x, T: x[:2].mul_(2), VIEW_OF_LEAF_MSG),
    "view_of_leaf_by_tracked_operand": (lambda x, T: x.view(3).add_(T.ones(3)),
                                        VIEW_OF_LEAF_MSG),
    "no_grad_view_of_non_leaf": (lambda x, T: _no_grad_view(T, x * 1).mul_(2),
                                 NO_GRAD_VIEW_MSG),
    "no_grad_view_of_leaf": (lambda x, T: _in_no_grad(T, lambda: x[:2]).mul_(2),
                             NO_GRAD_VIEW_MSG),
    "no_grad_view_of_plain_by_tracked": (
        lambda x, T: _in_no_grad(T, lambda: T.ones(3)[:2]).mul_(x[:2]), NO_GRAD_VIEW_MSG),
    "split": (lambda x, T: (x * 1).split(2)[1].mul_(2),
              "Output 1 of Split is a view and is being modified inplace." + MULTI_VIEW_HINT),
    "split_with_sizes": (lambda x, T: (x * 1).split([1, 2])[1].mul_(2),
                         "Output 1 of SplitWithSizes is a view and is being modified inplace."
                         + MULTI_VIEW_HINT),
    "unbind": (lambda x, T: (x * 1).unbind()[2].mul_(2),
               "Output 2 of Unbind is a view and is being modified inplace." + MULTI_VIEW_HINT),
    "iteration": (lambda x, T: next(iter(x * 1)).mul_(2),
                  "Output 0 of Unbind is a view and is being modified inplace."
                  + MULTI_VIEW_HINT),
    "split_of_plain_by_tracked": (
        lambda x, T: T.ones(4).split(2)[1].mul_(x[:2]),
        "A view was created in no_grad mode and is being modified inplace with grad mode "
        "enabled." + MULTI_VIEW_HINT),
}


@pytest.mark.parametrize("case", list(VIEW_INPLACE_ERRORS))
def test_inplace_on_view_errors(T, case):
    fn, msg = VIEW_INPLACE_ERRORS[case]
    with exact(RuntimeError, msg):
        fn(_x(T), T)


def test_inplace_on_views_allowed_when_nothing_is_tracked(T):
    x = _x(T)
    with T.no_grad():
        x[:2].mul_(2)
        (x * 1).split(1)[0].add_(1)
    v = _in_no_grad(T, lambda: T.ones(3)[:2])
    v.mul_(2)  # made under no_grad, but nothing requires grad
    d = x.detach()
    d.mul_(T.ones(3, requires_grad=True))  # detach() is not a view: d takes the history
    assert d.grad_fn.name() == "MulBackward0" and x.grad_fn is None


def test_multi_output_view_used_after_its_base_changed(T):
    b = _x(T) * 1
    parts = b.split(2)
    b.mul_(2)
    with exact(RuntimeError, "Output 0 of Split is a view and its base or another view of "
               "its base has been modified inplace." + MULTI_VIEW_HINT):
        parts[0] + 1


def test_inplace_on_tensor_used_by_scalar_mul(T):
    x = T.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = T.tensor([0.5, -1.0, 2.0], requires_grad=True)
    a = x * y
    b = a * 2
    a.mul_(y)
    (a + b).sum().backward()
    close(x.grad, [1.25, -1.0, 8.0])
    close(y.grad, [3.0, 0.0, 18.0])


def test_inplace_gradients_more(T):
    x = T.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = T.tensor([0.5, -1.0, 2.0], requires_grad=True)
    a = x * 1
    a[T.tensor([0, 2])] = y[:2] * 10
    (a * a).sum().backward()
    close(x.grad, [0.0, 4.0, 0.0])
    close(y.grad, [100.0, -200.0, 0.0])
    x.grad = y.grad = None
    a = x + 0
    a.masked_fill_(a > 1.5, 0.0)
    (a * y).sum().backward()
    close(x.grad, [0.5, 0.0, 0.0])
    close(y.grad, [1.0, 0.0, 0.0])
    x.grad = y.grad = None
    a = (x * y).relu_()
    a.sum().backward()
    close(x.grad, [0.5, 0.0, 2.0])
    close(y.grad, [1.0, 0.0, 3.0])
    x.grad = None
    a = x * 1
    a.add_(a)
    a.sum().backward()
    close(x.grad, [2.0, 2.0, 2.0])
    x.grad = None
    a = x * 1
    a.pow_(2)
    a.sum().backward()
    close(x.grad, [2.0, 4.0, 6.0])


def test_assemble_rows_by_setitem(T):
    x = T.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = T.tensor([0.5, -1.0, 2.0], requires_grad=True)
    a = T.zeros(2, 3)
    a[0] = x
    a[1] = y * 2
    (a.sum(0) ** 2).sum().backward()
    close(x.grad, [4.0, 0.0, 14.0])
    close(y.grad, [8.0, 0.0, 28.0])


def test_inplace_not_saved_is_fine(T):
    x = _x(T)
    a = x * 2   # a scalar multiplier: MulBackward0 needs no saved tensor for x
    a.add_(1)
    b = x + 1
    b.mul_(3)
    (a + b).sum().backward()
    close(x.grad, [5.0, 5.0, 5.0])


UNSAVED_CASES = {
    "mul_scalar": lambda h, T: h * 2,
    "rmul_const_tensor": lambda h, T: T.tensor([1.0, 2.0, 3.0]) * h,
    "div_scalar": lambda h, T: h / 2,
    "div_const_tensor": lambda h, T: h / T.tensor([1.0, 2.0, 4.0]),
    "matmul_vec_const": lambda h, T: h @ T.ones(3),
    "dot_const": lambda h, T: h.dot(T.ones(3)),
    "mm_const": lambda h, T: h.view(1, 3).mm(T.ones(3, 2)),
    "add": lambda h, T: h + T.ones(3),
    "sum": lambda h, T: h.sum(),
    "linear_const": lambda h, T: T.nn.functional.linear(h.view(1, 3), T.ones(2, 3), T.ones(2)),
    "bmm_const": lambda h, T: h.view(1, 1, 3).bmm(T.ones(1, 3, 2)),
}


@pytest.mark.parametrize("case", list(UNSAVED_CASES))
def test_operand_not_needed_for_backward_is_not_saved(T, case):
    # torch saves an operand of mul/div/mm/mv/dot only when the *other* operand needs grad,
    # so modifying h in place afterwards is allowed when the other side is a constant
    x = _x(T)
    h = x + 0
    out = UNSAVED_CASES[case](h, T)
    h.add_(1)
    out.sum().backward()
    assert x.grad is not None and x.grad.shape == (3,)


def test_results_are_saved_whatever_the_inputs_need(T):
    # unlike inputs, torch saves an op's result unconditionally: pow(tensor, tensor) keeps it
    # for the exponent's gradient even when only the base needs one
    y = _x(T).pow(T.tensor([2.0, 2.0, 2.0]))
    y.mul_(2)
    with pytest.raises(RuntimeError, match="^" + re.escape(MODIFIED)):
        y.sum().backward()


def test_inplace_after_use_by_op_saving_its_output_is_fine(T):
    # exp saves its *result*, not its input: modifying the input afterwards is allowed
    x = _x(T)
    a = x * 1
    b = a.exp()
    a.add_(1)
    b.sum().backward()
    close(x.grad, np.exp([1.0, 2.0, 3.0]), rtol=1e-6)


# ---- modified saved tensors ------------------------------------------------------------------

MODIFIED_CASES = {
    # name: (program, expected clause after "operation: ")
    "input_of_sin": (
        lambda x, T: _sin_then_mul(x),
        ("[torch.FloatTensor [3]], which is output 0 of Mul, is at version 1; "
        "expected version 0 instead.")),
    "input_of_mul_then_add": (
        lambda x, T: _mul_then_add(x),
        ("[torch.FloatTensor [3]], which is output 0 of Add, is at version 1; "
        "expected version 0 instead.")),
    "output_of_exp": (
        lambda x, T: _exp_then_mul(x),
        ("[torch.FloatTensor [3]], which is output 0 of Exp, is at version 1; "
        "expected version 0 instead.")),
    "output_of_sigmoid_zeroed": (
        lambda x, T: _sigmoid_then_zero(x),
        ("[torch.FloatTensor [3]], which is output 0 of Sigmoid, is at version 1; "
        "expected version 0 instead.")),
    "twice": (
        lambda x, T: _exp_mul_twice(x),
        ("[torch.FloatTensor [3]], which is output 0 of Add, is at version 2; "
        "expected version 0 instead.")),
    "double": (
        lambda x, T: _double_exp(x, T),
        ("[torch.DoubleTensor [3]], which is output 0 of Exp, is at version 1; "
        "expected version 0 instead.")),
}


def _sin_then_mul(x):
    a = x * 1
    b = a.sin()
    a.mul_(2)
    return b


def _mul_then_add(x):
    a = x * 1
    b = a * a
    a.add_(1)
    return b


def _exp_then_mul(x):
    a = x.exp()
    a.mul_(2)
    return a


def _sigmoid_then_zero(x):
    a = x.sigmoid()
    b = a.sum()
    a.zero_()
    return b


def _exp_mul_twice(x):
    a = x.exp()
    b = a * x
    a.add_(1)
    a.add_(1)
    return b


def _double_exp(x, T):
    a = x.to(T.float64).exp()
    a.mul_(2)
    return a


@pytest.mark.parametrize("case", list(MODIFIED_CASES))
def test_modified_saved_tensor_message_start(T, case):
    prog, clause = MODIFIED_CASES[case]
    out = prog(_x(T), T)
    start = MODIFIED + clause.split(", which is")[0] + ", which is output 0 of "
    with pytest.raises(RuntimeError, match="^" + re.escape(start)):
        out.sum().backward()


@pytest.mark.parametrize("case", list(MODIFIED_CASES))
def test_modified_saved_tensor_versions(T, case):
    prog, clause = MODIFIED_CASES[case]
    out = prog(_x(T), T)
    tail = clause.split(", is at ")[1]
    with pytest.raises(RuntimeError, match=re.escape(", is at " + tail)):
        out.sum().backward()


@pytest.mark.parametrize("case", list(MODIFIED_CASES))
def test_modified_saved_tensor_message_exact_clause(T, case):
    prog, clause = MODIFIED_CASES[case]
    out = prog(_x(T), T)
    with pytest.raises(RuntimeError, match="^" + re.escape(MODIFIED + clause) + "( |$)"):
        out.sum().backward()


def test_modified_saved_tensor_hint(T):
    out = _exp_then_mul(_x(T))
    with pytest.raises(RuntimeError) as info:
        out.sum().backward()
    assert str(info.value).endswith(HINT)


NODE_NAMES_IN_MESSAGE = {
    # torch drops "Backward0" but keeps any other number: PowBackward1 -> Pow1
    "Pow": lambda x, T: x ** 2,
    "Pow1": lambda x, T: x ** T.tensor(2.0),
    "Pow2": lambda x, T: 2 ** x,
    "Clamp1": lambda x, T: x.clamp(0.0, 1.0),
    "torch::autograd::CopyBackwards": lambda x, T: (x * 1).copy_(x),
}


@pytest.mark.parametrize("name", list(NODE_NAMES_IN_MESSAGE))
def test_modified_saved_tensor_node_name(T, name):
    x = _x(T)
    a = NODE_NAMES_IN_MESSAGE[name](x, T)
    b = a.sin()
    with T.no_grad():
        a.add_(0)  # a new version, the same grad_fn
    with pytest.raises(RuntimeError, match=re.escape(f", which is output 0 of {name}, is at ")):
        b.sum().backward()


def test_modified_saved_leaf_message_start(T):
    x = _x(T)
    b = x * x
    x.detach().mul_(2)
    with pytest.raises(RuntimeError, match="^" + re.escape(MODIFIED + "[torch.FloatTensor [3]]")):
        b.sum().backward()


def test_modified_saved_leaf_message_exact(T):
    x = _x(T)
    b = x * x
    x.detach().mul_(2)
    with pytest.raises(RuntimeError, match="^" + re.escape(
            MODIFIED + "[torch.FloatTensor [3]] is at version 1; expected version 0 "
            "instead.")):
        b.sum().backward()


def test_inplace_mul_by_itself_raises_on_backward(T):
    x = _x(T)
    a = x * 1
    a.mul_(a)
    close(a, [1.0, 4.0, 9.0])
    with pytest.raises(RuntimeError, match="^" + re.escape(MODIFIED)):
        a.sum().backward()


def test_modified_saved_tensor_error_with_retain_graph_and_grad(T):
    x = _x(T)
    a = x.exp()
    s = a.sum()
    a.mul_(2)
    with pytest.raises(RuntimeError, match="^" + re.escape(MODIFIED)):
        T.autograd.grad(s, x)


def test_no_error_when_modified_after_backward(T):
    x = _x(T)
    a = x.exp()
    a.sum().backward()
    a.mul_(2)  # the graph is already used: nothing to check
    close(x.grad, np.exp([1.0, 2.0, 3.0]), rtol=1e-6)


# ---- .grad accumulates in place ----------------------------------------------------------------

def test_grad_accumulates_in_place_across_backwards(T):
    x = _x(T)
    (x * 2).sum().backward()
    g = x.grad
    assert g._version == 0
    (x * 3).sum().backward()
    assert x.grad is g
    close(g, [5.0, 5.0, 5.0])
    assert g._version == 1
    (x * x).sum().backward()
    assert x.grad is g
    close(g, [7.0, 9.0, 11.0])


def test_grad_zero_then_accumulate(T):
    x = _x(T)
    (x * 2).sum().backward()
    g = x.grad
    g.zero_()
    (x * 3).sum().backward()
    assert x.grad is g
    close(g, [3.0, 3.0, 3.0])
    x.grad = None
    (x * 4).sum().backward()
    assert x.grad is not g
    close(x.grad, [4.0, 4.0, 4.0])
    close(g, [3.0, 3.0, 3.0])


def test_an_expand_that_repeats_nothing_is_a_view_that_can_be_written(T):
    """(torch's: only a view that repeats an element refuses an in-place write)"""
    torch = T
    x = torch.tensor(5.0)
    x.expand(1, 1).add_(1)
    assert x.item() == 6.0
    y = torch.ones(2, 1)
    y.expand(1, 2, 1).mul_(3)
    assert y.tolist() == [[3.0], [3.0]]
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        y.expand(2, 4).mul_(2)
