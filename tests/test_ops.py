"""Every op through check_op: forward vs numpy and torch, gradients vs central differences
and torch, second order where ``double=True``. Shapes include 0-d and broadcasting."""
import math

import numpy as np
import pytest
from helpers import check_op, lib, nnf

import disthook
from disthook.ops import elementwise as E

ERF = np.vectorize(math.erf)  # numpy has no erf
BROADCAST = [((2, 3), (2, 3)), ((3, 1), (1, 4)), ((4,), (2, 3, 4)), ((), (2, 3)), ((2, 3), ()),
             ((), ())]


# ---- arithmetic ---------------------------------------------------------------------------

@pytest.mark.parametrize("a, b", BROADCAST)
def test_add(a, b):
    check_op(lambda x, y: x + y, a, b, np_fn=np.add, double=True)


@pytest.mark.parametrize("a, b", BROADCAST)
def test_sub(a, b):
    check_op(lambda x, y: x - y, a, b, np_fn=np.subtract, double=True)


@pytest.mark.parametrize("a, b", BROADCAST)
def test_mul(a, b):
    check_op(lambda x, y: x * y, a, b, np_fn=np.multiply, double=True)


@pytest.mark.parametrize("a, b", BROADCAST)
def test_div(a, b):
    check_op(lambda x, y: x / y, a, b, np_fn=np.divide, double=True, low=0.5)


@pytest.mark.parametrize("a, b", BROADCAST)
def test_pow_tensor_tensor(a, b):
    check_op(lambda x, y: x ** y, a, b, np_fn=np.power, double=True, low=0.5)


@pytest.mark.parametrize("a, b", BROADCAST)
def test_maximum(a, b):
    check_op(lambda x, y: x.maximum(y), a, b, np_fn=np.maximum)


@pytest.mark.parametrize("a, b", BROADCAST)
def test_minimum(a, b):
    check_op(lambda x, y: lib(x).minimum(x, y), a, b, np_fn=np.minimum)


def test_add_sub_alpha():
    check_op(lambda x, y: x.add(y, alpha=2.5), (2, 3), (3,), np_fn=lambda x, y: x + 2.5 * y,
             double=True)
    check_op(lambda x, y: x.sub(y, alpha=-3), (2, 3), (2, 1), np_fn=lambda x, y: x + 3 * y)


def test_arithmetic_with_python_scalars():
    check_op(lambda x: x + 2.5, (2, 3), np_fn=lambda x: x + 2.5, double=True)
    check_op(lambda x: 2.5 - x, (2, 3), np_fn=lambda x: 2.5 - x, double=True)
    check_op(lambda x: x - 2, (2, 3), np_fn=lambda x: x - 2)
    check_op(lambda x: 3 * x * 0.5, (2, 3), np_fn=lambda x: 1.5 * x, double=True)
    check_op(lambda x: x / 4, (2, 3), np_fn=lambda x: x / 4, double=True)
    check_op(lambda x: 2.0 / x, (2, 3), np_fn=lambda x: 2.0 / x, double=True, low=0.5)
    check_op(lambda x: 1 / x, (), np_fn=lambda x: 1 / x, double=True, low=0.5)


def test_numpy_scalars_on_the_left_give_tensors():
    check_op(lambda x: np.float64(2.5) * x - np.int64(1) / (x + 3), (2, 3), double=True,
             np_fn=lambda x: 2.5 * x - 1 / (x + 3))
    check_op(lambda x: np.float32(2.0) ** x, (3,), np_fn=lambda x: 2.0 ** x)


def test_pow_scalar_exponent():
    check_op(lambda x: x ** 3, (2, 3), np_fn=lambda x: x ** 3, double=True)
    check_op(lambda x: x ** 2, (), np_fn=lambda x: x ** 2, double=True)
    check_op(lambda x: x ** 2.5, (2, 3), np_fn=lambda x: x ** 2.5, double=True, low=0.5)
    check_op(lambda x: x ** -1, (4,), np_fn=lambda x: 1 / x, double=True, low=0.5)
    check_op(lambda x: x ** 0, (4,), np_fn=lambda x: x ** 0, double=True)
    check_op(lambda x: x.pow(0.5), (4,), np_fn=np.sqrt, double=True, low=0.5)


def test_pow_scalar_base():
    check_op(lambda x: 2 ** x, (2, 3), np_fn=lambda x: 2.0 ** x, double=True)
    check_op(lambda x: 0.5 ** x, (), np_fn=lambda x: 0.5 ** x, double=True)


# ---- matmul ---------------------------------------------------------------------------------

@pytest.mark.parametrize("a, b", [
    ((4,), (4,)), ((3, 4), (4,)), ((4,), (4, 5)), ((3, 4), (4, 5)),
    ((2, 3, 4), (2, 4, 5)), ((2, 1, 3, 4), (3, 4, 2)), ((2, 3, 4), (4, 5)), ((4,), (2, 4, 5)),
    ((2, 3, 4), (4,)), ((3, 4), (2, 4, 5)),
])
def test_matmul(a, b):
    # torch names the node of a matmul it folds or batches after its internal reshapes
    check_op(lambda x, y: x @ y, a, b, np_fn=np.matmul, double=True,
             name=(len(a), len(b)) in ((1, 1), (2, 1), (2, 2)))


