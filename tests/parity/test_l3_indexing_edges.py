"""Index types and ellipses read as torch 2.13 reads them (L3): a string or bytes index (alone,
in a tuple or in a list) is torch's TypeError, where numpy's IndexError came; any other type
torch refuses (a dict, a set, an object, a float) is torch's IndexError in torch's words; an
index with more than one ellipsis computes torch's result (torch jumps the skipped dims again
at each later ellipsis, a jump of nothing when the other items read every dim), and where
torch would read past the last dim the error is an IndexError that says so."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import disthook

torch = pytest.importorskip("torch")

E = Ellipsis


def _both(index_for, op):
    """(outcome here, outcome in torch): ('ok', shape, values) or (exception type, message)."""
    out = []
    for lib in (disthook, torch):
        x = lib.arange(24).reshape(2, 3, 4)
        index = index_for(lib)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # (torch's list-as-tuple deprecation)
                if op == "get":
                    y = x[index]
                    out.append(("ok", tuple(y.shape), y.flatten().tolist()))
                else:
                    x[index] = -1
                    out.append(("ok", x.flatten().tolist()))
        except Exception as e:  # noqa: BLE001 (the type is what is compared)
            out.append((type(e), str(e)))
    return out


REFUSED = {
    "str": lambda L: "a",
    "bytes": lambda L: b"a",
    "str_in_tuple": lambda L: (0, "a"),
    "str_in_list": lambda L: [0, "a"],
    "dict": lambda L: {1: 2},
    "set": lambda L: set(),
    "object": lambda L: object,
    "float": lambda L: 1.5,
    "numpy_float": lambda L: np.float32(1.5),
    "complex": lambda L: 1j,
}


@pytest.mark.parametrize("op", ["get", "set"])
@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused_index_types_are_torchs_exception_and_words(name, op):
    ours, theirs = _both(REFUSED[name], op)
    assert ours[0] is theirs[0]
    if theirs[0] is IndexError or name.startswith(("str", "bytes")):
        assert ours[1] == theirs[1]


ELLIPSES = {
    "two": lambda L: (E, E),
    "three": lambda L: (E, E, E),
    "int_between": lambda L: (E, 0, E),
    "int_before": lambda L: (0, E, E),
    "none_between": lambda L: (E, None, E),
    "tensor_between": lambda L: (E, L.tensor([0, 1]), E),
    "all_dims_between": lambda L: (E, 0, 0, 0, E),
    "all_dims_before": lambda L: (0, 0, 0, E, E),
    "all_dims_then_none": lambda L: (0, 0, 0, E, E, None),
    "int_and_int": lambda L: (0, E, 0, E),
    "tensor_before": lambda L: (L.tensor([0]), E, E),
    "too_many": lambda L: (E, 0, 0, 0, 0, E),
}


@pytest.mark.parametrize("op", ["get", "set"])
@pytest.mark.parametrize("name", sorted(ELLIPSES))
def test_more_than_one_ellipsis_computes_torchs_result(name, op):
    ours, theirs = _both(ELLIPSES[name], op)
    assert ours[0] == theirs[0]
    assert ours == theirs if theirs[0] == "ok" else ours[1] == theirs[1]


@pytest.mark.parametrize("index", [(E, E, 0), (E, None, E, 0), (E, E, None), (E, 0, E, 0)])
def test_an_index_after_a_second_ellipsis_is_an_index_error_as_torchs(index):
    with pytest.raises(IndexError, match="one ellipsis"):
        disthook.arange(24).reshape(2, 3, 4)[index]
    with pytest.raises(IndexError):
        torch.arange(24).reshape(2, 3, 4)[index]
