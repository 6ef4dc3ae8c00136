"""The Tensor methods and torch functions added for issue 31, each checked against numpy or
finite differences and, with torch installed, against torch: values, gradients, node names.
One row per op."""
from __future__ import annotations

import re

import numpy as np
import pytest
from helpers import check_op, lib

import disthook

try:
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="compares with torch")

A = (3, 4)
UNIT = {"low": -0.9, "high": 0.9}
POS = {"low": 0.2, "high": 3.0}

# name, fn, inputs, check_op options
ROWS = [
    ("asin", lambda x: x.asin(), [A], UNIT),
    ("acos", lambda x: x.acos(), [A], UNIT),
    ("atan", lambda x: x.atan(), [A], {}),
    ("arcsin", lambda x: lib(x).arcsin(x), [A], UNIT),
    ("sinh", lambda x: x.sinh(), [A], {}),
    ("cosh", lambda x: x.cosh(), [A], {}),
    ("asinh", lambda x: x.asinh(), [A], {}),
    ("acosh", lambda x: x.acosh(), [A], {"low": 1.2, "high": 3.0}),
    ("atanh", lambda x: x.atanh(), [A], UNIT),
    ("tan", lambda x: x.tan(), [A], {"low": -1.2, "high": 1.2}),
    ("log1p", lambda x: x.log1p(), [A], UNIT),
    ("log2", lambda x: x.log2(), [A], POS),
    ("log10", lambda x: x.log10(), [A], POS),
    ("expm1", lambda x: x.expm1(), [A], {}),
    ("exp2", lambda x: x.exp2(), [A], {}),
    ("erfc", lambda x: x.erfc(), [A], {}),
    ("erfinv", lambda x: x.erfinv(), [A], {"low": -0.95, "high": 0.95}),
    ("lgamma", lambda x: x.lgamma(), [A], {"low": -2.5, "high": 6.0}),
    ("digamma", lambda x: x.digamma(), [A], {"low": -2.5, "high": 20.0}),
    ("polygamma", lambda x: x.polygamma(2), [A], POS),
    ("polygamma-neg", lambda x: lib(x).polygamma(1, x), [A], {"low": -2.9, "high": -2.1}),
    ("mvlgamma", lambda x: x.mvlgamma(3), [A], {"low": 1.5, "high": 4.0, "name": False}),
    ("i0", lambda x: x.i0(), [A], {"low": -5.0, "high": 5.0}),
    ("i0-large", lambda x: x.i0(), [(5,)], {"low": 31.0, "high": 40.0, "atol": 1e-4, "fd_atol": 1e-2}),
    ("special.i1", lambda x: lib(x).special.i1(x), [A], {"low": -5.0, "high": 5.0}),
    ("sinc", lambda x: x.sinc(), [A], {}),
    ("frac", lambda x: x.frac(), [A], {"low": -3.0, "high": 3.0}),
    ("logit", lambda x: x.logit(), [A], {"low": 0.05, "high": 0.95}),
    ("logit-eps", lambda x: x.logit(0.2), [A], {"low": 0.05, "high": 0.95}),
    ("deg2rad", lambda x: x.deg2rad(), [A], {}),
    ("rad2deg", lambda x: x.rad2deg(), [A], {}),
    ("sgn", lambda x: x.sgn(), [A], {}),
    ("nan_to_num", lambda x: (x.log()).nan_to_num(), [A], {}),
    ("atan2", lambda x, y: x.atan2(y), [A, (4,)], {}),
    ("hypot", lambda x, y: x.hypot(y), [A, A], {}),
    ("copysign", lambda x, y: x.copysign(y), [A, A], {}),
    ("fmod", lambda x, y: x.fmod(y), [A, A], {"low": 0.5, "high": 3.0}),
    ("remainder", lambda x, y: x.remainder(y), [A, A], {"low": 0.5, "high": 3.0}),
    ("mod", lambda x, y: x % y, [A, A], {"low": 0.5, "high": 3.0}),
    ("xlogy", lambda x, y: x.xlogy(y), [A, A], POS),
    ("logaddexp", lambda x, y: x.logaddexp(y), [A, A], {}),
    ("logaddexp2", lambda x, y: x.logaddexp2(y), [A, A], {}),
    ("float_power", lambda x, y: x.float_power(y), [A, A], POS),
    ("fmax", lambda x, y: x.fmax(y), [A, A], {"name": False}),
    ("fmin", lambda x, y: x.fmin(y), [A, A], {"name": False}),
    ("ldexp", lambda x, y: x.ldexp(y), [A, A], {"name": False}),
    ("igamma", lambda x: lib(x).igamma(lib(x).tensor([[0.5], [2.0], [7.5]], dtype=x.dtype), x),
     [A], {"low": 0.1, "high": 12.0}),
    ("igammac", lambda x: lib(x).special.gammaincc(lib(x).tensor([[0.5], [2.0], [7.5]],
                                                                dtype=x.dtype), x),
     [A], {"low": 0.1, "high": 12.0}),
    # scans and order statistics
    ("cumprod", lambda x: x.cumprod(1), [A], {}),
    ("cumprod-zero", lambda x: x.cumprod(0), [np.array([2.0, 0.0, 3.0, 0.5])], {}),
    ("cummax", lambda x: x.cummax(1), [A], {}),
    ("cummin", lambda x: x.cummin(0), [A], {}),
    ("logcumsumexp", lambda x: x.logcumsumexp(1), [A], {}),
    ("median", lambda x: x.median(), [A], {"name": False}),
    ("median-dim", lambda x: x.median(1), [A], {}),
    ("nanmedian-dim", lambda x: x.nanmedian(0, keepdim=True), [A], {}),
    ("kthvalue", lambda x: x.kthvalue(2, 1), [A], {}),
    ("mode", lambda x: x.mode(0), [np.array([[1.0, 2.0], [1.0, 3.0], [2.0, 3.0]])],
     {"grad": False}),  # ties: no finite differences
    ("quantile", lambda x: x.quantile(0.3, 1), [A], {"name": False}),
    ("quantile-vec", lambda x: x.quantile(lib(x).tensor([0.25, 0.9], dtype=x.dtype), 0,
                                          keepdim=True), [A], {"name": False}),
    ("nanquantile", lambda x: x.nanquantile(0.5), [A], {"name": False}),
    ("nansum", lambda x: x.log().nansum(1), [A], {"name": False}),
    ("nanmean", lambda x: x.log().nanmean(), [A], {"name": False}),
    ("diff", lambda x: x.diff(), [A], {"name": False}),
    ("diff-2", lambda x: x.diff(2, 0), [A], {"name": False}),
    ("trace", lambda x: x.trace(), [(4, 4)], {"name": False}),
    ("dist", lambda x, y: x.dist(y, 3), [A, A], {"name": False}),
    ("aminmax", lambda x: x.aminmax(dim=1), [A], {"name": False}),
    ("cov", lambda x: x.cov(), [A], {"name": False}),
    ("corrcoef", lambda x: x.corrcoef(), [A], {"name": False}),
    # shapes and views
    ("flip", lambda x: x.flip(0, 1), [A], {}),
    ("fliplr", lambda x: x.fliplr(), [A], {}),
    ("rot90", lambda x: x.rot90(1, [0, 1]), [A], {"name": False}),
    ("rot90-3", lambda x: x.rot90(3, [1, 0]), [A], {"name": False}),
    ("movedim", lambda x: x.movedim(0, 2), [(2, 3, 4)], {}),
    ("tile", lambda x: x.tile((2,)), [A], {}),
    ("diagonal", lambda x: x.diagonal(1), [A], {}),
    ("diagonal-3d", lambda x: x.diagonal(-1, 2, 0), [(3, 2, 4)], {}),
    ("diag_embed", lambda x: x.diag_embed(1), [A], {}),
    ("diag-1d", lambda x: x.diag(-1), [(4,)], {}),
    ("diagflat", lambda x: x.diagflat(), [(2, 2)], {"name": False}),
    ("unfold", lambda x: x.unfold(1, 2, 1), [A], {}),
    ("unfold-step", lambda x: x.unfold(0, 2, 2) * 1, [(5, 2)], {}),
    ("as_strided", lambda x: x.as_strided((2, 2), (1, 2), 1), [A], {}),
    ("take", lambda x: x.take(lib(x).tensor([[0, 5], [11, 5]])), [A], {"name": False}),
    ("take_along_dim", lambda x: x.take_along_dim(lib(x).tensor([[0], [2], [1]]), 1), [A], {}),
    ("index_add", lambda x, y: x.index_add(1, lib(x).tensor([0, 2, 0]), y, alpha=2),
     [A, (3, 3)], {"name": False}),
    ("index_copy", lambda x, y: x.index_copy(0, lib(x).tensor([2, 0]), y), [A, (2, 4)],
     {"name": False}),
    ("index_fill", lambda x: x.index_fill(1, lib(x).tensor([1, 3]), -1.5), [A],
     {"name": False}),
    ("masked_select", lambda x: x.masked_select(x > 0), [A], {"name": False}),
    ("masked_scatter", lambda x, y: x.masked_scatter(x > 0, y), [A, (12,)], {"name": False}),
    ("select_scatter", lambda x, y: lib(x).select_scatter(x, y, 0, 1), [A, (4,)],
     {"name": False}),
    ("slice_scatter", lambda x, y: lib(x).slice_scatter(x, y, 1, 1, 4, 2), [A, (3, 2)],
     {"name": False}),
    ("diagonal_scatter", lambda x, y: lib(x).diagonal_scatter(x, y, 1), [A, (3,)],
     {"name": False}),
    ("scatter_reduce-sum", lambda x, y: x.scatter_reduce(0, lib(x).tensor([[0, 1, 0, 2]]), y,
                                                         "sum", include_self=False),
     [A, (1, 4)], {"name": False}),
    ("scatter_reduce-mean", lambda x, y: x.scatter_reduce(1, lib(x).tensor([[0, 0], [1, 1],
                                                                           [3, 3]]), y, "mean"),
     [A, (3, 2)], {"name": False}),
    ("scatter_reduce-amax", lambda x, y: x.scatter_reduce(1, lib(x).tensor([[0, 0], [1, 1],
                                                                           [3, 3]]), y, "amax"),
     [A, (3, 2)], {}),
    ("scatter_reduce-prod", lambda x, y: x.scatter_reduce(0, lib(x).tensor([[0, 1, 0, 2]]), y,
                                                          "prod", include_self=True),
     [A, (1, 4)], {}),
    ("scatter_reduce-prod-zeros", lambda x, y: x.scatter_reduce(
        0, lib(x).tensor([[0, 0, 1, 1], [0, 1, 1, 2]]), y, "prod"),
     [np.array([[0.0, 2.0, 3.0, 1.5], [1.0, 0.0, 2.0, 0.5], [1.0, 1.0, 1.0, 1.0]]),
      np.array([[2.0, 0.0, 0.0, 1.5], [0.0, 3.0, 0.0, 2.0]])], {}),
    ("tensor_split", lambda x: x.tensor_split(3, 1), [A], {}),
    ("hsplit", lambda x: x.hsplit([1, 3]), [A], {}),
    # products
    ("outer", lambda x, y: x.outer(y), [(3,), (4,)], {"name": False}),
    ("inner", lambda x, y: x.inner(y), [A, (2, 4)], {"name": False}),
    ("kron", lambda x, y: x.kron(y), [(2, 3), (2, 2)], {"name": False}),
    ("cross", lambda x, y: x.cross(y, dim=1), [(2, 3), (2, 3)], {"name": False}),
    ("addmm", lambda x, y, z: x.addmm(y, z, beta=0.5, alpha=2), [(2, 4), (2, 3), (3, 4)],
     {"name": False}),
    ("baddbmm", lambda x, y, z: x.baddbmm(y, z), [(2, 2, 4), (2, 2, 3), (2, 3, 4)],
     {"name": False}),
    ("addr", lambda x, y, z: x.addr(y, z), [(2, 3), (2,), (3,)], {"name": False}),
    ("renorm", lambda x: x.renorm(2, 0, 1.5), [A], {"name": False}),
    ("rsub", lambda x, y: lib(x).rsub(x, y, alpha=2), [A, A], {"name": False}),
    ("gradient", lambda x: lib(x).gradient(x, spacing=0.5, dim=1), [A], {"name": False}),
    ("gradient-2", lambda x: lib(x).gradient(x, edge_order=2), [A], {"name": False}),
    ("cholesky_solve", lambda b, m: b.cholesky_solve((m @ m.mT + 3 * lib(m).eye(
        3, dtype=m.dtype)).cholesky()), [(3, 2), (3, 3)], {"name": False}),
    ("cholesky_inverse", lambda m: (m @ m.mT + 3 * lib(m).eye(3, dtype=m.dtype)).cholesky()
     .cholesky_inverse(), [(3, 3)], {"name": False}),
    ("triangular_solve", lambda b, m: lib(b).triangular_solve(b, m + 3 * lib(m).eye(
        3, dtype=m.dtype), upper=False)[0], [(3, 2), (3, 3)], {"name": False}),
    ("index_add_", lambda x, y: (x * 1).index_add_(0, lib(x).tensor([2, 2]), y), [A, (2, 4)],
     {"name": False}),
    ("diagonal_copy", lambda x: lib(x).diagonal_copy(x, 1), [A], {"name": False}),
    ("unbind_copy", lambda x: lib(x).unbind_copy(x, 1), [A], {"name": False}),
    ("fill", lambda x: lib(x).fill(x, 2.0) * x, [A], {"name": False}),
    ("hardshrink", lambda x: x.hardshrink(0.7), [A], {"name": False}),
    ("prelu", lambda x, w: x.prelu(w), [(2, 3, 2), (3,)], {"name": False}),
    ("prelu-one", lambda x, w: lib(x).prelu(x, w), [A, (1,)], {"name": False}),
]