def test_mm_mv_dot_bmm():
    check_op(lambda x, y: x.mm(y), (3, 4), (4, 2), np_fn=np.matmul, double=True)
    check_op(lambda x, y: x.mv(y), (3, 4), (4,), np_fn=np.matmul, double=True)
    check_op(lambda x, y: x.dot(y), (4,), (4,), np_fn=np.dot, double=True)
    check_op(lambda x, y: x.bmm(y), (2, 3, 4), (2, 4, 5), np_fn=np.matmul, double=True)


# ---- unary math and activations ------------------------------------------------------------

@pytest.mark.parametrize("shape", [(), (2, 3)])
@pytest.mark.parametrize("fn, np_fn, low", [
    (lambda x: -x, np.negative, -2),
    (lambda x: x.neg(), np.negative, -2),
    (lambda x: x.abs(), np.abs, -2),
    (lambda x: abs(x), np.abs, -2),
    (lambda x: x.exp(), np.exp, -2),
    (lambda x: x.log(), np.log, 0.5),
    (lambda x: x.sqrt(), np.sqrt, 0.5),
    (lambda x: x.sin(), np.sin, -2),
    (lambda x: x.cos(), np.cos, -2),
    (lambda x: x.tanh(), np.tanh, -2),
    (lambda x: x.sigmoid(), lambda x: 1 / (1 + np.exp(-x)), -2),
    (lambda x: x.relu(), lambda x: np.maximum(x, 0), -2),
    (lambda x: x.square(), np.square, -2),
    (lambda x: x.reciprocal(), np.reciprocal, 0.5),
], ids=["neg", "neg_method", "abs", "abs_builtin", "exp", "log", "sqrt", "sin", "cos", "tanh",
        "sigmoid", "relu", "square", "reciprocal"])
def test_unary(shape, fn, np_fn, low):
    check_op(fn, shape, np_fn=np_fn, low=low, double=True)


def test_erf():
    check_op(lambda x: x.erf(), (2, 3), np_fn=ERF, double=True, low=-3,
             high=3)


def test_gelu():
    check_op(lambda x: E.Gelu.apply(x), (2, 3), torch_fn=nnf("gelu"), double=True, low=-3,
             high=3, np_fn=lambda x: 0.5 * x * (1 + ERF(x / np.sqrt(2))))
    check_op(lambda x: E.Gelu.apply(x, approximate="tanh"), (2, 3),
             torch_fn=nnf("gelu", approximate="tanh"), double=True, low=-3, high=3)


def test_leaky_relu():
    check_op(lambda x: E.LeakyRelu.apply(x), (2, 3), torch_fn=nnf("leaky_relu"),
             np_fn=lambda x: np.where(x > 0, x, 0.01 * x))
    check_op(lambda x: E.LeakyRelu.apply(x, negative_slope=0.2), (), double=True,
             torch_fn=nnf("leaky_relu", 0.2), np_fn=lambda x: np.where(x > 0, x, 0.2 * x))


def test_silu():
    check_op(lambda x: E.Silu.apply(x), (2, 3), torch_fn=nnf("silu"), double=True,
             np_fn=lambda x: x / (1 + np.exp(-x)))


@pytest.mark.parametrize("kwargs", [{"min": -0.5}, {"max": 0.5}, {"min": -0.5, "max": 0.5}])
def test_clamp(kwargs):
    lo, hi = kwargs.get("min"), kwargs.get("max")
    check_op(lambda x: x.clamp(**kwargs), (3, 4), np_fn=lambda x: np.clip(x, lo, hi))
    check_op(lambda x: lib(x).clip(x, **kwargs), (), np_fn=lambda x: np.clip(x, lo, hi))


def test_clamp_tensor_bounds():
    check_op(lambda x, lo, hi: x.clamp(lo, hi), (3, 4), (4,), (3, 1), np_fn=lambda x, lo, hi:
             np.minimum(np.maximum(x, lo), hi), double=True)
    check_op(lambda x, lo: x.clamp(min=lo), (3, 4), (), np_fn=np.maximum)
    check_op(lambda x, hi: lib(x).clamp(x, max=hi), (), (2,), np_fn=np.minimum)
    check_op(lambda x, lo: x.clamp_min(lo), (3,), (3,), np_fn=np.maximum)
    check_op(lambda x, hi: x.clamp_max(hi), (3,), (2, 1), np_fn=np.minimum)


def test_clamp_positional_and_helpers():
    check_op(lambda x: x.clamp(-1, 1), (5,), np_fn=lambda x: np.clip(x, -1, 1))
    check_op(lambda x: x.clamp_min(0.1), (5,), np_fn=lambda x: np.maximum(x, 0.1))
    check_op(lambda x: x.clamp_max(0.1), (5,), np_fn=lambda x: np.minimum(x, 0.1))


# ---- reductions -----------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs", [
    {}, {"dim": 1}, {"dim": -1, "keepdim": True}, {"dim": (0, 2)},
    {"dim": (-1, 0), "keepdim": True},
], ids=["full", "dim", "neg_keepdim", "tuple", "tuple_neg_keepdim"])
def test_sum_mean(kwargs):
    axis, keep = kwargs.get("dim"), kwargs.get("keepdim", False)
    check_op(lambda x: x.sum(**kwargs), (2, 3, 4), double=True,
             np_fn=lambda x: np.sum(x, axis=axis, keepdims=keep))
    check_op(lambda x: x.mean(**kwargs), (2, 3, 4), double=True,
             np_fn=lambda x: np.mean(x, axis=axis, keepdims=keep))


