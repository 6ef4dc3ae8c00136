"""The dtypes ``cdist``, ``pdist`` and ``quantile``/``nanquantile`` take, as torch: cdist and
pdist compute floats only (no integer, bool or complex input; no half or bfloat16 kernel;
cdist's two inputs of one dtype), quantile takes float32 and float64 only, with ``q`` of the
input's dtype, and its errors name quantile() in torch's order. Here cdist and pdist computed
integer distances (an int64 result, or float64 from int and float32) and half ones, and
quantile computed float16 and took a float32 ``q`` for a float64 input."""
from __future__ import annotations

import pytest

import disthook
from parity.l6_outcome import outcome

torch = pytest.importorskip("torch")

DTYPES = ["int64", "int32", "uint8", "bool", "float16", "bfloat16", "float32", "float64",
          "complex64"]


def same(call):
    results = [outcome(lambda: call(lib)) for lib in (torch, disthook)]  # noqa: B023
    assert results[1] == results[0]


def ones(lib, shape, dtype):
    return lib.ones(shape).to(getattr(lib, dtype))


@pytest.mark.parametrize("rows", [2, 30])  # (over 25 rows: torch's matrix-product form)
@pytest.mark.parametrize("second", ["float32", "same"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_cdist_dtypes_as_torch(dtype, second, rows):
    other = dtype if second == "same" else second
    same(lambda lib: lib.cdist(ones(lib, (rows, 3), dtype), ones(lib, (rows, 3), other)))
    same(lambda lib: lib.cdist(ones(lib, (rows, 3), "float32"), ones(lib, (rows, 3), dtype)))


@pytest.mark.parametrize("dtype", DTYPES)
def test_pdist_dtypes_as_torch(dtype):
    same(lambda lib: lib.nn.functional.pdist(ones(lib, (3, 2), dtype)))


@pytest.mark.parametrize("fn", ["quantile", "nanquantile"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_quantile_input_dtypes_as_torch(dtype, fn):
    same(lambda lib: getattr(lib, fn)(lib.tensor([1.0, 2.0, 4.0]).to(getattr(lib, dtype)),
                                      0.25))


@pytest.mark.parametrize("fn", ["quantile", "nanquantile"])
@pytest.mark.parametrize("case", [
    lambda lib: (lib.ones(3), lib.tensor([0.5], dtype=lib.float64), {}),
    lambda lib: (lib.ones(3, dtype=lib.float64), lib.tensor([0.5]), {}),
    lambda lib: (lib.ones(3), lib.ones(2, 2), {}),
    lambda lib: (lib.ones(3), 1.5, {}),
    lambda lib: (lib.ones(3, dtype=lib.int64), 1.5, {}),
    lambda lib: (lib.ones(3), lib.tensor([0.5, 1.5]), {}),
    lambda lib: (lib.ones(3), 0.5, {"interpolation": "x"}),
    lambda lib: (lib.ones(3, dtype=lib.int64), 0.5, {"interpolation": "x"}),
    lambda lib: (lib.ones(0, dtype=lib.int64), 0.5, {}),
    lambda lib: (lib.tensor([1.0, 3.0]), lib.tensor(0.5, dtype=lib.float32), {}),
    lambda lib: (lib.tensor([1.0, 3.0], dtype=lib.float64), 0.75, {"interpolation": "lower"}),
])
def test_quantile_checks_in_torchs_order(case, fn):
    def call(lib):
        x, q, kwargs = case(lib)
        return getattr(lib, fn)(x, q, **kwargs)

    same(call)