@pytest.mark.parametrize("name,fn,inputs,options", ROWS, ids=[r[0] for r in ROWS])
def test_op(name, fn, inputs, options):
    check_op(fn, *inputs, **options)


def test_inplace_forms_take_the_op_history():
    x = disthook.tensor([0.1, 0.2], requires_grad=True)
    y = x * 1
    y.asin_()
    assert y.grad_fn.name() == "AsinBackward0"
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 1 / np.sqrt(1 - np.array([0.1, 0.2]) ** 2),
                               rtol=1e-6)


def test_inplace_form_refuses_a_float_result_in_an_integer_tensor():
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired "
                                           "output type Long"):
        disthook.tensor([1, 2]).sin_()


def test_unfold_writes_through_to_its_input():
    x = disthook.zeros(5)
    x.unfold(0, 2, 2)[1, 0] = 7.0
    assert x.tolist() == [0.0, 0.0, 7.0, 0.0, 0.0]


def test_diagonal_is_a_view():
    x = disthook.zeros(3, 3)
    x.diagonal().fill_(2.0)
    assert x.trace().item() == 6.0


def test_special_functions_against_known_values():
    x = disthook.tensor([0.5, 1.0, 2.5, 10.0], dtype=disthook.float64)
    euler = 0.5772156649015329
    np.testing.assert_allclose(x.digamma().numpy()[1], -euler, rtol=1e-12)
    np.testing.assert_allclose(x.lgamma().numpy(), [0.5723649429247001, 0.0,
                                                    0.2846828704729192, 12.801827480081469],
                               rtol=1e-12)
    np.testing.assert_allclose(x.polygamma(1).numpy()[1], np.pi ** 2 / 6, rtol=1e-12)
    y = disthook.tensor([-0.999, -0.5, 0.0, 0.3, 0.9999], dtype=disthook.float64)
    np.testing.assert_allclose(disthook.erf(y.erfinv()).numpy(), y.numpy(), atol=1e-6)
    assert disthook.tensor([0.0, -1.0]).digamma().tolist()[0] == -np.inf


