"""disthook.distributions beyond Normal / Categorical / Bernoulli: draw shapes and moments
(fixed seed, loose bounds: draws come from disthook's stream, not torch's), reproducibility
under manual_seed, and rsample gradients against their closed forms or finite differences."""
import math
import re

import numpy as np
import pytest

import disthook
from disthook import distributions as dd

N = 20000


def _t(values):
    return disthook.tensor(values, dtype=disthook.float64)


@pytest.mark.parametrize("make, mean, var", [
    (lambda: dd.Uniform(_t([0.0, -2.0]), _t([1.0, 4.0])), [0.5, 1.0], [1 / 12, 3.0]),
    (lambda: dd.Exponential(_t([0.5, 3.0])), [2.0, 1 / 3], [4.0, 1 / 9]),
    (lambda: dd.Laplace(_t([1.0, -1.0]), _t([0.5, 2.0])), [1.0, -1.0], [0.5, 8.0]),
    (lambda: dd.LogNormal(_t([0.0, 0.5]), _t([0.3, 0.2])), None, None),
    (lambda: dd.HalfNormal(_t([1.0, 2.0])), None, None),
    (lambda: dd.Poisson(_t([0.7, 6.0])), [0.7, 6.0], [0.7, 6.0]),
    (lambda: dd.Gamma(_t([0.5, 4.0]), _t([1.0, 2.0])), [0.5, 2.0], [0.5, 1.0]),
    (lambda: dd.Beta(_t([0.5, 4.0]), _t([2.0, 2.0])), None, None),
    (lambda: dd.Dirichlet(_t([[1.0, 2.0, 3.0]])), None, None),
    (lambda: dd.OneHotCategorical(probs=_t([0.2, 0.3, 0.5])), None, None),
    (lambda: dd.MultivariateNormal(_t([1.0, -1.0]), _t([[2.0, 0.6], [0.6, 1.0]])), None, None),
    (lambda: dd.Gumbel(_t([1.0, -1.0]), _t([0.5, 2.0])), None, None),
    (lambda: dd.StudentT(_t([6.0, 9.0]), _t([1.0, 0.0]), _t([1.0, 0.5])), None, None),
    (lambda: dd.Chi2(_t([1.0, 5.0])), [1.0, 5.0], [2.0, 10.0]),
    (lambda: dd.Geometric(_t([0.3, 0.8])), None, None),
    (lambda: dd.Binomial(_t([5.0, 12.0]), _t([0.3, 0.8])), None, None),
    (lambda: dd.MixtureSameFamily(dd.Categorical(probs=_t([0.3, 0.7])),
                                  dd.Normal(_t([[-2.0, 1.0]]), _t([0.5, 1.0]))), None, None),
    (lambda: dd.MixtureSameFamily(dd.Categorical(probs=_t([0.3, 0.7])), dd.Independent(
        dd.Normal(_t([[-2.0, 1.0], [3.0, 0.0]]), 0.5), 1)), None, None),
    (lambda: dd.Multinomial(6, probs=_t([[0.2, 0.3, 0.5], [0.7, 0.2, 0.1]])), None, None),
    (lambda: dd.NegativeBinomial(_t([2.0, 5.0]), _t([0.3, 0.6])), None, None),
    (lambda: dd.FisherSnedecor(_t([5.0, 10.0]), _t([12.0, 20.0])), None, None),
    (lambda: dd.Weibull(_t([1.0, 2.0]), _t([1.5, 3.0])), None, None),
    (lambda: dd.Pareto(_t([1.0, 2.0]), _t([5.0, 8.0])), None, None),
    (lambda: dd.Kumaraswamy(_t([2.0, 0.7]), _t([3.0, 1.5])), None, None),
    (lambda: dd.InverseGamma(_t([6.0, 9.0]), _t([2.0, 1.0])), None, None),
    (lambda: dd.ContinuousBernoulli(_t([0.1, 0.5, 0.85])), None, None),
    (lambda: dd.GeneralizedPareto(_t([0.0, 1.0, -1.0]), _t([1.0, 0.5, 2.0]),
                                  _t([0.05, 0.0, -0.3])), None, None),
])
def test_draws_have_the_shape_and_moments_of_the_distribution(make, mean, var):
    disthook.manual_seed(0)
    dist = make()
    draws = dist.sample((N,))
    assert tuple(draws.shape) == (N,) + tuple(dist.batch_shape) + tuple(dist.event_shape)
    assert tuple(dist.sample().shape) == tuple(dist.batch_shape) + tuple(dist.event_shape)
    assert not draws.requires_grad
    got = draws.numpy()
    mean = dist.mean.numpy() if mean is None else mean
    var = dist.variance.numpy() if var is None else var
    np.testing.assert_allclose(got.mean(0), mean, rtol=0.05, atol=0.03)
    np.testing.assert_allclose(got.var(0), var, rtol=0.08, atol=0.01)
    assert bool(dist.support.check(draws).all())


