"""``unique``, ``unique_consecutive`` and ``bincount(weights=)`` of a tensor that requires
grad, as torch: the result requires grad and records torch's node (``Unique2Backward0``,
``UniqueDimBackward0``, ``UniqueConsecutiveBackward0``, ``NotImplemented`` for bincount), and
backward through it raises torch's error (NotImplementedError naming the op; RuntimeError for
bincount). Here each result came back detached: ``requires_grad`` False, so a program that
checks it, or backpropagates through it, saw no error and no gradient path."""
from __future__ import annotations

import pytest

import disthook

torch = pytest.importorskip("torch")

CALLS = {
    "unique": lambda lib, x: lib.unique(x),
    "unique_method_unsorted": lambda lib, x: x.unique(sorted=False),
    "unique_inverse_counts": lambda lib, x: lib.unique(x, return_inverse=True,
                                                       return_counts=True)[0],
    "unique_dim": lambda lib, x: lib.unique(x.reshape(3, 2), dim=0),
    "unique_consecutive": lambda lib, x: lib.unique_consecutive(x),
    "unique_consecutive_dim": lambda lib, x: lib.unique_consecutive(x.reshape(3, 2), dim=0),
    "bincount_weights": lambda lib, x: lib.bincount(lib.tensor([0, 2, 2, 1, 0, 3]), weights=x),
    "bincount_weights_method": lambda lib, x: lib.tensor([1, 1, 0, 0, 0, 2]).bincount(x, 5),
}


def observe(lib, name):
    x = lib.tensor([1.0, 3.0, 3.0, 2.0, 1.0, 1.0], requires_grad=True)
    y = CALLS[name](lib, x)
    seen = [y.requires_grad, y.grad_fn.name() if y.grad_fn is not None else None,
            y.detach().tolist()]
    try:
        y.sum().backward()
        seen.append("no error")
    except (RuntimeError, NotImplementedError) as error:
        seen += [type(error).__name__, str(error)]
    seen.append(x.grad)
    return seen


@pytest.mark.parametrize("name", sorted(CALLS))
def test_node_and_backward_error_as_torch(name):
    assert observe(disthook, name) == observe(torch, name)


@pytest.mark.parametrize("name", sorted(CALLS))
def test_no_node_without_grad(name):
    for lib in (torch, disthook):
        with lib.no_grad():
            x = lib.tensor([1.0, 3.0, 3.0, 2.0, 1.0, 1.0], requires_grad=True)
            y = CALLS[name](lib, x)
        assert not y.requires_grad and y.grad_fn is None


def test_integer_inputs_stay_leaves():
    for lib in (torch, disthook):
        y = lib.unique(lib.tensor([3, 1, 3]))
        assert not y.requires_grad and y.tolist() == [1, 3]
        assert lib.bincount(lib.tensor([0, 1, 1])).tolist() == [1, 2]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64", "int64"])
def test_bincount_weights_dtype_as_torch(dtype):
    seen = []
    for lib in (torch, disthook):
        w = lib.tensor([1, 2, 3]).to(getattr(lib, dtype))
        out = lib.bincount(lib.tensor([0, 1, 1]), weights=w)
        seen.append((str(out.dtype), out.tolist()))
    assert seen[1] == seen[0]


def test_floor_divide_node_name_as_torch():
    names = []
    for lib in (torch, disthook):
        x = lib.tensor([3.0, 4.0], requires_grad=True)
        names.append((x // 2).grad_fn.name())
    assert names[1] == names[0] == "torch::autograd::NotImplemented"