@needs_torch
@pytest.mark.parametrize("name", ["bitwise_left_shift", "bitwise_right_shift", "gcd", "lcm",
                                  "bitwise_and", "bitwise_xor", "bitwise_not"])
def test_integer_ops_against_torch(name):
    a, b = [[12, 7, -3], [5, 8, 9]], [[1, 2, 3], [2, 1, 0]]
    args = () if name == "bitwise_not" else (disthook.tensor(b),)
    targs = () if name == "bitwise_not" else (torch.tensor(b),)
    got = getattr(disthook.tensor(a), name)(*args)
    want = getattr(torch.tensor(a), name)(*targs)
    assert got.tolist() == want.tolist() and str(got.dtype) == str(want.dtype)


@needs_torch
@pytest.mark.parametrize("expr", [
    "x.nonzero()", "x.argwhere()", "x.count_nonzero(1)", "x.signbit()", "x.isposinf()",
    "x.isneginf()", "x.frexp()[0]", "x.frexp()[1]", "x.histc(4, -2, 2)",
    "x.nan_to_num(0, 0, 0).long().abs().reshape(-1).bincount()", "x.heaviside(x.new_tensor(0.5))",
    "x.nonzero(as_tuple=True)[1]", "lib.tril_indices(3, 4, 1)", "lib.triu_indices(4, 3, -1)",
    "lib.searchsorted(lib.tensor([1.0, 2.0, 3.0]), x)", ("lib.bucketize(x, lib.tensor([0.0, 1.0]),"
    " right=True)"), "x.unique_consecutive()", "lib.vander(x[0], 3)",
    "lib.combinations(x[0], 2)", "lib.cartesian_prod(x[0], x[1])",
    "lib.block_diag(x, x[:1])", "lib.atleast_3d(x[0])", "lib.column_stack([x[0], x[1]])",
    "lib.dstack([x, x])", "lib.meshgrid(x[0], x[1], indexing='xy')[1]",
    "lib.tensordot(x, x, dims=([1], [1]))", "x.storage_offset()", "x[1:].storage_offset()",
    "x.t().stride()", "x.nbytes", "x.itemsize", "x.rot90(2)", "x.msort()",
    "lib.isin(x, lib.tensor([0.0, 3.0]))", "lib.fill(x, 2.5)", "lib.slice_copy(x, 1, 1, 3)",
    "lib.histogramdd(x[:, :2].nan_to_num(0, 5, -5), bins=[2, 2])[0]", "x.resize(4, 2)",
    "x.clone().index_fill_(1, lib.tensor([0]), 9.0)", "lib.unravel_index(lib.tensor(5), (2, 3))[1]",
    "lib.logspace(0, 2, 3)", "lib.hann_window(5)", "lib.kaiser_window(4, True, 2.0)",
    "lib.trapezoid(x.nan_to_num(0, 1, 1))",
    "lib.trapezoid(x.nan_to_num(0, 1, 1), lib.tensor([0.0, 1.0, 3.0, 4.0]))",
    "lib.cumulative_trapezoid(x.nan_to_num(0, 1, 1), dx=2)",
    "lib.result_type(x, 1)", "lib.constant_pad_nd(x, [1, 2, 0, 1], 0.5)",
    "lib.max_pool1d_with_indices(x.nan_to_num(0, 9, -9)[None], 2)[1]",
    "lib.binary_cross_entropy_with_logits(x.nan_to_num(0, 9, -9), (x > 0).float(), reduction=0)",
    "lib.nonzero_static(x, size=7, fill_value=-2)", "lib.promote_types(lib.int32, lib.float32)",
])
def test_more_forms_against_torch(expr):
    data = [[1.5, -2.0, 0.0, np.inf], [-np.inf, 0.25, 3.0, 0.0]]

    def run(module):
        x = module.tensor(data)
        return eval(expr, {"lib": module, "x": x})

    got, want = run(disthook), run(torch)
    if isinstance(want, torch.Tensor):
        assert str(got.dtype) == str(want.dtype), (got.dtype, want.dtype)
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
    else:
        assert str(got) == str(want)