def test_sum_mean_0d():
    check_op(lambda x: x.sum(), (), np_fn=np.sum, double=True)
    check_op(lambda x: x.mean(), (), np_fn=np.mean, double=True)
    check_op(lambda x: x.sum(0), (), np_fn=np.sum)
    check_op(lambda x: (x * x).sum(dim=1) * x.mean(0), (3, 3), double=True)


@pytest.mark.parametrize("kwargs", [
    {}, {"dim": 1}, {"dim": -1, "keepdim": True}, {"dim": (0, 2)}, {"dim": 1, "correction": 0},
    {"dim": 1, "unbiased": False},
], ids=["full", "dim", "neg_keepdim", "tuple", "correction0", "biased"])
def test_var_std(kwargs):
    axis, keep = kwargs.get("dim"), kwargs.get("keepdim", False)
    ddof = 0 if kwargs.get("correction") == 0 or kwargs.get("unbiased") is False else 1
    check_op(lambda x: x.var(**kwargs), (2, 3, 4), double=True,
             np_fn=lambda x: np.var(x, axis=axis, ddof=ddof, keepdims=keep))
    check_op(lambda x: x.std(**kwargs), (2, 3, 4), double=True,
             np_fn=lambda x: np.std(x, axis=axis, ddof=ddof, keepdims=keep))


@pytest.mark.parametrize("method, np_fn", [("amax", np.max), ("amin", np.min)])
@pytest.mark.parametrize("kwargs", [
    {}, {"dim": 1}, {"dim": -1, "keepdim": True}, {"dim": (0, 2)},
], ids=["full", "dim", "neg_keepdim", "tuple"])
def test_amax_amin(method, np_fn, kwargs):
    axis, keep = kwargs.get("dim"), kwargs.get("keepdim", False)
    check_op(lambda x: getattr(x, method)(**kwargs), (2, 3, 4),
             np_fn=lambda x: np_fn(x, axis=axis, keepdims=keep))


def test_max_min_full():
    check_op(lambda x: x.max(), (2, 3, 4), np_fn=np.max)
    check_op(lambda x: x.min(), (2, 3, 4), np_fn=np.min)
    check_op(lambda x: x.max(), (), np_fn=np.max)


@pytest.mark.parametrize("dim, keepdim", [(1, False), (-1, True), (0, False)])
def test_max_min_dim(dim, keepdim):
    def np_max(x):
        return (np.max(x, axis=dim, keepdims=keepdim),
                np.expand_dims(np.argmax(x, axis=dim), dim) if keepdim else np.argmax(x, dim))

    def np_min(x):
        return (np.min(x, axis=dim, keepdims=keepdim),
                np.expand_dims(np.argmin(x, axis=dim), dim) if keepdim else np.argmin(x, dim))

    check_op(lambda x: tuple(x.max(dim, keepdim)), (3, 4, 2), np_fn=np_max)
    check_op(lambda x: tuple(x.min(dim=dim, keepdim=keepdim)), (3, 4, 2), np_fn=np_min)
    check_op(lambda x: x.max(dim).values * 2, (3, 4, 2), np_fn=lambda x: 2 * np.max(x, dim))


def test_max_ties_share_the_gradient():
    check_op(lambda x: x.amax(dim=1), np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]]), grad=False,
             np_fn=lambda x: x.max(1))
    x = disthook.tensor([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]], requires_grad=True)
    x.amax(dim=1).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [[0, 0.5, 0.5], [1 / 3, 1 / 3, 1 / 3]])


@pytest.mark.parametrize("kwargs", [{}, {"dim": 1}, {"dim": -1, "keepdim": True}],
                         ids=["full", "dim", "neg_keepdim"])
def test_prod(kwargs):
    axis, keep = kwargs.get("dim"), kwargs.get("keepdim", False)
    check_op(lambda x: x.prod(**kwargs), (2, 3, 4), low=0.5,
             np_fn=lambda x: np.prod(x, axis=axis, keepdims=keep))


@pytest.mark.parametrize("x", [
    [[2.0, 0.0, 3.0], [1.5, -2.0, 0.5]], [[0.0, 0.0, 3.0], [1.5, -2.0, 0.5]],
    [[0.0, 0.0, 0.0], [0.0, -2.0, 0.5]],
], ids=["one_zero", "two_zeros", "many_zeros"])
def test_prod_with_zeros(x):
    x = np.array(x)
    check_op(lambda t: t.prod(), x, np_fn=np.prod, double=True)
    check_op(lambda t: t.prod(1), x, np_fn=lambda a: np.prod(a, 1), double=True)
    check_op(lambda t: t.prod(0, keepdim=True), x, np_fn=lambda a: np.prod(a, 0, keepdims=True),
             double=True)


@pytest.mark.parametrize("dim", [0, -1])
def test_softmax_log_softmax(dim):
    check_op(lambda x: x.softmax(dim), (3, 4), double=True,
             np_fn=lambda x: np.exp(x) / np.exp(x).sum(dim, keepdims=True))
    check_op(lambda x: x.log_softmax(dim=dim), (3, 4), double=True,
             np_fn=lambda x: x - np.log(np.exp(x).sum(dim, keepdims=True)))
    check_op(lambda x: lib(x).softmax(x, dim), (2, 3, 4), double=True)


