"""``t[index] = value`` broadcasts the value as torch does: its leading 1-sized dims go, the
rest broadcasts into the slot (``t[0] = torch.tensor([x])``), and torch's errors when it
cannot; gradients reach the value in its own shape."""
from __future__ import annotations

import numpy as np
import pytest

import disthook

FITS = [  # (tensor shape, index, value shape)
    ((3,), 0, (1,)),
    ((3,), 0, (1, 1)),
    ((2, 3), 0, (1, 3)),
    ((2, 3), 0, (1,)),
    ((2, 3), (slice(None), 0), (2,)),
    ((2, 3), slice(0, 2), (1, 1, 3)),
    ((4,), "index", (1, 2)),
    ((4,), "mask", (1, 2)),
]
FAILS = [
    ((3,), 0, (2,)),
    ((2, 3), 0, (2,)),
    ((2, 3), slice(0, 2), (2,)),
    ((2, 3), (slice(None), 0), (2, 1)),
    ((2, 3), 0, (2, 1, 3)),
    ((4,), "index", (3,)),
    ((4,), "mask", (3,)),
]


def _index(lib, index):
    if index == "index":
        return lib.tensor([0, 2])
    if index == "mask":
        return lib.tensor([True, False, True, False])
    return index


def _assign(lib, shape, index, value_shape):
    t = lib.zeros(shape)
    value = lib.arange(1.0, 1.0 + np.prod(value_shape)).reshape(value_shape)
    t[_index(lib, index)] = value
    return t


@pytest.mark.parametrize("shape,index,value_shape", FITS)
def test_value_broadcasts_into_the_slot(shape, index, value_shape):
    got = _assign(disthook, shape, index, value_shape)
    stripped = list(value_shape)
    while stripped and stripped[0] == 1:
        stripped.pop(0)
    expected = np.zeros(shape, np.float32)
    np_index = {"index": np.array([0, 2]), "mask": np.array([True, False, True, False])}
    expected[np_index.get(index, index) if isinstance(index, str) else index] = \
        np.arange(1.0, 1.0 + np.prod(value_shape)).reshape(stripped)
    np.testing.assert_array_equal(got.numpy(), expected)
    torch = pytest.importorskip("torch")
    np.testing.assert_array_equal(got.numpy(), _assign(torch, shape, index, value_shape).numpy())


@pytest.mark.parametrize("shape,index,value_shape", FAILS)
def test_value_that_cannot_broadcast_raises_torchs_error(shape, index, value_shape):
    with pytest.raises(RuntimeError) as ours:
        _assign(disthook, shape, index, value_shape)
    torch = pytest.importorskip("torch")
    with pytest.raises(RuntimeError) as theirs:
        _assign(torch, shape, index, value_shape)
    assert str(ours.value) == str(theirs.value)


def test_one_element_value_into_one_element_slot_carries_its_gradient():
    x = disthook.tensor([5.0], requires_grad=True)
    t = disthook.zeros(3)
    t[1] = x * 2
    t.sum().backward()
    assert x.grad.shape == (1,) and x.grad.tolist() == [2.0]
    np.testing.assert_array_equal(t.detach().numpy(), [0.0, 10.0, 0.0])