def test_mvn_draws_have_its_covariance_and_expand_keeps_it():
    disthook.manual_seed(1)
    cov = np.array([[2.0, 0.6], [0.6, 1.0]])
    for kwargs in ({"covariance_matrix": _t(cov)}, {"precision_matrix": _t(np.linalg.inv(cov))},
                   {"scale_tril": _t(np.linalg.cholesky(cov))}):
        dist = dd.MultivariateNormal(_t([1.0, -1.0]), **kwargs).expand((3,))
        draws = dist.rsample((N,)).numpy()
        assert draws.shape == (N, 3, 2)
        np.testing.assert_allclose(np.cov(draws[:, 2].T), cov, atol=0.08)


def test_draws_repeat_under_manual_seed_and_differ_otherwise():
    dists = [dd.Gamma(2.0, 1.0), dd.Beta(2.0, 3.0), dd.Dirichlet(disthook.ones(3)),
             dd.Poisson(3.0), dd.Laplace(0.0, 1.0), dd.Uniform(0.0, 1.0),
             dd.Exponential(1.0), dd.MultivariateNormal(disthook.zeros(2), disthook.eye(2))]
    disthook.manual_seed(7)
    first = [d.sample((5,)).numpy() for d in dists]
    disthook.manual_seed(7)
    again = [d.sample((5,)).numpy() for d in dists]
    later = [d.sample((5,)).numpy() for d in dists]
    for a, b, c in zip(first, again, later):
        np.testing.assert_array_equal(a, b)
        assert not np.array_equal(a, c)


def test_rsample_gradients_are_pathwise():
    # d/dparams of a sum of draws, against the draws' closed form
    disthook.manual_seed(3)
    loc, scale = _t([0.5, -1.0]).requires_grad_(), _t([2.0, 0.5]).requires_grad_()
    x = dd.Laplace(loc, scale).rsample((4,))
    x.sum().backward()
    np.testing.assert_allclose(loc.grad.numpy(), [4.0, 4.0])
    np.testing.assert_allclose(scale.grad.numpy(), ((x - loc) / scale).detach().sum(0).numpy())

    rate = _t([0.5, 3.0]).requires_grad_()
    x = dd.Exponential(rate).rsample((6,))
    x.sum().backward()
    np.testing.assert_allclose(rate.grad.numpy(), (-x / rate).detach().sum(0).numpy())

    low, high = _t([0.0]).requires_grad_(), _t([2.0]).requires_grad_()
    x = dd.Uniform(low, high).rsample((5,))
    x.sum().backward()
    u = ((x - low) / (high - low)).detach().numpy()
    np.testing.assert_allclose(high.grad.numpy(), u.sum(0))
    np.testing.assert_allclose(low.grad.numpy(), (1 - u).sum(0))


