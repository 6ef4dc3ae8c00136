"""Values, dtypes and shapes at ops' edges against torch's (L3), each found different: sign
and sgn of nan (torch 0, was nan) and of a bool tensor (torch's bool, was numpy's error);
all/any of a uint8 tensor (torch's uint8, was bool); a 0-d tensor's prod/max/min over dim 0
or -1 (torch's value, was numpy's AxisError), its argmax with keepdim (torch's 0-d, was (1,))
and index_select (0-d, was (1,)); argmax/argmin of an empty tensor (torch's IndexError, was
numpy's ValueError); float16 var/std (torch accumulates in float32: finite where float16
squares overflowed to inf); torch.where(..., out=) (was a TypeError)."""
from __future__ import annotations

import numpy as np
import pytest

import disthook

torch = pytest.importorskip("torch")


def _outcome(lib, program):
    try:
        out = program(lib)
    except Exception as e:  # noqa: BLE001 (the type is what is compared)
        return type(e).__name__
    outs = out if isinstance(out, tuple) else (out,)
    return [(str(t.dtype).split(".")[-1], tuple(t.shape), np.asarray(t.tolist()).tolist())
            for t in outs]


PROGRAMS = {
    "sign_nan": lambda L: L.tensor([float("nan"), -0.0, 2.0, float("-inf")]).sign(),
    "sgn_nan": lambda L: L.tensor([float("nan"), -3.0], dtype=L.float64).sgn(),
    "sign_bool": lambda L: L.tensor([True, False]).sign(),
    "all_uint8": lambda L: L.tensor([[1, 0], [2, 3]], dtype=L.uint8).all(1),
    "any_uint8": lambda L: L.tensor([[1, 0], [0, 0]], dtype=L.uint8).any(),
    "any_uint8_keepdim": lambda L: L.tensor([[1, 0], [0, 0]], dtype=L.uint8).any(0, keepdim=True),
    "prod_0d_dim": lambda L: L.tensor(2.5).prod(-1),
    "prod_0d_keepdim": lambda L: L.tensor(2.5).prod(0, keepdim=True),
    "max_0d_dim": lambda L: tuple(L.tensor(2.5).max(0)),
    "min_0d_dim": lambda L: tuple(L.tensor(2.5).min(-1, keepdim=True)),
    "max_0d_dim_out_of_range": lambda L: L.tensor(2.5).max(1),
    "argmax_0d_keepdim": lambda L: L.tensor(2.5).argmax(-1, keepdim=True),
    "argmin_0d": lambda L: L.tensor(2.5).argmin(0),
    "index_select_0d": lambda L: L.tensor(2.5).index_select(0, L.tensor([0])),
    "index_select_0d_0d_index": lambda L: L.tensor(2.5).index_select(0, L.tensor(0)),
    "argmax_empty": lambda L: L.zeros(0, 3).argmax(),
    "argmax_empty_dim": lambda L: L.zeros(3, 0).argmax(1),
    "argmin_empty_dim": lambda L: L.zeros(3, 0).argmin(-1, keepdim=True),
    "std_float16_large": lambda L: L.tensor([[1.5, -2.0, 3.0], [0.1, 60000.0, -0.0]],
                                            dtype=L.float16).std(),
    "var_float16_dim": lambda L: L.tensor([[300.0, -300.0, 1.0], [1e4, 2e4, -3e4]],
                                          dtype=L.float16).var(1, unbiased=False),
    "std_mean_float16": lambda L: L.std_mean(L.tensor([1e4, -1e4, 5.0], dtype=L.float16)),
    "where_out": lambda L: L.where(L.tensor([True, False, True]), L.ones(3), L.zeros(3),
                                   out=L.empty(3)),
    "where_out_number": lambda L: L.where(L.tensor([True, False]), L.ones(2), 2.0,
                                          out=L.empty(2)),
    "where_out_float64": lambda L: L.where(L.tensor([True, False]), L.ones(2), L.zeros(2),
                                           out=L.empty(2, dtype=L.float64)),
}


def test_where_out_is_the_out_tensor():
    out = disthook.empty(2)
    ones, zeros = disthook.ones(2), disthook.zeros(2)
    assert disthook.where(disthook.tensor([True, False]), ones, zeros, out=out) is out
    assert out.tolist() == [1.0, 0.0]


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_value_dtype_shape_or_exception_match_torch(name):
    assert _outcome(disthook, PROGRAMS[name]) == _outcome(torch, PROGRAMS[name])


def test_float16_var_and_std_are_torchs_bits():
    rng = np.random.default_rng(0)
    for scale in (1.0, 100.0, 1e4):
        v = (rng.standard_normal((4, 7)) * scale).astype(np.float16)
        for lib_call in (lambda L, x: x.std(), lambda L, x: x.var(1),
                         lambda L, x: L.std_mean(x, 0)[0]):
            ours = lib_call(disthook, disthook.tensor(v)).tolist()
            theirs = lib_call(torch, torch.tensor(v)).tolist()
            np.testing.assert_array_equal(ours, theirs)