def test_reductions_over_an_empty_dim():
    check_op(lambda x: x.sum(1), (2, 0), np_fn=lambda x: x.sum(1))
    check_op(lambda x: x.prod(1), (2, 0), np_fn=lambda x: x.prod(1))
    check_op(lambda x: x.amax(1), (0, 3), np_fn=lambda x: x.max(1))
    check_op(lambda x: x.logsumexp(1), (2, 0), np_fn=lambda x: np.full(2, -np.inf), grad=False)
    check_op(lambda x: x.softmax(1), (2, 0), np_fn=lambda x: x)
    check_op(lambda x: x.cumsum(1), (2, 0), np_fn=lambda x: x)
    check_op(lambda x: x.norm(dim=1), (2, 0), np_fn=lambda x: np.zeros(2))


def test_softmax_large_values_stay_finite():
    check_op(lambda x: x.softmax(-1), np.array([[1000.0, 1001.0, 999.0]]),
             np_fn=lambda x: np.exp(x - 1001) / np.exp(x - 1001).sum())


@pytest.mark.parametrize("kwargs", [{"dim": 1}, {"dim": -1, "keepdim": True}, {"dim": (0, 2)}],
                         ids=["dim", "neg_keepdim", "tuple"])
def test_logsumexp(kwargs):
    axis, keep = kwargs["dim"], kwargs.get("keepdim", False)
    check_op(lambda x: x.logsumexp(**kwargs), (2, 3, 4), double=True,
             np_fn=lambda x: np.log(np.exp(x).sum(axis=axis, keepdims=keep)))


def test_cumsum():
    check_op(lambda x: x.cumsum(1), (3, 4), np_fn=lambda x: np.cumsum(x, 1), double=True)
    check_op(lambda x: x.cumsum(dim=0), (3, 2, 2), np_fn=lambda x: np.cumsum(x, 0))
    check_op(lambda x: x.cumsum(-1), (5,), np_fn=np.cumsum)


@pytest.mark.parametrize("args, np_fn", [
    ((), lambda x: np.sqrt((x * x).sum())),
    ((1,), lambda x: np.abs(x).sum()),
    ((3,), lambda x: (np.abs(x) ** 3).sum() ** (1 / 3)),
    ((float("inf"),), lambda x: np.abs(x).max()),
    ((2, 1), lambda x: np.sqrt((x * x).sum(1))),
    ((2, -1, True), lambda x: np.sqrt((x * x).sum(-1, keepdims=True))),
], ids=["fro", "l1", "l3", "inf", "dim", "keepdim"])
def test_norm(args, np_fn):
    check_op(lambda x: x.norm(*args), (3, 4), np_fn=np_fn, double=True)


# ---- shape ----------------------------------------------------------------------------------

def test_reshape_view():
    check_op(lambda x: x.reshape(4, 3), (2, 6), np_fn=lambda x: x.reshape(4, 3))
    check_op(lambda x: x.reshape(-1), (2, 3), np_fn=lambda x: x.reshape(-1), double=True)
    check_op(lambda x: x.view(3, -1, 2), (2, 6), np_fn=lambda x: x.reshape(3, -1, 2))
    check_op(lambda x: x.view(1, 1), (), np_fn=lambda x: x.reshape(1, 1))
    check_op(lambda x: x.reshape(()), (1,), np_fn=lambda x: x.reshape(()))
    check_op(lambda x: x.t().reshape(6), (2, 3), np_fn=lambda x: x.T.reshape(6))


def test_flatten():
    check_op(lambda x: x.flatten(), (2, 3, 4), np_fn=lambda x: x.reshape(-1))
    check_op(lambda x: x.flatten(1), (2, 3, 4), np_fn=lambda x: x.reshape(2, 12))
    check_op(lambda x: x.flatten(0, -2), (2, 3, 4), np_fn=lambda x: x.reshape(6, 4))
    check_op(lambda x: x.flatten(), (), np_fn=lambda x: x.reshape(1))


def test_squeeze_unsqueeze():
    check_op(lambda x: x.squeeze(), (1, 3, 1), np_fn=np.squeeze)
    check_op(lambda x: x.squeeze(-1), (1, 3, 1), np_fn=lambda x: x.squeeze(-1))
    check_op(lambda x: x.squeeze(1), (1, 3, 1), np_fn=lambda x: x)  # not size 1: no-op
    check_op(lambda x: x.squeeze((0, 2)), (1, 3, 1), np_fn=np.squeeze)
    check_op(lambda x: x.unsqueeze(0), (2, 3), np_fn=lambda x: x[None])
    check_op(lambda x: x.unsqueeze(-1), (2, 3), np_fn=lambda x: x[..., None])
    check_op(lambda x: x.unsqueeze(0), (), np_fn=lambda x: x.reshape(1))
    check_op(lambda x: x.squeeze(0), (), np_fn=lambda x: x)


def test_permute_transpose_t():
    check_op(lambda x: x.permute(2, 0, 1), (2, 3, 4), np_fn=lambda x: x.transpose(2, 0, 1))
    check_op(lambda x: x.permute((-1, 0, 1)), (2, 3, 4), np_fn=lambda x: x.transpose(2, 0, 1))
    check_op(lambda x: x.transpose(0, -1), (2, 3, 4), np_fn=lambda x: x.swapaxes(0, 2))
    check_op(lambda x: x.t(), (2, 3), np_fn=lambda x: x.T, double=True)
    check_op(lambda x: x.t(), (3,), np_fn=lambda x: x)
    check_op(lambda x: x.T, (2, 3), np_fn=lambda x: x.T)
    check_op(lambda x: x.mT, (2, 3, 4), np_fn=lambda x: x.swapaxes(-1, -2))


