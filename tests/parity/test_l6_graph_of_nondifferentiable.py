"""Ops torch records a node for although they have no useful derivative, as torch: the
result of ``a // b`` (and ``floor_divide``, ``2 // a``, ``floor_divide_``) of a tensor that
requires grad requires grad, and backward through it is torch's error; a comparison in place
(``y.gt_(0)``) records a node whose gradients are zeros; ``heaviside``'s error names the op
as torch's; ``nextafter`` passes the gradient to its first input. Here the quotient came back
detached (requires_grad False), and an in-place comparison left the tensor requiring grad
with no grad_fn: a leaf that took a gradient, while the tensor it came from got none."""
from __future__ import annotations

import pytest

import disthook
from parity.l6_outcome import outcome

torch = pytest.importorskip("torch")

LIBS = (torch, disthook)


FLOOR_DIVISIONS = {
    "a // 2": lambda lib, a: a // 2,
    "7 // a": lambda lib, a: 7 // a,
    "floor_divide(a, b)": lambda lib, a: lib.floor_divide(a, lib.tensor([2.0, -1.5, 4.0])),
    "a // int tensor": lambda lib, a: a // lib.tensor([2, 2, 3]),
    "floor_divide_": lambda lib, a: (a * 1).floor_divide_(2.0),
    "//=": lambda lib, a: _floordiv_assign(a * 1),
    "bfloat16": lambda lib, a: a.to(lib.bfloat16) // 2,
    "heaviside": lambda lib, a: lib.heaviside(a * 1, lib.tensor([0.5, 0.5, 0.5])),
    "heaviside_": lambda lib, a: (a * 1).heaviside_(lib.tensor([0.5, 0.5, 0.5])),
}


def _floordiv_assign(y):
    y //= 3
    return y


@pytest.mark.parametrize("name", FLOOR_DIVISIONS)
def test_floor_division_of_tensor_requiring_grad_records_a_node_that_refuses(name):
    results = []
    for lib in LIBS:
        a = lib.tensor([3.5, -2.5, 9.0], requires_grad=True)
        q = FLOOR_DIVISIONS[name](lib, a)
        results.append((q.detach().float().tolist(), q.requires_grad,
                        type(q.grad_fn).__name__, outcome(q.sum().backward)))
    assert results[1] == results[0]
    assert results[0][1] is True  # (the pattern: the quotient requires grad)


def test_floor_division_without_grad_records_nothing():
    for lib in LIBS:
        a = lib.tensor([3.5, -2.5], requires_grad=True)
        with lib.no_grad():
            assert not (a // 2).requires_grad
        assert (lib.tensor([7, 8]) // 2).tolist() == [3, 4]


COMPARISONS = ["eq_", "ne_", "lt_", "le_", "gt_", "ge_", "greater_", "less_equal_",
               "not_equal_"]


@pytest.mark.parametrize("tensor_other", [False, True])
@pytest.mark.parametrize("name", COMPARISONS)
def test_comparison_in_place_records_zero_gradients(name, tensor_other):
    results = []
    for lib in LIBS:
        a = lib.tensor([1.5, -2.5, 3.0], requires_grad=True)
        w = lib.tensor([1.0, 2.0, 3.0], requires_grad=True)
        y = a * 1
        other = lib.tensor([1.5, 0.0, 4.0]) if tensor_other else 1.5
        getattr(y, name)(other)
        (y * w).sum().backward()
        results.append((y.tolist(), y.is_leaf, type(y.grad_fn).__name__, a.grad.tolist(),
                        w.grad.tolist()))
    assert results[1] == results[0]


def test_comparison_in_place_of_integer_tensor_with_graded_other():
    results = []
    for lib in LIBS:
        w = lib.tensor([1.0, 2.0], requires_grad=True)
        x = lib.tensor([1, 3])
        x.eq_(w)
        x.float().sum()
        results.append((x.tolist(), x.dtype == lib.int64, x.requires_grad,
                        type(x.grad_fn).__name__))
    assert results[1] == results[0]


def test_logical_in_place_on_tracked_tensor_is_refused_not_left_without_node():
    # torch records a node here; disthook has none for it, so it refuses rather than leave
    # the tensor requiring grad with no history (it became a leaf that took gradients)
    a = disthook.tensor([1.5, 0.0], requires_grad=True)
    y = a * 1
    with pytest.raises(RuntimeError, match=r"logical_and_\(\).*torch.no_grad"):
        y.logical_and_(disthook.tensor([1.0, 1.0]))
    with disthook.no_grad():
        y.logical_and_(disthook.tensor([1.0, 0.0]))
    assert y.tolist() == [1.0, 0.0]


def test_nextafter_gradients_as_torch():
    results = []
    for lib in LIBS:
        a = lib.tensor([1.0, 2.0, -3.0], requires_grad=True)
        b = lib.tensor([3.0, 0.5, 0.0], requires_grad=True)
        y = lib.nextafter(a, b)
        (y * lib.tensor([1.0, 2.0, 3.0])).sum().backward()
        results.append((y.tolist(), a.grad.tolist(), b.grad.tolist()))
    assert results[1] == results[0]