@pytest.mark.parametrize("name", ["solve", "lstsq", "symeig", "eig"])
def test_functions_torch_removed_say_what_replaced_them(name):
    a = disthook.eye(2)
    with pytest.raises(RuntimeError, match="removed in torch 1.9"):
        getattr(disthook, name)(a, a)
    with pytest.raises(RuntimeError, match="torch.linalg"):
        getattr(a, name)(a)


def test_random_fills_are_fresh_values_in_range_and_take_no_gradient():
    disthook.manual_seed(0)
    x = disthook.zeros(1000)
    assert set(x.random_(0, 3).tolist()) == {0.0, 1.0, 2.0}
    assert x.exponential_(2.0).min().item() > 0 and abs(x.mean().item() - 0.5) < 0.1
    assert set(x.bernoulli_(0.3).tolist()) == {0.0, 1.0}
    assert x.geometric_(0.5).min().item() >= 1
    assert x.log_normal_().min().item() > 0
    w = disthook.ones(3, requires_grad=True)
    y = w * 2
    y.cauchy_()
    y.sum().backward()
    assert w.grad.tolist() == [0.0, 0.0, 0.0]


def test_sgn_of_bools_is_the_bools():
    assert disthook.tensor([True, False]).sgn().tolist() == [True, False]


def test_outer_takes_vectors_only():
    with pytest.raises(RuntimeError, match="outer: Expected 1-D argument self, but got 2-D"):
        disthook.ones(2, 2).outer(disthook.ones(2))