def test_mvn_and_transformed_rsample_match_finite_differences():
    def draw(params, seed):
        disthook.manual_seed(seed)
        loc, tril = params
        base = dd.MultivariateNormal(loc, scale_tril=tril, validate_args=False)
        squashed = dd.TransformedDistribution(
            base, [dd.transforms.AffineTransform(0.5, 2.0, event_dim=1),
                   dd.transforms.TanhTransform()])
        return (squashed.rsample((3,)) * _t([1.0, -2.0])).sum()

    loc = _t([0.1, -0.2]).requires_grad_()
    tril = _t([[0.8, 0.0], [0.3, 0.5]]).requires_grad_()
    draw((loc, tril), 5).backward()
    for param in (loc, tril):
        flat = param.detach().numpy().copy().ravel()
        numeric = np.zeros_like(flat)
        for i in range(flat.size):
            shifted = []
            for step in (1e-6, -1e-6):
                values = flat.copy()
                values[i] += step
                moved = _t(values.reshape(param.shape))
                args = (moved, tril.detach()) if param is loc else (loc.detach(), moved)
                shifted.append(draw(args, 5).item())
            numeric[i] = (shifted[0] - shifted[1]) / 2e-6
        np.testing.assert_allclose(param.grad.numpy().ravel(), numeric, atol=1e-6)


def test_gamma_family_rsample_refuses_and_sample_has_no_gradient():
    conc = _t([2.0]).requires_grad_()
    for dist in (dd.Gamma(conc, 1.0), dd.Beta(conc, 1.0),
                 dd.Dirichlet(conc.expand(3) * 1.0)):
        assert not dist.has_rsample
        with pytest.raises(NotImplementedError, match="implicit reparameterization"):
            dist.rsample()
        assert not dist.sample((2,)).requires_grad


def test_score_function_gradient_reaches_the_parameters():
    # the REINFORCE pattern: log_prob of a detached draw carries the gradient
    disthook.manual_seed(2)
    rate = _t([1.5]).requires_grad_()
    dist = dd.Gamma(rate, 2.0)
    x = dist.sample((3,))
    dist.log_prob(x).sum().backward()
    want = (math.log(2.0) + np.log(x.numpy()) - _digamma(1.5)).sum()
    np.testing.assert_allclose(rate.grad.numpy(), [want], rtol=1e-6)


def _digamma(x):
    return disthook.tensor(x, dtype=disthook.float64).digamma().item()


def test_transformed_log_prob_of_its_own_draws_with_cache():
    disthook.manual_seed(4)
    tanh = dd.transforms.TanhTransform(cache_size=1)
    dist = dd.TransformedDistribution(dd.Normal(_t([0.0]), _t([3.0])), [tanh])
    y = dist.rsample((100,))
    # the cached inverse is the exact pre-image, even where atanh(y) would saturate
    assert tanh.inv(y) is tanh._cached_x_y[0]
    assert bool(dist.log_prob(y).isfinite().all())


def test_digamma_and_polygamma_of_a_0d_tensor():
    x = disthook.tensor(2.0, dtype=disthook.float64, requires_grad=True)
    y = x.digamma()
    y.backward()
    np.testing.assert_allclose(y.item(), 1 - 0.5772156649015329)
    np.testing.assert_allclose(x.grad.item(), math.pi ** 2 / 6 - 1)


def test_heavy_tailed_draws_have_their_quantiles():
    disthook.manual_seed(5)
    for dist in (dd.Cauchy(_t([1.0, -2.0]), _t([0.5, 3.0])), dd.HalfCauchy(_t([0.5, 3.0]))):
        draws = dist.sample((N,)).numpy()
        for q in (0.25, 0.5, 0.75):
            np.testing.assert_allclose(np.quantile(draws, q, axis=0),
                                       dist.icdf(_t(q)).numpy(), rtol=0.05, atol=0.05)