def test_expand_repeat():
    check_op(lambda x: x.expand(2, 3, 4), (3, 1), np_fn=lambda x: np.broadcast_to(x, (2, 3, 4)))
    check_op(lambda x: x.expand(-1, 4), (3, 1), np_fn=lambda x: np.broadcast_to(x, (3, 4)))
    check_op(lambda x: x.expand(5), (), np_fn=lambda x: np.broadcast_to(x, (5,)))
    check_op(lambda x: x.repeat(2, 3), (2, 3), np_fn=lambda x: np.tile(x, (2, 3)))
    check_op(lambda x: x.repeat(2, 1, 2), (3, 2), np_fn=lambda x: np.tile(x, (2, 1, 2)))


# ---- indexing -------------------------------------------------------------------------------

@pytest.mark.parametrize("index", [
    1, -1, slice(1, 3), slice(None, None, 2), slice(0, 4, 3),
    (1, 2), (-1, slice(None)), (slice(None), 0), (Ellipsis, 1), (None,), (slice(None), None),
    (1, None, slice(1, None)), (Ellipsis,), (slice(None),), (0, Ellipsis, None),
], ids=str)
def test_getitem_basic(index):
    check_op(lambda x: x[index], (4, 3, 2), np_fn=lambda x: x[index])


def test_getitem_0d_result():
    check_op(lambda x: x[2], (3,), np_fn=lambda x: x[2], double=True)


def test_getitem_bool_mask():
    mask = np.array([[True, False, True], [False, False, True]])
    check_op(lambda x, m: x[m], (2, 3), mask, np_fn=lambda x, m: x[m])
    check_op(lambda x, m: x[m], (2, 3), np.array([False, True]), np_fn=lambda x, m: x[m])
    check_op(lambda x: x[x > 0], (2, 3), np_fn=lambda x: x[x > 0])


def test_getitem_integer_arrays_with_repeats():
    idx = np.array([0, 2, 2, 0, 1])
    check_op(lambda x, i: x[i], (3, 2), idx, np_fn=lambda x, i: x[i], double=True)
    check_op(lambda x, i: x[:, i], (2, 3), idx, np_fn=lambda x, i: x[:, i])
    check_op(lambda x, i: x[i, 1:], (3, 3), idx, np_fn=lambda x, i: x[i, 1:])
    check_op(lambda x, i, j: x[i, j], (3, 4), np.array([0, 2, 2]), np.array([-1, 0, -1]),
             np_fn=lambda x, i, j: x[i, j])
    check_op(lambda x, i: x[i], (3, 2), np.array([[0, 1], [1, 1]]), np_fn=lambda x, i: x[i])


def test_getitem_list_and_tensor_indices():
    check_op(lambda x: x[[0, 0, 2]], (3, 2), np_fn=lambda x: x[[0, 0, 2]])
    check_op(lambda x: x[[-1, 1], [0, 0]], (3, 2), np_fn=lambda x: x[[-1, 1], [0, 0]])
    check_op(lambda x: x[lib(x).tensor([1, 1])], (3, 2), np_fn=lambda x: x[[1, 1]])


def test_setitem_under_no_grad():
    x = disthook.zeros(2, 3)
    with disthook.no_grad():
        x[0] = 1.5
        x[1, 1:] = disthook.tensor([2.0, 3.0])
        x[x > 2.5] = -1
    np.testing.assert_array_equal(x.numpy(), [[1.5, 1.5, 1.5], [0, 2, -1]])
    w = disthook.ones(3, requires_grad=True)
    with disthook.no_grad():
        w[1] = 5.0
    assert w.is_leaf and w.requires_grad and w.grad_fn is None
    np.testing.assert_array_equal(w.detach().numpy(), [1, 5, 1])


# ---- joining and splitting ------------------------------------------------------------------

def test_cat():
    check_op(lambda x, y: lib(x).cat([x, y]), (2, 3), (4, 3),
             np_fn=lambda x, y: np.concatenate([x, y]))
    check_op(lambda x, y: lib(x).cat((x, y), dim=-1), (2, 1), (2, 3),
             np_fn=lambda x, y: np.concatenate([x, y], -1), double=True)
    check_op(lambda x, y: lib(x).cat([x, y, x], 1), (2, 2, 1), (2, 1, 1),
             np_fn=lambda x, y: np.concatenate([x, y, x], 1))


def test_stack():
    check_op(lambda x, y: lib(x).stack([x, y]), (2, 3), (2, 3), np_fn=lambda x, y: np.stack([x, y]))
    check_op(lambda x, y: lib(x).stack([x, y], dim=-1), (2, 3), (2, 3),
             np_fn=lambda x, y: np.stack([x, y], -1), double=True)
    check_op(lambda x, y: lib(x).stack([x, y, x], -1), (), (),
             np_fn=lambda x, y: np.stack([x, y, x]))


def test_split_chunk_unbind():
    check_op(lambda x: x.split(2), (5, 3), np_fn=lambda x: np.split(x, [2, 4]))
    check_op(lambda x: x.split([1, 3], dim=1), (2, 4), np_fn=lambda x: np.split(x, [1], 1))
    check_op(lambda x: x.split(2, -1)[1], (2, 4), np_fn=lambda x: x[:, 2:])
    check_op(lambda x: x.chunk(3), (6, 2), np_fn=lambda x: np.split(x, 3))
    check_op(lambda x: x.chunk(2, 1), (2, 5), np_fn=lambda x: np.split(x, [3], 1))
    check_op(lambda x: x.unbind(), (3, 2), np_fn=lambda x: list(x))
    check_op(lambda x: x.unbind(1)[1], (3, 2), np_fn=lambda x: x[:, 1])


