"""The issue-31 methods and functions on data with many ties and on plain floats, against
torch: dtype, shape and values of every output (indices included, so tie-breaking is torch's;
kthvalue's indices at ties are left out: torch's come from its selection algorithm)."""
import numpy as np
import pytest

import disthook

torch = pytest.importorskip("torch")

_rng = np.random.default_rng(0)
DATA = {"ties": _rng.integers(0, 4, (3, 4, 5)).astype(np.float32),
        "floats": _rng.standard_normal((3, 4, 5))}

EXPRESSIONS = [
    'x.median(1)', 'x.median(-1, True)', 'x.nanmedian(0)', 'x.kthvalue(2, 1)[0]',
    'x.kthvalue(3, 2, True)[0]', 'x.mode(1)', 'x.mode(2, True)', 'x.cummax(1)', 'x.cummin(2)',
    'x.cumprod(2)', 'x.quantile(0.4, 1)', "x.quantile(0.4, 1, interpolation='lower')",
    "x.quantile(0.4, 1, interpolation='higher')",
    "x.quantile(0.5, 1, interpolation='nearest')",
    "x.quantile(0.4, 1, interpolation='midpoint')", 'x.nanquantile(0.7)', 'x.flip(0, 2)',
    'x.rot90(1, (1, 2))', 'x.rot90(-1, (0, 2))', 'x.rot90(2)', 'x.movedim((0, 1), (2, 0))',
    'x.tile((2, 1))', 'x.diagonal(1, 0, 2)', 'x.diagonal(-2, 2, 1)', 'x.diag_embed()',
    'x.diag_embed(-1, 0, 2)', 'x[0].diag(2)', 'x.tensor_split(3, 2)',
    'x.tensor_split([1, 4], 1)', 'x.unfold(2, 3, 2)', 'x.unfold(1, 4, 1)', 'x.hsplit(2)',
    'x.vsplit([1])', 'x.dsplit([1, 3])', 'x.count_nonzero((0, 2))', 'x.aminmax(dim=1)',
    'x.aminmax()', 'x.nansum((0, 1))', 'x.nanmean(2, True)', 'x.diff(1, 1)',
    'x.diff(2, 2, prepend=x[:, :, :1])', 'x.logcumsumexp(1)', 'x[0].cov()', 'x[0].corrcoef()',
    'x[0].histc(5)', 'x.take_along_dim(x.argsort(1), 1)', 'x.msort()', 'x.ravel()',
    'x.index_add(2, lib.tensor([0, 0, 4]), x[:, :, :3])',
    'x.index_copy(1, lib.tensor([3, 1]), x[:, :2])', 'x.index_fill(0, lib.tensor([2]), -1)',
    'x.masked_select(x > 1)',
    "x.scatter_reduce(2, lib.zeros(3, 4, 5, dtype=lib.long), x, 'amax')",
    "x.scatter_reduce(1, lib.ones(3, 2, 5, dtype=lib.long), x[:, :2], 'mean', include_self=False)",
    "x.scatter_reduce(0, lib.zeros(1, 4, 5, dtype=lib.long), x[:1], 'prod')",
    "x.scatter_reduce(0, lib.zeros(1, 4, 5, dtype=lib.long), x[:1], 'amin', include_self=False)",
    'x.renorm(1, 2, 3.0)', 'lib.kron(x[0], x[1, :2])', 'lib.tensordot(x, x.permute(1, 2, 0), 2)',
    'lib.cross(x[:, :3, 0], x[:, 1:4, 1], dim=1)', 'x.as_strided((2, 3), (5, 2), 3)',
    'lib.block_diag(x[0], x[1, :2])', 'lib.cartesian_prod(x[0, 0], x[1, 1, :2])',
    'lib.combinations(x[0, 0], 3, True)', 'lib.atleast_2d(x[0, 0])', 'lib.hstack([x, x])',
    'lib.vstack([x[0, 0], x[1, 1]])', 'lib.column_stack([x[0, 0], x[1].t()])',
    "lib.meshgrid(x[0, 0], x[1, 1, :2], x[2, 2, :3], indexing='xy')",
    'lib.searchsorted(x[0].sort()[0], x[1])', 'lib.bucketize(x, lib.tensor([0.5, 2.0]))',
    'x.unique_consecutive(return_counts=True, return_inverse=True)',
    'x.unique_consecutive(dim=1)', 'x.nonzero()', 'lib.trace(x[0])',
    'lib.vander(x[0, 0], increasing=True)', 'x.xlogy(x.abs())', 'x.logaddexp(x.flip(0))',
    'x.fmod(1.5)', 'x.remainder(-1.5)', 'x % 0.7', '2.5 % (x.abs() + 1)',
    'x.atan2(x.flip(1))', 'x.hypot(x.flip(2))', 'x.copysign(-1.0)', 'x.float_power(2)',
    'x.fmax(x.flip(0))', 'x.frac()', 'x.sinc()', 'x.exp2()', 'x.erfc()', 'x.lgamma()',
    'x.abs().digamma()', '(x.abs() + 0.5).polygamma(3)', '(x.abs() + 1).mvlgamma(2)',
    'x.i0()', 'lib.special.i1(x)', 'lib.special.i0e(x)', 'lib.special.i1e(x)',
    'lib.special.ndtr(x)', 'lib.special.ndtri(x.sigmoid())', 'lib.special.entr(x)',
    'lib.special.xlog1py(x, x.abs())', 'lib.special.erfcx(x)', 'lib.special.log_ndtr(x)',
    '(x / 5).erfinv()', 'x.sigmoid().logit()', 'x.deg2rad()', 'x.nan_to_num(posinf=1.0)',
    "lib.linalg.matrix_norm(x, 'nuc')", 'lib.linalg.matrix_norm(x, -2)',
    'lib.linalg.svdvals(x)', 'lib.linalg.matrix_rank(x)', 'lib.linalg.pinv(x)',
    'lib.gradient(x, dim=(0, 2))', 'lib.cdist(x, x)', 'lib.cdist(x[0], x[1], p=1.0)',
    'lib.cumulative_trapezoid(x, dim=1)',
    'lib.special.chebyshev_polynomial_t(x / 3, 5)',
    'lib.special.chebyshev_polynomial_u(x / 3, (x.abs() * 2).long())',
    'lib.special.chebyshev_polynomial_v(x / 3, 3)',
    'lib.special.chebyshev_polynomial_w(x / 3, 4)',
    'lib.special.shifted_chebyshev_polynomial_t(x / 3, 3)',
    'lib.special.shifted_chebyshev_polynomial_u(x / 3, 2)',
    'lib.special.shifted_chebyshev_polynomial_v(x / 3, 4)',
    'lib.special.shifted_chebyshev_polynomial_w(x / 3, 5)',
    'lib.special.hermite_polynomial_h(x, 4)',
    'lib.special.hermite_polynomial_he(x, 5)',
    'lib.special.laguerre_polynomial_l(x, 3)',
    'lib.special.legendre_polynomial_p(x / 3, 6)',
    'lib.special.zeta(x.abs() + 1.5, x.abs() + 0.5)',
    'lib.special.spherical_bessel_j0(x)',
    'lib.linalg.cond(x[:, :4, :4] + 9 * lib.eye(4, dtype=x.dtype))',
    "lib.linalg.cond(x[:, :4, :4] + 9 * lib.eye(4, dtype=x.dtype), 'fro')",
    'lib.linalg.vander(x, N=3)',
    'lib.linalg.tensorinv((x[0, :, :4] + 9 * lib.eye(4, dtype=x.dtype)).reshape(2, 2, 4))',
]


def _same(got, want) -> None:
    if isinstance(want, (tuple, list)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            _same(g, w)
        return
    assert str(got.dtype) == str(want.dtype)
    assert tuple(got.shape) == tuple(want.shape)
    np.testing.assert_allclose(got.numpy().astype(float), want.numpy().astype(float),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("data", list(DATA))
@pytest.mark.parametrize("expr", EXPRESSIONS)
def test_against_torch(expr, data):
    want = eval(expr, {"x": torch.tensor(DATA[data]), "lib": torch})
    got = eval(expr, {"x": disthook.tensor(DATA[data]), "lib": disthook})
    _same(got, want)