def test_relaxed_draws_lie_in_the_support_and_carry_gradients():
    disthook.manual_seed(6)
    logits = _t([[0.5, -1.0, 2.0]]).requires_grad_()
    dist = dd.RelaxedOneHotCategorical(_t(0.5), logits=logits)
    y = dist.rsample((1000,))
    assert tuple(y.shape) == (1000, 1, 3) and bool(dist.support.check(y).all())
    # at a low temperature the argmax follows the categorical's probabilities
    freq = np.bincount(y.detach().numpy().argmax(-1).ravel(), minlength=3) / 1000
    np.testing.assert_allclose(freq, dist.probs.detach().numpy()[0], atol=0.05)
    (y[..., 2]).sum().backward()
    assert logits.grad[0, 2].item() > 0 > logits.grad[0, 1].item()

    probs = _t([0.2, 0.9]).requires_grad_()
    draw = dd.RelaxedBernoulli(_t(0.3), probs=probs).rsample((2000,))
    assert bool(((draw > 0) & (draw < 1)).all())
    np.testing.assert_allclose((draw.detach().numpy() > 0.5).mean(0), [0.2, 0.9], atol=0.04)
    draw.sum().backward()
    assert bool((probs.grad > 0).all())


def test_mixture_draws_pick_their_component():
    disthook.manual_seed(8)
    mixture = dd.MixtureSameFamily(dd.Categorical(probs=_t([0.25, 0.75])),
                                   dd.Normal(_t([-10.0, 10.0]), _t([0.1, 0.1])))
    draws = mixture.sample((4000,)).numpy()
    assert draws.shape == (4000,)
    np.testing.assert_allclose((draws > 0).mean(), 0.75, atol=0.03)
    assert np.all(np.abs(np.abs(draws) - 10) < 1)


def test_kumaraswamy_mode_is_the_density_maximum():
    # torch 2.13's Kumaraswamy.mode is NaN for all parameters; disthook gives the maximum
    a, b = _t([2.0, 3.5, 1.0, 0.5]), _t([3.0, 1.5, 2.0, 2.0])
    dist = dd.Kumaraswamy(a, b)
    grid = _t(np.linspace(1e-4, 1 - 1e-4, 20001)[:, None] * np.ones(4))
    best = grid.numpy()[dist.log_prob(grid).numpy().argmax(0), range(4)]
    mode = dist.mode.numpy()
    np.testing.assert_allclose(mode[:3], best[:3], atol=1e-4)
    assert math.isnan(mode[3])


def test_logistic_normal_draws_are_the_stick_breaking_of_normal_draws():
    disthook.manual_seed(9)
    loc, scale = _t([0.3, -0.5]).requires_grad_(), _t([0.2, 0.4])
    dist = dd.LogisticNormal(loc, scale)
    y = dist.rsample((5000,))
    assert tuple(y.shape) == (5000, 3) and bool(dist.support.check(y).all())
    # the inverse map gives back normal draws with the distribution's loc and scale
    x = dd.transforms.StickBreakingTransform().inv(y).detach().numpy()
    np.testing.assert_allclose(x.mean(0), [0.3, -0.5], atol=0.02)
    np.testing.assert_allclose(x.std(0), [0.2, 0.4], rtol=0.05)
    y[:, 0].sum().backward()
    assert loc.grad[0].item() > 0


def test_lowrank_mvn_draws_have_its_covariance_and_gradients():
    disthook.manual_seed(10)
    factor = _t([[0.5, -0.2], [0.1, 0.3], [-0.4, 0.6]]).requires_grad_()
    diag = _t([0.3, 0.5, 0.2])
    dist = dd.LowRankMultivariateNormal(_t([1.0, 0.0, -1.0]), factor, diag)
    draws = dist.rsample((N,))
    np.testing.assert_allclose(np.cov(draws.detach().numpy().T),
                               dist.covariance_matrix.detach().numpy(), atol=0.03)
    # d/dW of sum((x - loc)^2) over draws is 2 sum (W e1 + sqrt(D) e2) e1^T: check by its mean
    (draws - dist.loc).pow(2).sum().backward()
    np.testing.assert_allclose(factor.grad.numpy() / N, 2 * factor.detach().numpy(), atol=0.06)