def test_narrow():
    check_op(lambda x: x.narrow(1, 1, 2), (3, 4), np_fn=lambda x: x[:, 1:3])
    check_op(lambda x: x.narrow(-1, 0, 1), (3, 4), np_fn=lambda x: x[:, :1])
    check_op(lambda x: x.narrow(0, -2, 2), (3, 4), np_fn=lambda x: x[1:])
    check_op(lambda x: x.narrow(0, 3, 0), (3, 4), np_fn=lambda x: x[3:])


def test_where():
    cond = np.array([[True, False, True], [False, True, False]])
    check_op(lambda c, x, y: lib(x).where(c, x, y), cond, (2, 3), (2, 3), np_fn=np.where)
    check_op(lambda c, x, y: lib(x).where(c, x, y), cond, (3,), (2, 1), np_fn=np.where,
             double=True)
    check_op(lambda x, y: lib(x).where(x > 0, x, y), (), (2, 2),
             np_fn=lambda x, y: np.where(x > 0, x, y))
    check_op(lambda x, y: x.where(y > 0, y), (2, 2), (2, 2),
             np_fn=lambda x, y: np.where(y > 0, x, y))


def test_masked_fill():
    mask = np.array([[True, False, True], [False, True, False]])
    check_op(lambda x, m: x.masked_fill(m, -1.5), (2, 3), mask,
             np_fn=lambda x, m: np.where(m, -1.5, x))
    check_op(lambda x, m: x.masked_fill(m, 0), (2, 3), np.array([True, False, True]),
             np_fn=lambda x, m: np.where(m, 0, x))
    check_op(lambda x: x.masked_fill(x < 0, 0.0), (4,), np_fn=lambda x: np.maximum(x, 0))


def test_gather():
    index = np.array([[0, 0], [1, 0], [2, 2]])
    check_op(lambda x, i: x.gather(1, i), (3, 3), index,
             np_fn=lambda x, i: np.take_along_axis(x, i, 1), double=True)
    check_op(lambda x, i: lib(x).gather(x, 0, i), (3, 3), index,
             np_fn=lambda x, i: np.take_along_axis(x[:, :2], i, 0))  # index narrower than x
    check_op(lambda x, i: x.gather(-1, i), (2, 4), np.array([[3], [0]]),
             np_fn=lambda x, i: np.take_along_axis(x, i, -1))


# ---- dtypes (torch's promotion rules) -------------------------------------------------------

def test_default_dtype_is_float32():
    assert disthook.tensor([1.0, 2.0]).dtype == disthook.float32
    assert disthook.ones(2).dtype == disthook.float32
    assert disthook.tensor(1.5).dtype == disthook.float32
    assert disthook.tensor([1, 2]).dtype == disthook.int64


# (fn of the torch-like module, dtype name): torch's promotion rules; tests/parity checks them
# against torch itself
PROMOTION = [
    (lambda t: t.tensor([1, 2]) * 1.5, "float32"),
    (lambda t: 1.5 + t.tensor([1, 2]), "float32"),
    (lambda t: t.tensor([1, 2]) + 1, "int64"),
    (lambda t: t.tensor([True, False]) + 1, "int64"),
    (lambda t: t.tensor([True, False]) * 1.5, "float32"),
    (lambda t: t.ones(2) + t.ones(2, dtype=t.float64), "float64"),
    (lambda t: t.ones(2, dtype=t.float64) * t.ones(2), "float64"),
    (lambda t: t.tensor(2.0, dtype=t.float64) * t.ones(2), "float32"),
    (lambda t: t.ones(2) * t.tensor(2.0, dtype=t.float64), "float32"),
    (lambda t: t.ones(()) * t.tensor(2.0, dtype=t.float64), "float64"),
    (lambda t: t.tensor(2) * t.ones(2), "float32"),
    (lambda t: t.tensor(2.0, dtype=t.float64) * t.tensor([1, 2]), "float64"),
    (lambda t: t.tensor([1, 2], dtype=t.int32) + t.tensor([1, 2]), "int64"),
    (lambda t: t.tensor([1, 2], dtype=t.int32) + 5, "int32"),
    (lambda t: t.tensor([1, 2]) / t.tensor([2, 2]), "float32"),
    (lambda t: t.tensor([1, 2]) / 2, "float32"),
    (lambda t: 1 / t.tensor([1, 2]), "float32"),
    (lambda t: t.ones(2, dtype=t.float64) / 2, "float64"),
    (lambda t: t.tensor([1, 2]) ** 2, "int64"),
    (lambda t: t.tensor([1, 2]) ** 0.5, "float32"),
    (lambda t: 2 ** t.tensor([1, 2]), "int64"),
    (lambda t: 2.5 ** t.tensor([1, 2]), "float32"),
    (lambda t: t.tensor([1, 2]).exp(), "float32"),
    (lambda t: t.tensor([1, 2]).sum(), "int64"),
    (lambda t: t.tensor([True, True]).sum(), "int64"),
    (lambda t: t.ones(2, dtype=t.float64).mean(), "float64"),
    (lambda t: t.where(t.tensor([True]), t.ones(1), 2.0), "float32"),
    (lambda t: t.where(t.tensor([True]), 2.5, t.tensor([1])), "float32"),
    (lambda t: t.where(t.tensor([True]), t.tensor([1]), 2), "int64"),
    (lambda t: t.where(t.tensor([True]), 1, 0.5), "float32"),
    (lambda t: t.where(t.tensor([True]), 1, 0), "int64"),
    (lambda t: t.cat([t.ones(1), t.ones(1, dtype=t.float64)]), "float64"),
    (lambda t: t.tensor([1, 2]) * t.tensor(2.5, dtype=t.float64), "float64"),
    (lambda t: t.tensor([1, 2], dtype=t.uint8) + t.tensor([1], dtype=t.int8), "int16"),
    (lambda t: t.tensor([True]) + t.tensor([True]), "bool"),
    (lambda t: t.ones(2, dtype=t.float16) + t.ones(2), "float32"),
    (lambda t: t.ones(2, dtype=t.float16) * 2.5, "float16"),
    (lambda t: np.float64(2.0) * t.ones(2), "float32"),
    (lambda t: np.int64(2) - t.tensor([1, 2]), "int64"),
    (lambda t: t.tensor([1, 2]).clamp(0.5, 1.5), "float32"),
    (lambda t: t.tensor([1, 2]).clamp(max=1), "int64"),
    (lambda t: t.tensor([1, 2], dtype=t.uint8).prod(), "int64"),
    (lambda t: t.tensor([1, 2], dtype=t.int32).cumsum(0), "int64"),
    (lambda t: t.tensor([True, False]) ** 2, "int64"),
    (lambda t: 2 ** t.tensor([True, False]), "int64"),
]


