"""torch.finfo / torch.iinfo, torch's constants and memory formats: values and texts as torch
2.13's (checked against torch where it is installed)."""
import math

import pytest

import disthook

FLOATS = ["float32", "float64", "float16", "bfloat16"]
INTS = ["int64", "int32", "int16", "int8", "uint8"]


def test_constants():
    assert disthook.pi == math.pi and disthook.e == math.e and disthook.inf == math.inf
    assert math.isnan(disthook.nan) and disthook.newaxis is None
    assert disthook.finfo().dtype == "float32" and disthook.finfo(disthook.float64).eps == 2**-52
    x = disthook.randn(2, 3, 4, 4)
    assert disthook.equal(x.contiguous(memory_format=disthook.channels_last), x)
    assert repr(disthook.channels_last) == "torch.channels_last"


@pytest.mark.parametrize("name", FLOATS)
def test_finfo_as_torch(name):
    torch = pytest.importorskip("torch")
    ours, theirs = disthook.finfo(getattr(disthook, name)), torch.finfo(getattr(torch, name))
    for field in ("bits", "eps", "max", "min", "tiny", "smallest_normal", "resolution", "dtype"):
        assert getattr(ours, field) == getattr(theirs, field), field
    assert repr(ours) == repr(theirs)


@pytest.mark.parametrize("name", INTS)
def test_iinfo_as_torch(name):
    torch = pytest.importorskip("torch")
    ours, theirs = disthook.iinfo(getattr(disthook, name)), torch.iinfo(getattr(torch, name))
    assert (ours.bits, ours.min, ours.max, ours.dtype) == (theirs.bits, theirs.min, theirs.max,
                                                           theirs.dtype)
    assert repr(ours) == repr(theirs)


def test_the_wrong_kind_of_dtype_is_torchs_type_error():
    with pytest.raises(TypeError, match=r"^torch\.iinfo\(\) requires an integer input type"):
        disthook.iinfo(disthook.float32)
    with pytest.raises(TypeError, match=r"^torch\.finfo\(\) requires a floating point input"):
        disthook.finfo(disthook.int64)
    with pytest.raises(TypeError, match=r"^torch\.bool is not supported by torch\.iinfo$"):
        disthook.iinfo(disthook.bool)