def test_gaussian_kl_refuses_different_event_shapes():
    two = dd.MultivariateNormal(disthook.zeros(2), disthook.eye(2))
    three = dd.LowRankMultivariateNormal(disthook.zeros(3), disthook.ones(3, 1),
                                         disthook.ones(3))
    for p, q, kind in [(two, dd.MultivariateNormal(disthook.zeros(3), disthook.eye(3)), ""),
                       (two, three, "(Low Rank) ")]:
        with pytest.raises(ValueError, match=f"two {re.escape(kind)}Multivariate Normals "
                           "with different event shapes"):
            dd.kl_divergence(p, q)


def test_von_mises_draws_have_its_circular_moments():
    disthook.manual_seed(11)
    dist = dd.VonMises(_t([3.0, -1.0]), _t([0.7, 5.0]))
    draws = dist.sample((N,)).numpy()
    assert draws.shape == (N, 2) and np.all(np.abs(draws) <= math.pi)
    offset = draws - dist.loc.numpy()
    np.testing.assert_allclose(np.cos(offset).mean(0), 1 - dist.variance.numpy(), atol=0.02)
    np.testing.assert_allclose(np.sin(offset).mean(0), [0.0, 0.0], atol=0.02)


def test_lkj_draws_are_correlation_factors_with_its_spread():
    disthook.manual_seed(12)
    for eta in (0.5, 1.0, 3.0):
        dist = dd.LKJCholesky(4, eta)
        factors = dist.sample((N,))
        assert tuple(factors.shape) == (N, 4, 4)
        assert bool(dist.support.check(factors).all())
        corr = factors.numpy() @ np.swapaxes(factors.numpy(), -1, -2)
        np.testing.assert_allclose(np.diagonal(corr, axis1=-2, axis2=-1), 1.0, atol=1e-6)
        # every off-diagonal correlation of LKJ(eta) in dimension d has variance
        # 1 / (2 eta + d - 1)
        for i, j in [(1, 0), (3, 2), (3, 0)]:
            np.testing.assert_allclose(corr[:, i, j].var(), 1 / (2 * eta + 3), rtol=0.06)
            np.testing.assert_allclose(corr[:, i, j].mean(), 0.0, atol=0.02)


def test_wishart_draws_have_its_mean_and_variance():
    disthook.manual_seed(13)
    cov = _t([[2.0, 0.3], [0.3, 1.0]])
    dist = dd.Wishart(_t(5.0), covariance_matrix=cov)
    draws = dist.sample((N,)).numpy()
    assert draws.shape == (N, 2, 2)
    assert bool(dist.support.check(disthook.tensor(draws[:100])).all())
    np.testing.assert_allclose(draws.mean(0), dist.mean.numpy(), rtol=0.03, atol=0.03)
    np.testing.assert_allclose(draws.var(0), dist.variance.numpy(), rtol=0.08)
    with pytest.raises(NotImplementedError, match="implicit reparameterization"):
        dist.rsample()


def test_names_load_on_first_use_and_all_resolve():
    import subprocess
    import sys

    code = ("import sys, disthook\n"
            "assert not [m for m in sys.modules if m.startswith('disthook.distributions.')]\n"
            "from disthook.distributions import Normal, kl_divergence\n"
            "print(kl_divergence(Normal(0.0, 1.0), Normal(1.0, 1.0)).item())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert float(out) == pytest.approx(0.5)
    assert set(dd.__all__) == set(dd._WHERE) | {"constraints", "kl", "transforms"}
    for name in dd.__all__:
        assert getattr(dd, name) is not None