@pytest.mark.parametrize("make, want", PROMOTION)
def test_promotion(make, want):
    assert make(disthook).dtype == getattr(disthook, want)


@pytest.mark.parametrize("fn", [
    lambda x: x * 2.5 + 1, lambda x: 2.5 / (x + 3), lambda x: x.abs() ** 2.5, lambda x: 2.5 ** x,
    lambda x: x.exp(), lambda x: (x + 3).log(), lambda x: (x + 3).sqrt(), lambda x: x.tanh(),
    lambda x: x.sigmoid(), lambda x: x.erf(), lambda x: E.Gelu.apply(x),
    lambda x: E.Gelu.apply(x, approximate="tanh"), lambda x: E.Silu.apply(x),
    lambda x: E.LeakyRelu.apply(x, negative_slope=0.2), lambda x: x.clamp(-0.5, 0.5),
    lambda x: x.mean(1), lambda x: x.var(0), lambda x: x.std(), lambda x: x.prod(1),
    lambda x: x.softmax(1), lambda x: x.log_softmax(0), lambda x: x.logsumexp(1),
    lambda x: x.norm(), lambda x: x.norm(3, dim=1), lambda x: x.cumsum(1), lambda x: x @ x.t(),
    lambda x: x.amax(1), lambda x: x.max(0).values,
])
def test_float32_stays_float32(fn):
    x = disthook.tensor([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]], requires_grad=True)
    out = fn(x)
    assert out.dtype == disthook.float32
    out.sum().backward()
    assert x.grad.dtype == disthook.float32


def test_integer_powers_with_negative_exponents_truncate():
    x = disthook.tensor([-2, -1, 0, 1, 3])
    assert (2 ** x).tolist() == [0, 0, 1, 2, 8]
    assert ((-1) ** x).tolist() == [1, -1, 1, -1, -1]


def test_int_true_division_values():
    out = disthook.tensor([1, 3]) / disthook.tensor([2, 2])
    np.testing.assert_array_equal(out.numpy(), np.array([0.5, 1.5], dtype=np.float32))


@pytest.mark.parametrize("compare, np_compare", [
    (lambda x, y: x == y, np.equal), (lambda x, y: x != y, np.not_equal),
    (lambda x, y: x < y, np.less), (lambda x, y: x <= y, np.less_equal),
    (lambda x, y: x > y, np.greater), (lambda x, y: x >= y, np.greater_equal),
    (lambda x, y: x.eq(y), np.equal), (lambda x, y: x.gt(0.5), lambda x, y: x > 0.5),
], ids=["eq", "ne", "lt", "le", "gt", "ge", "eq_method", "gt_scalar"])
def test_comparisons_are_bool_without_grad_fn(compare, np_compare):
    x = disthook.tensor([0.0, 1.0, 2.0], requires_grad=True)
    y = disthook.tensor([1.0, 1.0, 1.0], requires_grad=True)
    out = compare(x, y)
    assert out.dtype == disthook.bool
    assert out.grad_fn is None and not out.requires_grad
    check_op(compare, (2, 3), (3,), np_fn=np_compare, grad=False)


# ---- gradients at kinks, ties and zeros: torch's conventions (finite differences can't tell) --