def test_igamma_with_shape_zero_is_one_past_zero_and_nan_at_it():
    a = disthook.zeros(3, dtype=disthook.float64)
    x = disthook.tensor([0.0, 0.5, 4.0], dtype=disthook.float64)
    np.testing.assert_array_equal(disthook.igamma(a, x).numpy(), [np.nan, 1.0, 1.0])
    np.testing.assert_array_equal(disthook.igammac(a, x).numpy(), [np.nan, 0.0, 0.0])


@needs_torch
@pytest.mark.parametrize("expr", [
    "lib.fft.fftfreq(5)", "lib.fft.rfftfreq(6, 0.5)", "lib.fft.fftshift(x)",
    "lib.fft.ifftshift(x)", "lib.fft.fftshift(x, 1)", "lib.fft.ifftshift(x, (0,))",
])
def test_fft_real_helpers_against_torch(expr):
    data = np.arange(15.0).reshape(3, 5)
    got = eval(expr, {"lib": disthook, "x": disthook.tensor(data)})
    want = eval(expr, {"lib": torch, "x": torch.tensor(data)})
    assert str(got.dtype) == str(want.dtype)
    np.testing.assert_allclose(got.numpy(), want.numpy())


def test_hermitian_fft_transforms_refuse_at_use_saying_why():
    with pytest.raises(NotImplementedError, match="not supported by disthook"):
        disthook.fft.ihfft(disthook.ones(4))


