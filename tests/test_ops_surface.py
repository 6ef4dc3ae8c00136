"""The torch surface of issue 20 through check_op: sorting and selection, triangles, rolls,
repeats, scatter, einsum, fused multiply-adds, the norms and var_mean/std_mean; and
multinomial's draws (no gradient)."""
import numpy as np
import pytest
from helpers import check_op, lib

import disthook

TIES = np.array([[1.0, 3.0, 3.0, 0.5], [2.0, 2.0, -1.0, 2.0]])
INDEX = np.array([[0, 1, 2, 0], [2, 0, 0, 1]])  # into a (3, 4) tensor along dim 0


# ---- triangles ------------------------------------------------------------------------------

@pytest.mark.parametrize("k", [0, 1, -1])
def test_tril_triu(k):
    check_op(lambda x: x.tril(k), (3, 4), np_fn=lambda x: np.tril(x, k), double=True)
    check_op(lambda x: lib(x).triu(x, k), (2, 3, 3), np_fn=lambda x: np.triu(x, k), double=True)
    check_op(lambda x: x.tril(diagonal=k), (3, 4), np_fn=lambda x: np.tril(x, k), double=True)


def test_tril_triu_in_place():
    check_op(lambda x: (x * 1).tril_(1), (3, 3), np_fn=lambda x: np.tril(x, 1))
    check_op(lambda x: (x * 1).triu_(), (3, 3), np_fn=np.triu)


# ---- sorting and selection --------------------------------------------------------------

@pytest.mark.parametrize("kwargs", [{}, {"dim": 0}, {"descending": True},
                                    {"dim": 0, "descending": True, "stable": True}])
def test_sort(kwargs):
    check_op(lambda x: tuple(x.sort(**kwargs)), (3, 4), double=True)
    check_op(lambda x: tuple(lib(x).sort(x, **kwargs)), (3, 4))


def test_sort_ties_stable_and_argsort():
    # (ties have no derivative for finite differences to find: forward and indices only)
    check_op(lambda x: tuple(x.sort(stable=True)), TIES, grad=False,
             np_fn=lambda x: (np.sort(x, kind="stable"), np.argsort(x, kind="stable")))
    check_op(lambda x: tuple(x.sort(descending=True, stable=True)), TIES, grad=False)
    check_op(lambda x: x.argsort(stable=True), TIES,
             np_fn=lambda x: np.argsort(x, kind="stable"))
    check_op(lambda x: lib(x).argsort(x, dim=0, descending=True, stable=True), TIES)
    check_op(lambda x: tuple(x.sort()), (), np_fn=lambda x: (x, np.array(0)))


@pytest.mark.parametrize("kwargs", [{"k": 2}, {"k": 1, "dim": 0}, {"k": 3, "largest": False},
                                    {"k": 4, "dim": -1}, {"k": 0}])
def test_topk(kwargs):
    check_op(lambda x: tuple(x.topk(**kwargs)), (3, 4), double=True)
    check_op(lambda x: tuple(lib(x).topk(x, **kwargs)), (3, 4))


def test_topk_values_of_ties():
    check_op(lambda x: x.topk(2).values, TIES, np_fn=lambda x: -np.sort(-x)[:, :2], grad=False)


# ---- rolls and repeats --------------------------------------------------------------------

@pytest.mark.parametrize("shifts, dims", [(1, 0), (-2, 1), ((1, 2), (0, 1)), (5, None),
                                          (3, -1)])
def test_roll(shifts, dims):
    check_op(lambda x: x.roll(shifts, dims), (3, 4), double=True,
             np_fn=lambda x: np.roll(x, shifts, axis=dims))


@pytest.mark.parametrize("repeats, dim", [(2, None), (3, 0), (2, 1), (0, 1), (1, -1)])
def test_repeat_interleave(repeats, dim):
    check_op(lambda x: x.repeat_interleave(repeats, dim=dim), (3, 4), double=True,
             np_fn=lambda x: np.repeat(x, repeats, axis=dim))


def test_repeat_interleave_tensor_and_index_select():
    counts = [1, 0, 3]
    check_op(lambda x: x.repeat_interleave(lib(x).tensor(counts), dim=0), (3, 4), double=True,
             np_fn=lambda x: np.repeat(x, counts, axis=0))
    check_op(lambda x: lib(x).index_select(x, 1, lib(x).tensor([3, 0, 3])), (3, 4),
             np_fn=lambda x: x[:, [3, 0, 3]], double=True)


# ---- scatter and gather --------------------------------------------------------------------