@pytest.mark.parametrize("fn, inputs, grads", [
    (lambda x, y: x.maximum(y), [[1.0, 2.0, 3.0], [1.0, 0.0, 3.0]],
     [[0.5, 1.0, 0.5], [0.5, 0.0, 0.5]]),
    (lambda x, y: x.minimum(y), [[1.0, 2.0, 3.0], [1.0, 0.0, 3.0]],
     [[0.5, 0.0, 0.5], [0.5, 1.0, 0.5]]),
    (lambda x: x.clamp(0.0, 1.0), [[0.0, 0.5, 1.0, 2.0]], [[1.0, 1.0, 1.0, 0.0]]),
    (lambda x, lo, hi: x.clamp(lo, hi), [[0.0, 1.0, -1.0, 3.0], [0.0] * 4, 2.0],
     [[1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0], 1.0]),
    (lambda x: x.relu(), [[0.0, 0.5, -1.0]], [[0.0, 1.0, 0.0]]),
    (lambda x: x.abs(), [[0.0, 0.5, -1.0]], [[0.0, 1.0, -1.0]]),
    (lambda x: x.max(), [[1.0, 3.0, 3.0]], [[0.0, 0.5, 0.5]]),
    (lambda x: x.min(), [[1.0, 1.0, 3.0]], [[0.5, 0.5, 0.0]]),
    (lambda x: x.max(0).values, [[1.0, 3.0, 3.0]], [[0.0, 1.0, 0.0]]),
    (lambda x: x.norm(), [[0.0, 0.0]], [[0.0, 0.0]]),
    (lambda x: x.norm(float("inf")), [[1.0, -3.0, 3.0]], [[0.0, -0.5, 0.5]]),
    (lambda x: x.std(), [[1.0, 1.0]], [[0.0, 0.0]]),
    (lambda x: x.prod(), [[0.0, 0.0, 2.0]], [[0.0, 0.0, 0.0]]),
    (lambda x, y: x ** y, [[0.0, 2.0], [2.0, 0.0]], [[0.0, 0.0], [0.0, 0.6931471805599453]]),
    (lambda x: 0.0 ** x, [[0.0, 2.0]], [[0.0, 0.0]]),
    (lambda x: x.softmax(0), [[-float("inf"), 0.0]], [[0.0, 0.0]]),
    (lambda x: x.logsumexp(0), [[-float("inf"), 0.0]], [[0.0, 1.0]]),
    (lambda x: x.sigmoid(), [[-800.0, 800.0]], [[0.0, 0.0]]),
])
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy on the way to an inf or nan
def test_gradient_conventions(fn, inputs, grads):
    xs = [disthook.tensor(v, dtype=disthook.float64, requires_grad=True) for v in inputs]
    fn(*xs).sum().backward()
    for x, want in zip(xs, grads):
        np.testing.assert_allclose(x.grad.numpy(), want)


# ---- node names (torch's, so printed graphs match; checked against torch in check_op) ----

@pytest.mark.parametrize("fn, name", [
    (lambda x: 2.0 - x, "RsubBackward1"),
    (lambda x: 1 / x, "MulBackward0"),
    (lambda x: x.reciprocal(), "ReciprocalBackward0"),
    (lambda x: x.square(), "PowBackward0"),
    (lambda x: x.clamp(min=0.0), "ClampBackward1"),
    (lambda x: x.clamp_min(0.0), "ClampMinBackward0"),
    (lambda x: x.clamp_max(0.0), "ClampMaxBackward0"),
    (lambda x: x[0], "SelectBackward0"),
    (lambda x: x[0, 1], "SelectBackward0"),
    (lambda x: x[1, :], "SelectBackward0"),
    (lambda x: x[:, None], "UnsqueezeBackward0"),
    (lambda x: x[None, 1:], "SliceBackward0"),
    (lambda x: x[:], "SliceBackward0"),
    (lambda x: x[..., :], "AliasBackward0"),
    (lambda x: x[[0, 0]], "IndexBackward0"),
    (lambda x: x.select(1, 0), "SelectBackward0"),
    (lambda x: x.narrow(1, 0, 1), "SliceBackward0"),
    (lambda x: x.unbind(1)[0], "UnbindBackward0"),
    (lambda x: x.split(1)[0], "SplitBackward0"),
    (lambda x: x.split([1, 1])[0], "SplitWithSizesBackward0"),
    (lambda x: x.chunk(2)[0], "SplitBackward0"),
    (lambda x: x[None].squeeze(), "SqueezeBackward0"),
    (lambda x: x[None].squeeze(0), "SqueezeBackward1"),
    (lambda x: x[None].squeeze((0,)), "SqueezeBackward2"),
    (lambda x: x.reshape(4), "ViewBackward0"),
    (lambda x: x.t().reshape(4), "UnsafeViewBackward0"),
    (lambda x: x[0].t(), "TBackward0"),
    (lambda x: x[0].T, "PermuteBackward0"),
    (lambda x: x.norm(), "LinalgVectorNormBackward0"),
    (lambda x: x.norm(1, dim=0), "LinalgVectorNormBackward0"),
    (lambda x: x.cumsum(0), "CumsumBackward0"),
    (lambda x: x.sum(()), "SumBackward1"),
    (lambda x: x.sum(), "SumBackward0"),
    (lambda x: x[0, 0].sum(0), "SumBackward1"),
    (lambda x: x.mean(dim=None, keepdim=True), "MeanBackward1"),
    (lambda x: x.prod(), "ProdBackward0"),
    (lambda x: x.max(0).values, "MaxBackward0"),
    (lambda x: x.amax(), "AmaxBackward0"),
    (lambda x: 2 ** x, "PowBackward2"),
    (lambda x: x ** x, "PowBackward1"),
])
@pytest.mark.filterwarnings("ignore:The use of `x.T`")  # torch deprecates .T below 2-D
def test_node_names(fn, name):
    x = disthook.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    assert fn(x).grad_fn.name() == name
    check_op(fn, (2, 2), low=0.5)
