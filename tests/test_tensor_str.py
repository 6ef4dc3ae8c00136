"""disthook._tensor_str must print numpy arrays exactly like torch 2.13 prints tensors."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # also run from a checkout without `pip install -e .`
    sys.path.insert(0, str(ROOT))
_dtype = importlib.import_module("disthook._dtype")
_tensor_str = importlib.import_module("disthook._tensor_str")
format_tensor = _tensor_str.format_tensor
get_printoptions = _tensor_str.get_printoptions
set_printoptions = _tensor_str.set_printoptions

NAN, INF = np.nan, np.inf
f16, f32, f64 = np.float16, np.float32, np.float64
SUFFIX = {"requires_grad": ["requires_grad=True"], "grad_fn": ["grad_fn=<MulBackward0>"]}


@pytest.fixture(autouse=True)
def _reset_options():
    """Restore default print options and default dtype (ours and torch's) after each test."""
    yield
    set_printoptions(profile="default")
    _dtype.set_default_dtype(_dtype.float32)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_printoptions(profile="default")
        torch.set_default_dtype(torch.float32)


@dataclasses.dataclass
class Case:
    name: str
    array: np.ndarray
    mode: str = "plain"  # plain | requires_grad | grad_fn | subclass
    opts: dict[str, Any] = dataclasses.field(default_factory=dict)
    dtype_suffix: str | None = None
    default_f64: bool = False


def _cases() -> list[Case]:
    rng = np.random.default_rng(20240613)
    normal = rng.standard_normal
    ints = rng.integers
    a = np.array
    return [
        # 0-d
        Case("0d_int_valued", a(3.0, f32)),
        Case("0d_fifty", a(50.0, f32)),
        Case("0d_half", a(0.5, f32)),
        Case("0d_bool", a(True)),
        Case("0d_int", a(7)),
        Case("0d_f64_negative", a(-2.5, f64)),
        Case("0d_tiny", a(1e-5, f32)),
        Case("0d_nan", a(NAN, f32)),
        Case("0d_neg_inf", a(-INF, f32)),
        Case("0d_int32", a(-12, np.int32)),
        Case("0d_f16", a(1.5, f16)),
        Case("0d_huge", a(1e10, f32)),
        # 1-d floats
        Case("int_valued", a([1.0, 2.0, 3.0], f32)),
        Case("mixed_widths", a([-1.5, 2.25, 100.125], f32)),
        Case("normal", normal(7).astype(f32)),
        Case("normal_e3", (normal(6) * 1e3).astype(f32)),
        Case("normal_e-3", (normal(6) * 1e-3).astype(f32)),
        Case("huge", a([1e9, 2e9, -3.5e9], f32)),
        Case("ratio_sci", a([1e-3, 1.0, 5.0], f32)),
        Case("specials", a([0.0, NAN, INF, -INF], f32)),
        Case("specials_fractional", a([NAN, 1.5, -INF, -0.25], f32)),
        Case("specials_int_valued", a([1.0, 20.0, NAN, INF], f32)),
        Case("specials_sci", a([1e-6, NAN, -INF, 3.0], f32)),
        Case("zeros", np.zeros(4, f32)),
        Case("neg_zero", a([-0.0, 1.0], f32)),
        Case("big_int_valued", a([123456789.0, 1.0], f64)),
        # long rows
        Case("long_row", np.arange(30, dtype=f32) * 1.5),
        Case("long_normal", normal(40).astype(f32)),
        Case("long_int", ints(-(10**12), 10**12, 45)),
        Case("long_bool", ints(0, 2, 50).astype(bool)),
        # 2-d and dtypes
        Case("2d_float", normal((3, 4)).astype(f32)),
        Case("2d_int_neg", ints(-500, 500, (4, 5))),
        Case("2d_bool", a([[True, False, True], [False, False, True]])),
        Case("2d_f64", normal((2, 3)), dtype_suffix="torch.float64"),
        Case("2d_f64_inferred", normal((2, 3)) * 1e6),
        Case("2d_int32", ints(-9, 100, (3, 3)).astype(np.int32)),
        Case("2d_f16", (normal((2, 4)) * 10).astype(f16)),
        Case("2d_uint8", ints(0, 256, (2, 6)).astype(np.uint8)),
        Case("2d_int8", ints(-128, 128, (3, 2)).astype(np.int8)),
        Case("2d_int16", ints(-30000, 30000, (2, 2)).astype(np.int16)),
        Case("2d_f32_explicit_suffix", a([[1.0, 2.5]], f32), dtype_suffix="torch.float32"),
        # higher rank
        Case("3d_float", normal((2, 3, 4)).astype(f32)),
        Case("4d_int", ints(0, 10, (2, 2, 2, 3))),
        Case("4d_single", a([[[[4.25]]]], f32)),
        Case("3d_wrapping_rows", normal((2, 2, 15)).astype(f32)),
        # summarization
        Case("summ_arange", np.arange(1001)),
        Case("summ_2d", normal((50, 50)).astype(f32)),
        Case("summ_3d", (normal((10, 10, 20)) * 100).astype(f32)),
        Case("summ_1d_float", normal(2000).astype(f32)),
        Case("summ_4d_int", ints(-50, 50, (4, 5, 6, 10))),
        Case("summ_wide_edges", a([1e-6] * 3 + [1.0] * 1000 + [5e6] * 3, f32)),
        # empty
        Case("empty", np.zeros(0, f32)),
        Case("empty_2d", np.zeros((0, 3), f32)),
        Case("empty_cols", np.zeros((2, 0), f32)),
        Case("empty_int", np.zeros(0, np.int64)),
        Case("empty_f64", np.zeros((0, 3), f64), dtype_suffix="torch.float64"),
        Case("empty_bool", np.zeros(0, bool)),
        Case("empty_3d_int32", np.zeros((1, 0, 2), np.int32)),
        # suffixes
        Case("rg_vector", a([1.0, 2.0, 3.5], f32), mode="requires_grad"),
        Case("gf_matrix", normal((2, 3)).astype(f32), mode="grad_fn"),
        Case("gf_f64_long", normal((3, 9)), mode="grad_fn"),
        Case("rg_wraps", (normal(6) * 1e4).astype(f32), mode="requires_grad"),
        Case("rg_long_row", normal(30).astype(f32), mode="requires_grad"),
        Case("rg_0d", a(2.0, f32), mode="requires_grad"),
        Case("gf_0d_f16", a(-0.125, f16), mode="grad_fn"),
        Case("gf_empty", np.zeros((0, 3), f32), mode="grad_fn"),
        Case("gf_empty_f64", np.zeros(0, f64), mode="grad_fn"),
        # print options
        Case("opt_precision", normal(5).astype(f32), opts={"precision": 2}),
        Case("opt_sci_on", a([1.0, 2.0, 30.0], f32), opts={"sci_mode": True}),
        Case("opt_sci_off", a([1e-6, 1.0, 5e6], f32), opts={"sci_mode": False}),
        Case("opt_linewidth", normal(20).astype(f32), opts={"linewidth": 40}),
        Case("opt_threshold", np.arange(10), opts={"threshold": 5, "edgeitems": 1}),
        Case("opt_threshold_2d", normal((6, 7)).astype(f32), opts={"threshold": 10}),
        Case("opt_edge0_1d", np.arange(10, dtype=f32), opts={"threshold": 5, "edgeitems": 0}),
        Case("opt_edge0_2d", np.ones((4, 5)), opts={"threshold": 5, "edgeitems": 0}),
        Case("opt_short", normal((8, 8)).astype(f32), opts={"profile": "short"}),
        Case("opt_full", np.arange(1200).reshape(30, 40), opts={"profile": "full"}),
        Case("opt_sci_lw_gf", normal(12).astype(f32), "grad_fn", {"sci_mode": True}),
        # other prefix, other default dtype
        Case("subclass_prefix", normal((2, 3)).astype(f32), mode="subclass"),
        Case("default_f64_f64", a([1.5, 2.0]), default_f64=True),
        Case("default_f64_f32", a([1.5, 2.0], f32), default_f64=True),
        Case("default_f64_empty32", np.zeros(0, f32), default_f64=True),
    ]


CASES = _cases()


def _ours(case: Case) -> str:
    set_printoptions(**case.opts)
    if case.default_f64:
        _dtype.set_default_dtype(_dtype.float64)
    prefix = "Sub(" if case.mode == "subclass" else "tensor("
    return format_tensor(
        case.array,
        dtype_suffix=case.dtype_suffix,
        suffixes=SUFFIX.get(case.mode, ()),
        prefix=prefix,
    )


def _torch_repr(torch, case: Case) -> str:
    torch.set_printoptions(**case.opts)
    if case.default_f64:
        torch.set_default_dtype(torch.float64)
    t = torch.from_numpy(case.array.copy())
    if case.mode == "requires_grad":
        t.requires_grad_()
    elif case.mode == "grad_fn":
        t = t.requires_grad_() * 1
    elif case.mode == "subclass":

        class Sub(torch.Tensor):
            pass

        t = t.as_subclass(Sub)
    return repr(t)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_matches_torch(case: Case) -> None:
    torch = pytest.importorskip("torch")
    assert _ours(case) == _torch_repr(torch, case)


# Expected strings captured from torch 2.13.0; these run without torch installed.
EXPECTED = [
    (np.array(3.0, f32), {}, "tensor(3.)"),
    (np.array(50.0, f32), {}, "tensor(50.)"),
    (np.array(0.5, f32), {}, "tensor(0.5000)"),
    (np.array(True), {}, "tensor(True)"),
    (np.array(7), {}, "tensor(7)"),
    (np.array([1.0, -2.0, 30.0], f32), {}, "tensor([ 1., -2., 30.])"),
    (np.array([0.1, -1.25, 3.0], f32), {}, "tensor([ 0.1000, -1.2500,  3.0000])"),
    (np.array([1e-5, 1.0], f32), {}, "tensor([1.0000e-05, 1.0000e+00])"),
    (np.array([0.0, NAN, INF, -INF], f32), {}, "tensor([0., nan, inf, -inf])"),
    (np.array([1.5, NAN, -INF], f32), {}, "tensor([1.5000,    nan,   -inf])"),
    (np.array([[1, -2], [30, 4]]), {}, "tensor([[ 1, -2],\n        [30,  4]])"),
    (np.array([True, False]), {}, "tensor([ True, False])"),
    (
        np.arange(8, dtype=f32).reshape(2, 2, 2),
        {},
        "tensor([[[0., 1.],\n         [2., 3.]],\n\n        [[4., 5.],\n         [6., 7.]]])",
    ),
    (np.array([1.5, 2.0]), {}, "tensor([1.5000, 2.0000], dtype=torch.float64)"),
    (np.array([1, 2], np.int32), {}, "tensor([1, 2], dtype=torch.int32)"),
    (np.array([0.5], f16), {}, "tensor([0.5000], dtype=torch.float16)"),
    (np.zeros((0, 3), f32), {}, "tensor([], size=(0, 3))"),
    (np.zeros(0, np.int64), {}, "tensor([], dtype=torch.int64)"),
    (
        np.zeros((0, 3), f64),
        {"dtype_suffix": "torch.float64"},
        "tensor([], size=(0, 3), dtype=torch.float64)",
    ),
    (
        np.array([1.0, 2.0], f32),
        {"suffixes": ["requires_grad=True"]},
        "tensor([1., 2.], requires_grad=True)",
    ),
    (
        np.array([[1.0, 2.0]], f64),
        {"suffixes": ["grad_fn=<MulBackward0>"]},
        "tensor([[1., 2.]], dtype=torch.float64, grad_fn=<MulBackward0>)",
    ),
    (np.arange(2000), {}, "tensor([   0,    1,    2,  ..., 1997, 1998, 1999])"),
    (
        np.arange(25, dtype=f32) * 0.5,
        {},
        (
            "tensor([ 0.0000,  0.5000,  1.0000,  1.5000,  2.0000,  2.5000,  3.0000,  3.5000,\n"
            "         4.0000,  4.5000,  5.0000,  5.5000,  6.0000,  6.5000,  7.0000,  7.5000,\n"
            "         8.0000,  8.5000,  9.0000,  9.5000, 10.0000, 10.5000, 11.0000, 11.5000,\n"
            "        12.0000])"
        ),
    ),
]


@pytest.mark.parametrize("array,kwargs,expected", EXPECTED)
def test_expected_strings(array: np.ndarray, kwargs: dict, expected: str) -> None:
    assert format_tensor(array, **kwargs) == expected


def test_print_options_profiles() -> None:
    defaults = {
        "precision": 4,
        "threshold": 1000,
        "edgeitems": 3,
        "linewidth": 80,
        "sci_mode": None,
    }
    assert get_printoptions() == defaults
    set_printoptions(profile="short", sci_mode=True)
    assert get_printoptions() == {**defaults, "precision": 2, "edgeitems": 2, "sci_mode": True}
    set_printoptions(profile="full", linewidth=120)
    assert get_printoptions() == {**defaults, "threshold": float("inf"), "linewidth": 120}
    set_printoptions(precision=1)
    assert format_tensor(np.array([0.25, 1.0], f32)) == "tensor([0.2, 1.0])"
    set_printoptions(**defaults)
    assert get_printoptions() == defaults


def test_print_options_match_torch() -> None:
    torch = pytest.importorskip("torch")
    for kwargs in ({}, {"profile": "short"}, {"profile": "full", "precision": 6}):
        set_printoptions(**kwargs)
        torch.set_printoptions(**kwargs)
        assert get_printoptions() == torch._tensor_str.get_printoptions()


def test_module_does_not_import_torch() -> None:
    tree = ast.parse(Path(_tensor_str.__file__).read_text())
    imported = [
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    ]
    imported += [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    assert not any(name.split(".")[0] == "torch" for name in imported)