def test_scatter():
    check_op(lambda x, s: x.scatter(0, lib(x).tensor(INDEX), s), (3, 4), (2, 4), double=True)
    # (a source larger than the index: torch's own backward rejects its gradient's shape)
    check_op(lambda x, s: lib(x).scatter(x, 1, lib(x).tensor(INDEX[:, :2]), s), (3, 4), (3, 5),
             grad=False)
    check_op(lambda x: x.scatter(0, lib(x).tensor(INDEX), 2.5), (3, 4), double=True)
    check_op(lambda x: x.scatter(1, lib(x).tensor(INDEX), value=-1.0), (3, 4))


def test_scatter_add():
    def np_fn(x, s):
        out = x.copy()
        for i, j in np.ndindex(INDEX.shape):
            out[INDEX[i, j], j] += s[i, j]
        return out

    check_op(lambda x, s: x.scatter_add(0, lib(x).tensor(INDEX), s), (3, 4), (2, 4),
             np_fn=np_fn, double=True)
    # a source larger than the index: torch's own backward rejects its gradient's shape
    check_op(lambda x, s: lib(x).scatter_add(x, 0, lib(x).tensor(INDEX), s), (3, 4), (3, 5),
             np_fn=lambda x, s: np_fn(x, s[:2, :4]), grad=False)


def test_scatter_and_scatter_add_in_place():
    check_op(lambda x, s: (x * 1).scatter_(0, lib(x).tensor(INDEX), s), (3, 4), (2, 4))
    check_op(lambda x, s: (x * 1).scatter_add_(0, lib(x).tensor(INDEX), s), (3, 4), (2, 4))
    check_op(lambda x: (x * 1).scatter_(1, lib(x).tensor(INDEX), 0.5), (3, 4))


def test_gather_where_masked_fill_cumsum():
    check_op(lambda x: x.gather(0, lib(x).tensor(INDEX)), (3, 4), double=True)
    check_op(lambda x, y: lib(x).where(x > y, x, y), (3, 4), (4,), double=True)
    check_op(lambda x: lib(x).masked_fill(x, x > 0.5, -1.0), (3, 4), double=True)
    check_op(lambda x: (x * 1).masked_fill_(x < 0, 2.0), (3, 4))
    check_op(lambda x: lib(x).cumsum(x, dim=1), (3, 4), double=True)


# ---- einsum -----------------------------------------------------------------------------------

