"""Tensor indexing read as torch reads it (L2): reading and assigning raise torch's IndexError
and words (numpy's were shown, and assignment said "axis"); a uint8 tensor is a mask (it was
taken as integer positions: a silent wrong result); a list holding tensors, lists, slices,
None or ... is a tuple (it was one integer index); a Python bool adds a dim."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import disthook

torch = pytest.importorskip("torch")


def _x(lib):
    return lib.arange(6.0).reshape(2, 3)


def _mask(lib, values, dtype="bool"):
    return lib.tensor(values, dtype=getattr(lib, dtype))


BAD = {
    "too many": lambda lib: (0, 0, 0),
    "too many past a mask": lambda lib: (_mask(lib, [True, False]), 0, 0),
    "too many with ...": lambda lib: (Ellipsis, 0, 0, 0),
    "int out of range": lambda lib: 5,
    "negative out of range": lambda lib: -3,
    "int out of range in dim 1": lambda lib: (0, 3),
    "tensor out of range": lambda lib: lib.tensor([0, 5]),
    "float": lambda lib: 1.5,
    "numpy float": lambda lib: (0, np.float64(1.0)),
    "float tensor": lambda lib: lib.tensor([1.0]),
    "int8 tensor": lambda lib: lib.tensor([1], dtype=lib.int8),
    "mask of the wrong length": lambda lib: _mask(lib, [True, False, True]),
    "2-d mask of the wrong shape": lambda lib: lib.ones(3, 2, dtype=lib.bool),
    "mask in dim 1": lambda lib: (slice(None), _mask(lib, [True, False])),
    "mask after an int": lambda lib: (0, _mask(lib, [True, False])),
    "mask after None": lambda lib: (None, _mask(lib, [True, False, True])),
    "mask after ...": lambda lib: (Ellipsis, _mask(lib, [True, False])),
    "uint8 mask of the wrong length": lambda lib: _mask(lib, [1, 0, 1], "uint8"),
    "bool list of the wrong length": lambda lib: [True],
}


def _error(lib, make_index, assign):
    x = _x(lib)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            if assign:
                x[make_index(lib)] = 1.0
            else:
                x[make_index(lib)]
        except Exception as e:  # noqa: BLE001 - the type is what is compared
            return type(e), str(e).splitlines()[0]
    return None


@pytest.mark.parametrize("assign", [False, True], ids=["read", "assign"])
@pytest.mark.parametrize("case", list(BAD))
def test_bad_index_raises_torchs_error(case, assign):
    ours, theirs = _error(disthook, BAD[case], assign), _error(torch, BAD[case], assign)
    assert theirs is not None and ours is not None, (ours, theirs)
    assert ours[0] is theirs[0]
    if case != "tensor out of range":  # torch names dim 0 for an index tensor in any dim
        assert ours[1] == theirs[1]


@pytest.mark.parametrize("assign", [False, True], ids=["read", "assign"])
@pytest.mark.parametrize("index", [0, slice(None)])
def test_indexing_a_0_dim_tensor_raises_torchs_error(index, assign):
    def error(lib):
        s = lib.tensor(1.0)
        try:
            if assign:
                s[index] = 2.0
            else:
                s[index]
        except IndexError as e:
            return str(e)
        return None

    assert error(disthook) == error(torch) is not None


def test_index_tensor_out_of_range_names_its_dim():
    with pytest.raises(IndexError, match="index 3 is out of bounds for dimension 1 with size 3"):
        _x(disthook)[:, disthook.tensor([3])] = 0.0


def _results(lib, index_of):
    x = _x(lib)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = x[index_of(lib)].numpy().copy()
        x[index_of(lib)] = lib.full(got.shape, -1.0)
    return got, x.numpy(), bool(caught)


@pytest.mark.parametrize("value", [1.0, [1.0]])
@pytest.mark.parametrize("index_of", [lambda lib: _mask(lib, [1, 0], "uint8"),
                                      lambda lib: (0, _mask(lib, [1, 0, 1], "uint8"))])
def test_one_value_assigned_through_a_uint8_mask_is_refused_as_torch(index_of, value):
    """torch fills a masked number with masked_fill_, which takes bool masks only."""
    messages = []
    for lib in (disthook, torch):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with pytest.raises(RuntimeError) as caught:
                _x(lib)[index_of(lib)] = lib.tensor(value) if isinstance(value, list) else value
        messages.append(str(caught.value))
    assert messages[0] == messages[1]


GOOD = {
    "uint8 mask": lambda lib: _mask(lib, [1, 0], "uint8"),
    "2-d uint8 mask": lambda lib: _mask(lib, [[1, 0, 1], [0, 0, 1]], "uint8"),
    "list of tensors": lambda lib: [lib.tensor(1), lib.tensor(2)],
    "list holding a list": lambda lib: [[0, 1]],
    "list holding a slice": lambda lib: [slice(None), 1],
    "list holding None": lambda lib: [None, 0],
    "python bools": lambda lib: (True, 0),
    "int32 tensor": lambda lib: lib.tensor([1], dtype=lib.int32),
    "bool list": lambda lib: [True, False],
    "0-dim bool tensor": lambda lib: lib.tensor(True),
}


@pytest.mark.parametrize("case", list(GOOD))
def test_index_reads_and_writes_what_torch_does(case):
    ours, theirs = _results(disthook, GOOD[case]), _results(torch, GOOD[case])
    np.testing.assert_array_equal(ours[0], theirs[0])
    np.testing.assert_array_equal(ours[1], theirs[1])
    assert ours[2] == theirs[2]  # the same deprecation warnings, or none