@pytest.mark.parametrize(("expr", "message"), [
    ("x.H", "tensor.H is only supported on matrices (2-D tensors). Got 1-D tensor."),
    ("x.mH", "tensor.mH is only supported on matrices or batches of matrices. Got 1-D tensor."),
    ("x.adjoint()", ("tensor.adjoint() is only supported on matrices or batches of matrices. "
                     "Got 1-D tensor.")),
])
def test_conjugate_transposes_need_matrices(expr, message):
    with pytest.raises(RuntimeError, match=re.escape(message)):
        eval(expr, {"x": disthook.ones(3)})


def test_process_settings_remember_what_was_set():
    before = disthook.get_num_threads()
    try:
        disthook.set_num_threads(3)
        assert disthook.get_num_threads() == 3
        disthook.use_deterministic_algorithms(True, warn_only=True)
        assert disthook.are_deterministic_algorithms_enabled()
        assert disthook.is_deterministic_algorithms_warn_only_enabled()
        disthook.set_float32_matmul_precision("high")
        assert disthook.get_float32_matmul_precision() == "high"
        with pytest.raises(RuntimeError, match="must be highest, high or medium"):
            disthook.set_float32_matmul_precision("low")
        disthook.set_default_tensor_type(disthook.DoubleTensor)
        assert disthook.ones(1).dtype == disthook.float64
    finally:
        disthook.set_num_threads(before)
        disthook.use_deterministic_algorithms(False)
        disthook.set_float32_matmul_precision("highest")
        disthook.set_default_dtype(disthook.float32)


@pytest.mark.parametrize("fn", [
    lambda x: x.cumprod(0) * x,
    lambda x: x.as_strided((2,), (1,)) * x[:2],
    # (amax and amin differentiate twice, prod where no factor is zero:
    # tests/test_r20_scatter_reduce.py)
    lambda x: x.scatter_reduce(0, disthook.tensor([0, 0, 1, 1]), x, "prod") * x,
])
def test_second_order_through_a_numpy_backward_is_refused_not_zero(fn):
    # (det at a singular matrix has its second derivative: tests/parity/test_l1_det_singular.py)
    x = disthook.tensor([1.0, 0.0, 2.0, 3.0], requires_grad=True)
    disthook.autograd.grad(fn(x).sum(), x)  # first order works
    with pytest.raises(NotImplementedError, match="second derivative"):
        disthook.autograd.grad(fn(x).sum(), x, create_graph=True)