@pytest.mark.parametrize("equation, shapes", [
    ("ij,jk->ik", [(2, 3), (3, 4)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ij->j", [(3, 4)]),
    ("ii->i", [(3, 3)]),
    ("ii", [(3, 3)]),
    ("ij,ij->i", [(3, 4), (3, 4)]),
    ("i,j->ij", [(3,), (4,)]),
    ("ij,jk", [(2, 3), (3, 4)]),
    ("...ij,...jk->...ik", [(2, 2, 3), (2, 3, 4)]),
    ("bhqd,bhkd->bhqk", [(2, 2, 3, 4), (2, 2, 5, 4)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]),
    ("ijk->", [(2, 3, 4)]),
])
def test_einsum(equation, shapes):
    # torch records einsum as the products and views it lowers to: no node name to match
    check_op(lambda *xs: lib(xs[0]).einsum(equation, *xs), *shapes, double=True,
             np_fn=lambda *xs: np.einsum(equation, *xs), name=False)


def test_einsum_broadcasts_size_one_subscripts():
    check_op(lambda x, y: lib(x).einsum("ij,j->i", x, y), (3, 4), (1,), double=True,
             np_fn=lambda x, y: x.sum(1) * y[0], name=False)


def test_einsum_operands_as_a_list():
    check_op(lambda x, y: lib(x).einsum("ij,kj->ik", [x, y]), (2, 3), (4, 3), name=False,
             np_fn=lambda x, y: x @ y.T)


# ---- fused multiply-adds -------------------------------------------------------------------

@pytest.mark.parametrize("shapes", [((2, 3), (2, 3), (2, 3)), ((3,), (2, 3), (2, 1)),
                                    ((), (), ())])
def test_addcmul_addcdiv(shapes):
    check_op(lambda a, b, c: lib(a).addcmul(a, b, c, value=0.5), *shapes, double=True,
             np_fn=lambda a, b, c: a + 0.5 * b * c)
    check_op(lambda a, b, c: a.addcdiv(b, c, value=-2), *shapes, double=True, low=0.5,
             np_fn=lambda a, b, c: a - 2 * b / c)


def test_addcmul_addcdiv_in_place():
    check_op(lambda a, b, c: (a * 1).addcmul_(b, c, value=3), (2, 3), (3,), (2, 3),
             np_fn=lambda a, b, c: a + 3 * b * c)
    check_op(lambda a, b, c: (a * 1).addcdiv_(b, c), (2, 3), (2, 3), (2, 1), low=0.5,
             np_fn=lambda a, b, c: a + b / c)


# ---- norms and moments ---------------------------------------------------------------------

@pytest.mark.parametrize("kwargs", [{}, {"ord": 1}, {"ord": 3, "dim": 1}, {"ord": float("inf")},
                                    {"dim": (0, 1), "keepdim": True}, {"ord": 0.5, "dim": 0}])
def test_vector_norm(kwargs):
    check_op(lambda x: lib(x).linalg.vector_norm(x, **kwargs), (3, 4), double=True)


@pytest.mark.parametrize("kwargs", [{}, {"ord": 1}, {"ord": -1}, {"ord": float("inf")},
                                    {"ord": "fro", "keepdim": True}, {"dim": (0, 2)}])
def test_matrix_norm(kwargs):
    check_op(lambda x: lib(x).linalg.matrix_norm(x, **kwargs), (2, 3, 4))


@pytest.mark.parametrize("args, kwargs", [((), {}), ((1,), {"dim": 1}), ((), {"ord": "fro"}),
                                          ((), {"ord": float("-inf")}), ((), {"dim": (0, 1)})])
def test_linalg_norm_and_torch_norm(args, kwargs):
    check_op(lambda x: lib(x).linalg.norm(x, *args, **kwargs), (3, 4))
    check_op(lambda x: lib(x).norm(x), (3, 4), np_fn=lambda x: np.sqrt((x * x).sum()))
    check_op(lambda x: lib(x).norm(x, p=1, dim=1, keepdim=True), (3, 4), double=True)


@pytest.mark.parametrize("kwargs", [{}, {"dim": 1}, {"dim": (0, 2), "keepdim": True},
                                    {"dim": 0, "correction": 0}, {"unbiased": False}])
def test_var_mean_std_mean(kwargs):
    check_op(lambda x: lib(x).var_mean(x, **kwargs), (2, 3, 4), double=True)
    check_op(lambda x: lib(x).std_mean(x, **kwargs), (2, 3, 4), double=True)
    check_op(lambda x: lib(x).var_mean(x, **kwargs)[1], (2, 3, 4))


# ---- multinomial --------------------------------------------------------------------------------

def test_multinomial_draws_follow_the_weights():
    disthook.manual_seed(0)
    weights = disthook.tensor([1.0, 0.0, 3.0])
    draws = disthook.multinomial(weights, 20000, replacement=True)
    assert draws.dtype == disthook.int64 and draws.shape == (20000,)
    counts = np.bincount(draws.numpy(), minlength=3) / 20000
    np.testing.assert_allclose(counts, [0.25, 0.0, 0.75], atol=0.02)
    rows = disthook.tensor([[1.0, 1.0, 8.0, 0.0], [0.0, 2.0, 0.0, 2.0]]).multinomial(3)
    assert rows.shape == (2, 3)
    for row in rows.numpy():
        assert len(set(row.tolist())) == 3  # without replacement: each index at most once
    first = disthook.multinomial(disthook.tensor([0.0, 1.0, 0.0, 0.0]), 4)
    assert first[0].item() == 1


def test_multinomial_uses_the_generator():
    g1, g2 = disthook.Generator().manual_seed(7), disthook.Generator().manual_seed(7)
    w = disthook.ones(10)
    a = disthook.multinomial(w, 5, generator=g1)
    b = disthook.multinomial(w, 5, generator=g2)
    assert a.tolist() == b.tolist()


# ---- errors: torch's exception type and message --------------------------------------------

X = lambda t: t.ones(3, 4)  # noqa: E731
ERRORS = [
    ("tril_1d", lambda t: t.ones(3).tril(), RuntimeError,
     "tril: input tensor must have at least 2 dimensions"),
    ("triu_1d", lambda t: t.triu(t.ones(3)), RuntimeError,
     "triu: input tensor must have at least 2 dimensions"),
    ("topk_k", lambda t: X(t).topk(5), RuntimeError, "selected index k out of range"),
    ("topk_neg", lambda t: X(t).topk(-1), RuntimeError, "selected index k out of range"),
    ("sort_dim", lambda t: X(t).sort(dim=3), IndexError,
     "Dimension out of range (expected to be in range of [-2, 1], but got 3)"),
    ("scatter_ndim", lambda t: X(t).scatter(0, t.tensor([0]), X(t)), RuntimeError,
     "Index tensor must have the same number of dimensions as self tensor"),
    ("scatter_dtype", lambda t: X(t).scatter(0, t.tensor([[0]]), X(t).double()), RuntimeError,
     "scatter(): Expected self.dtype to be equal to src.dtype"),
    ("scatter_bounds", lambda t: X(t).scatter(0, t.tensor([[5]]), X(t)), RuntimeError,
     "index 5 is out of bounds for dimension 0 with size 3"),
    ("scatter_size", lambda t: X(t).scatter(0, t.tensor([[0, 0, 0, 0, 0]]), X(t)), RuntimeError,
     "Expected index [1, 5] to be no larger than self [3, 4] apart from dimension 0 and to be "
     "no larger size than src [3, 4]"),
    ("scatter_add_scalar", lambda t: X(t).scatter_add(0, t.tensor([[0]]), 1.0), TypeError,
     "scatter_add(): argument 'src' (position 3) must be Tensor, not float"),
    ("roll_align", lambda t: X(t).roll((1, 2), (0,)), RuntimeError,
     "shifts and dimensions must align. shifts: 2, dims:1"),
    ("roll_dim", lambda t: X(t).roll(1, 5), IndexError,
     "Dimension out of range (expected to be in range of [-2, 1], but got 5)"),
    ("multinomial_negative", lambda t: t.multinomial(-X(t), 2), RuntimeError,
     "probability tensor contains either `inf`, `nan` or element < 0"),
    ("multinomial_zero", lambda t: t.multinomial(t.zeros(2), 1), RuntimeError,
     "invalid multinomial distribution (sum of probabilities <= 0)"),
    ("multinomial_n", lambda t: t.multinomial(t.ones(2), 0), RuntimeError,
     "cannot sample n_sample <= 0 samples"),
    ("multinomial_3d", lambda t: t.multinomial(t.ones(2, 2, 2), 1), RuntimeError,
     "prob_dist must be 1 or 2 dim"),
    ("multinomial_many", lambda t: t.multinomial(t.ones(2), 3), RuntimeError,
     "cannot sample n_sample > prob_dist.size(-1) samples without replacement"),
    ("multinomial_long", lambda t: t.multinomial(t.tensor([1, 2]), 1), RuntimeError,
     "multinomial only supports floating-point dtypes for input, got: Long"),
    ("einsum_sizes", lambda t: t.einsum("ij,jk->ik", X(t), X(t)), RuntimeError,
     "einsum(): subscript j has size 3 for operand 1 which does not broadcast with previously "
     "seen size 4"),
    ("einsum_operands", lambda t: t.einsum("ij,jk->ik", X(t)), RuntimeError,
     "einsum(): fewer operands were provided than specified in the equation"),
    ("einsum_dims", lambda t: t.einsum("ijk,jk->ik", X(t), X(t)), RuntimeError,
     "einsum(): the number of subscripts in the equation (3) does not match the number of "
     "dimensions (2) for operand 0 and no ellipsis was given"),
    ("repeat_interleave_size", lambda t: X(t).repeat_interleave(t.tensor([1, 2]), dim=0),
     RuntimeError, "repeats must have the same size as input along dim, but got "
     "repeats.size(0) = 2 and input.size(0) = 3"),
    ("repeat_interleave_negative", lambda t: X(t).repeat_interleave(-1), RuntimeError,
     "Repeats must be non-negative"),
    ("matrix_norm_1d", lambda t: t.linalg.matrix_norm(t.ones(3)), RuntimeError,
     "linalg.matrix_norm: The input tensor A must have at least 2 dimensions."),
    ("vector_norm_long", lambda t: t.linalg.vector_norm(t.tensor([1, 2])), RuntimeError,
     "linalg.vector_norm: Expected a floating point or complex tensor as input. Got Long"),
    ("var_mean_long", lambda t: t.var_mean(t.tensor([1, 2])), RuntimeError,
     "var_mean only support floating point and complex dtypes"),
]


@pytest.mark.parametrize("fn, exc, message", [c[1:] for c in ERRORS], ids=[c[0] for c in ERRORS])
def test_errors_are_torchs(fn, exc, message):
    with pytest.raises(exc) as info:
        fn(disthook)
    assert type(info.value) is exc and str(info.value) == message
    try:
        import torch
    except ImportError:
        return
    with pytest.raises(exc) as info:
        fn(torch)
    assert type(info.value) is exc and str(info.value) == message
