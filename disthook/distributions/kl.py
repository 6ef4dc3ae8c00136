"""``kl_divergence(p, q)`` and ``register_kl``: KL(p || q) by the registered function for
the most specific pair of classes (p's class first, then q's), as torch dispatches.

The closed forms below are those torch registers, for the pairs whose distributions
disthook has; every one is written with disthook's ops, so it carries gradients.
"""
from __future__ import annotations

import math
import warnings

from disthook.distributions.bernoulli import Bernoulli
from disthook.distributions.beta import Beta
from disthook.distributions.binomial import Binomial
from disthook.distributions.categorical import Categorical
from disthook.distributions.cauchy import Cauchy
from disthook.distributions.dirichlet import Dirichlet
from disthook.distributions.distribution import Distribution, sum_rightmost
from disthook.distributions.exp_family import ExponentialFamily
from disthook.distributions.exponential import Exponential
from disthook.distributions.gamma import Gamma
from disthook.distributions.geometric import Geometric
from disthook.distributions.gumbel import EULER_GAMMA, Gumbel
from disthook.distributions.half_normal import HalfNormal
from disthook.distributions.independent import Independent
from disthook.distributions.laplace import Laplace
from disthook.distributions.lowrank_multivariate_normal import (
    LowRankMultivariateNormal,
    log_det,
    woodbury_mahalanobis,
)
from disthook.distributions.multivariate_normal import (
    MultivariateNormal,
    _solve_lower,
    batch_mahalanobis,
)
from disthook.distributions.normal import Normal
from disthook.distributions.one_hot_categorical import OneHotCategorical
from disthook.distributions.pareto import Pareto
from disthook.distributions.poisson import Poisson
from disthook.distributions.transformed_distribution import TransformedDistribution
from disthook.distributions.uniform import Uniform

__all__ = ["kl_divergence", "register_kl"]

_REGISTRY: dict = {}  # (type_p, type_q) -> fn(p, q)
_DISPATCH: dict = {}  # (type p, type q) -> the fn chosen for them (cleared on register)


def register_kl(type_p, type_q):
    """Decorator: ``fn(p, q)`` computes KL(p || q) for instances of these classes."""
    for name, cls in (("type_p", type_p), ("type_q", type_q)):
        if not isinstance(cls, type) or not issubclass(cls, Distribution):
            raise TypeError(f"Expected {name} to be a Distribution subclass but got {cls}")

    def decorator(fn):
        _REGISTRY[type_p, type_q] = fn
        _DISPATCH.clear()
        return fn

    return decorator


def _lookup(type_p, type_q):
    """The function of the most specific registered pair; when the most specific for p
    and the most specific for q differ, torch's ambiguity warning and p's choice."""
    matches = [(cp, cq) for cp, cq in _REGISTRY
               if issubclass(type_p, cp) and issubclass(type_q, cq)]
    if not matches:
        return None
    # distance of a registered class from the actual one along its method resolution order
    depth = {(cp, cq): (type_p.__mro__.index(cp), type_q.__mro__.index(cq))
             for cp, cq in matches}
    by_p = min(matches, key=lambda m: depth[m])
    by_q = min(matches, key=lambda m: depth[m][::-1])
    if _REGISTRY[by_p] is not _REGISTRY[by_q]:
        warnings.warn(f"Ambiguous kl_divergence({type_p.__name__}, {type_q.__name__}). "
                      f"Please register_kl({by_p[0].__name__}, {by_q[1].__name__})",
                      RuntimeWarning, stacklevel=3)
    return _REGISTRY[by_p]


def kl_divergence(p, q):
    """KL(p || q), over the broadcast batch shape of ``p`` and ``q``."""
    key = (type(p), type(q))
    if key not in _DISPATCH:
        _DISPATCH[key] = _lookup(*key)
    fn = _DISPATCH[key]
    if fn is None:
        raise NotImplementedError(f"No KL(p || q) is implemented for p type "
                                  f"{type(p).__name__} and q type {type(q).__name__}")
    return fn(p, q)


# ---- helpers --------------------------------------------------------------------------------

def _inf_like(t):
    from disthook import full_like

    return full_like(t, math.inf)


def _where(condition, value, other):
    from disthook import broadcast_tensors, where

    value, other = broadcast_tensors(value, other)
    return where(condition, value, other)


def _softplus(x):
    from disthook.nn.functional import softplus

    return softplus(x)


def _neg_log_gamma(q, mean_x, mean_log_x):
    """-E_p[log Gamma(x; q.concentration, q.rate)] given E_p[x] and E_p[log x]."""
    c = q.concentration
    return -c * q.rate.log() + c.lgamma() - (c - 1) * mean_log_x + q.rate * mean_x


# ---- same family ----------------------------------------------------------------------------

@register_kl(Normal, Normal)
def _kl_normal_normal(p, q):
    var_ratio = (p.scale / q.scale).pow(2)
    t1 = ((p.loc - q.loc) / q.scale).pow(2)
    return 0.5 * (var_ratio + t1 - 1 - var_ratio.log())


@register_kl(Bernoulli, Bernoulli)
def _kl_bernoulli_bernoulli(p, q):
    ones = _where(q.probs == 0, _inf_like(p.probs),
                  p.probs * (_softplus(-q.logits) - _softplus(-p.logits)))
    ones = _where(p.probs == 0, 0 * ones, ones)
    zeros = _where(q.probs == 1, _inf_like(p.probs),
                   (1 - p.probs) * (_softplus(q.logits) - _softplus(p.logits)))
    zeros = _where(p.probs == 1, 0 * zeros, zeros)
    return ones + zeros


@register_kl(Categorical, Categorical)
def _kl_categorical_categorical(p, q):
    terms = p.probs * (p.logits - q.logits)
    terms = _where(q.probs == 0, _inf_like(terms), terms)
    terms = _where(p.probs == 0, 0 * terms, terms)
    return terms.sum(-1)


@register_kl(OneHotCategorical, OneHotCategorical)
def _kl_onehot_onehot(p, q):
    return _kl_categorical_categorical(p._categorical, q._categorical)


@register_kl(Uniform, Uniform)
def _kl_uniform_uniform(p, q):
    result = ((q.high - q.low) / (p.high - p.low)).log()
    return _where((q.low > p.low) | (q.high < p.high), _inf_like(result), result)


@register_kl(Exponential, Exponential)
def _kl_exponential_exponential(p, q):
    ratio = q.rate / p.rate
    return ratio - 1 - ratio.log()


@register_kl(Laplace, Laplace)
def _kl_laplace_laplace(p, q):
    scale_ratio = p.scale / q.scale
    distance = (p.loc - q.loc).abs()
    return (-scale_ratio.log() + distance / q.scale
            + scale_ratio * (-distance / p.scale).exp() - 1)


@register_kl(Gamma, Gamma)
def _kl_gamma_gamma(p, q):
    return ((p.concentration - q.concentration) * p.concentration.digamma()
            - p.concentration.lgamma() + q.concentration.lgamma()
            + q.concentration * (p.rate / q.rate).log()
            + p.concentration * (q.rate / p.rate - 1))


@register_kl(Beta, Beta)
def _kl_beta_beta(p, q):
    a1, b1, a2, b2 = p.concentration1, p.concentration0, q.concentration1, q.concentration0
    total_p, total_q = a1 + b1, a2 + b2
    return (a2.lgamma() + b2.lgamma() + total_p.lgamma()
            - a1.lgamma() - b1.lgamma() - total_q.lgamma()
            + (a1 - a2) * a1.digamma() + (b1 - b2) * b1.digamma()
            + (total_q - total_p) * total_p.digamma())


@register_kl(Dirichlet, Dirichlet)
def _kl_dirichlet_dirichlet(p, q):
    total_p = p.concentration.sum(-1)
    total_q = q.concentration.sum(-1)
    expected_log = p.concentration.digamma() - total_p.digamma().unsqueeze(-1)
    return (total_p.lgamma() - total_q.lgamma()
            - (p.concentration.lgamma() - q.concentration.lgamma()).sum(-1)
            + ((p.concentration - q.concentration) * expected_log).sum(-1))


@register_kl(Poisson, Poisson)
def _kl_poisson_poisson(p, q):
    return p.rate * (p.rate.log() - q.rate.log()) - (p.rate - q.rate)


@register_kl(HalfNormal, HalfNormal)
def _kl_halfnormal_halfnormal(p, q):
    return _kl_normal_normal(p.base_dist, q.base_dist)


@register_kl(Independent, Independent)
def _kl_independent_independent(p, q):
    if p.reinterpreted_batch_ndims != q.reinterpreted_batch_ndims:
        raise NotImplementedError(
            "KL between Independent distributions with different reinterpreted_batch_ndims "
            f"({p.reinterpreted_batch_ndims} and {q.reinterpreted_batch_ndims}) is not "
            "implemented")
    return sum_rightmost(kl_divergence(p.base_dist, q.base_dist), p.reinterpreted_batch_ndims)


@register_kl(TransformedDistribution, TransformedDistribution)
def _kl_transformed_transformed(p, q):
    if p.transforms != q.transforms:
        raise NotImplementedError("KL between TransformedDistributions is only implemented "
                                  "when both have the same transforms")
    if p.event_shape != q.event_shape:
        raise NotImplementedError("KL between TransformedDistributions with different "
                                  "event shapes is not implemented")
    extra = len(p.event_shape) - len(p.base_dist.event_shape)
    return sum_rightmost(kl_divergence(p.base_dist, q.base_dist), extra)


@register_kl(ExponentialFamily, ExponentialFamily)
def _kl_expfamily_expfamily(p, q):
    """A Bregman divergence of the log normalizer F: F(theta_q) - F(theta_p)
    - <theta_q - theta_p, grad F(theta_p)>, for two members of one family."""
    from disthook import autograd

    if type(p) is not type(q):
        raise NotImplementedError("The cross KL-divergence between different exponential "
                                  "families cannot be computed using Bregman divergences")
    from disthook.distributions.exp_family import _differentiable

    # not detached (torch detaches p's, losing the gradient to p's parameters)
    p_params = [_differentiable(param) for param in p._natural_params]
    q_params = q._natural_params
    p_normalizer = p._log_normalizer(*p_params)
    grads = autograd.grad(p_normalizer.sum(), p_params, create_graph=True)
    result = q._log_normalizer(*q_params) - p_normalizer
    for p_param, q_param, grad in zip(p_params, q_params, grads):
        result = result - sum_rightmost((q_param - p_param) * grad, len(q.event_shape))
    return result


# ---- across families: -H(p) - E_p[log q], infinite where p has mass outside q's support ----

@register_kl(Normal, Beta)
@register_kl(Normal, Exponential)
@register_kl(Normal, Gamma)
@register_kl(Normal, Uniform)
@register_kl(Laplace, Beta)
@register_kl(Laplace, Exponential)
@register_kl(Laplace, Gamma)
@register_kl(Laplace, Uniform)
@register_kl(Exponential, Beta)
@register_kl(Exponential, Uniform)
@register_kl(Gamma, Beta)
@register_kl(Gamma, Uniform)
@register_kl(Poisson, Bernoulli)
@register_kl(Poisson, Binomial)
@register_kl(Gumbel, Beta)
@register_kl(Gumbel, Exponential)
@register_kl(Gumbel, Gamma)
@register_kl(Gumbel, Uniform)
@register_kl(Beta, Pareto)
@register_kl(Exponential, Pareto)
@register_kl(Gamma, Pareto)
@register_kl(Gumbel, Pareto)
@register_kl(Laplace, Pareto)
@register_kl(Normal, Pareto)
@register_kl(Pareto, Beta)
@register_kl(Pareto, Uniform)
def _kl_outside_support(p, q):
    """p puts mass where q has none (q's support is bounded or discrete, p's is not)."""
    return _inf_like(p.mean)


@register_kl(Normal, Laplace)
def _kl_normal_laplace(p, q):
    d = p.loc - q.loc
    # E|x - q.loc| for x ~ N(p.loc, p.scale)
    mean_abs = (p.scale * math.sqrt(2 / math.pi) * (-d.pow(2) / (2 * p.scale.pow(2))).exp()
                + d * (d / (p.scale * math.sqrt(2))).erf())
    return -p.entropy() + (2 * q.scale).log() + mean_abs / q.scale


@register_kl(Laplace, Normal)
@register_kl(Gumbel, Normal)
@register_kl(Exponential, Normal)
@register_kl(Gamma, Normal)
@register_kl(Beta, Normal)
@register_kl(Uniform, Normal)
def _kl_to_normal(p, q):
    """-H(p) - E_p[log N(x; q)], which needs only p's mean and variance."""
    second = p.variance + (p.mean - q.loc).pow(2)  # E_p[(x - q.loc)^2]
    return (-p.entropy() + q.scale.log() + 0.5 * math.log(2 * math.pi)
            + second / (2 * q.scale.pow(2)))


@register_kl(Gamma, Exponential)
@register_kl(Beta, Exponential)
def _kl_to_exponential(p, q):
    """-H(p) - E_p[log Exp(x; q.rate)] for p on the nonnegative reals: needs p's mean."""
    return -p.entropy() - q.rate.log() + q.rate * p.mean


@register_kl(Uniform, Exponential)
def _kl_uniform_exponential(p, q):
    result = _kl_to_exponential(p, q)
    return _where(p.low < 0, _inf_like(result), result)


@register_kl(Exponential, Gamma)
def _kl_exponential_gamma(p, q):
    mean_log = -EULER_GAMMA - p.rate.log()
    return -p.entropy() + _neg_log_gamma(q, p.rate.reciprocal(), mean_log)


@register_kl(Beta, Gamma)
def _kl_beta_gamma(p, q):
    mean_log = p.concentration1.digamma() - (p.concentration1 + p.concentration0).digamma()
    return -p.entropy() + _neg_log_gamma(q, p.mean, mean_log)


@register_kl(Beta, Uniform)
def _kl_beta_uniform(p, q):
    result = -p.entropy() + (q.high - q.low).log()
    return _where((q.low > 0) | (q.high < 1), _inf_like(result), result)


@register_kl(Bernoulli, Poisson)
def _kl_bernoulli_poisson(p, q):
    return -p.entropy() - (p.probs * q.rate.log() - q.rate)


def _uniform_mean_log(low, high):
    """E[log x] for x ~ Uniform(low, high), 0 <= low: (h log h - l log l) / (h - l) - 1."""
    from disthook import special

    return (special.xlogy(high, high) - special.xlogy(low, low)) / (high - low) - 1


@register_kl(Uniform, Gamma)
def _kl_uniform_gamma(p, q):
    result = -p.entropy() + _neg_log_gamma(q, p.mean, _uniform_mean_log(p.low, p.high))
    return _where(p.low < 0, _inf_like(result), result)


@register_kl(Uniform, Beta)
def _kl_uniform_beta(p, q):
    a, b = q.concentration1, q.concentration0
    log_beta = a.lgamma() + b.lgamma() - (a + b).lgamma()
    mean_log = _uniform_mean_log(p.low, p.high)
    mean_log1m = _uniform_mean_log(1 - p.high, 1 - p.low)
    result = -p.entropy() + log_beta - (a - 1) * mean_log - (b - 1) * mean_log1m
    return _where((p.low < 0) | (p.high > 1), _inf_like(result), result)


@register_kl(Cauchy, Cauchy)
def _kl_cauchy_cauchy(p, q):
    return (((p.scale + q.scale).pow(2) + (p.loc - q.loc).pow(2)).log()
            - (4 * p.scale * q.scale).log())


@register_kl(Geometric, Geometric)
def _kl_geometric_geometric(p, q):
    return -p.entropy() - (-q.probs).log1p() / p.probs - q.logits


@register_kl(Binomial, Binomial)
def _kl_binomial_binomial(p, q):
    if bool((p.total_count < q.total_count).any()):
        raise NotImplementedError("KL between Binomials where q.total_count > "
                                  "p.total_count is not implemented")
    kl = p.total_count * (p.probs * (p.logits - q.logits) + (-p.probs).log1p()
                          - (-q.probs).log1p())
    return _where(p.total_count > q.total_count, _inf_like(kl), kl)


@register_kl(Gumbel, Gumbel)
def _kl_gumbel_gumbel(p, q):
    ratio = p.scale / q.scale
    shift = (p.loc - q.loc) / q.scale
    return (-ratio.log() + shift + EULER_GAMMA * ratio
            + (-shift + (1 + ratio).lgamma()).exp() - (1 + EULER_GAMMA))


def _kl_to_gumbel(p, q, mean_x, mean_exp_neg):
    """-H(p) - E_p[log Gumbel(x; q)] from E_p[x] and E_p[exp(-(x - q.loc) / q.scale)]."""
    return -p.entropy() + q.scale.log() + (mean_x - q.loc) / q.scale + mean_exp_neg


@register_kl(Normal, Gumbel)
def _kl_normal_gumbel(p, q):
    exp_term = (-(p.loc - q.loc) / q.scale + p.scale.pow(2) / (2 * q.scale.pow(2))).exp()
    return _kl_to_gumbel(p, q, p.loc, exp_term)


@register_kl(Uniform, Gumbel)
def _kl_uniform_gumbel(p, q):
    exp_term = q.scale / (p.high - p.low) * ((-(p.low - q.loc) / q.scale).exp()
                                             - (-(p.high - q.loc) / q.scale).exp())
    return _kl_to_gumbel(p, q, p.mean, exp_term)


@register_kl(Exponential, Gumbel)
def _kl_exponential_gumbel(p, q):
    rate_scale = p.rate * q.scale
    exp_term = (q.loc / q.scale).exp() * rate_scale / (rate_scale + 1)
    return _kl_to_gumbel(p, q, p.mean, exp_term)


@register_kl(Gamma, Gumbel)
def _kl_gamma_gumbel(p, q):
    exp_term = ((q.loc / q.scale).exp()
                * (1 + 1 / (q.scale * p.rate)).pow(-p.concentration))
    return _kl_to_gumbel(p, q, p.mean, exp_term)


@register_kl(Pareto, Pareto)
def _kl_pareto_pareto(p, q):
    alpha_ratio = q.alpha / p.alpha
    result = q.alpha * (p.scale / q.scale).log() - alpha_ratio.log() + alpha_ratio - 1
    return _where(p.scale < q.scale, _inf_like(result), result)  # p below q's support


def _pareto_moments(p, min_alpha: float):
    """Pareto p's mean and variance where alpha > min_alpha, computed at alpha = 3 elsewhere
    (those entries become infinite, and stay out of the gradient, as in torch)."""
    from disthook import where

    finite = p.alpha > min_alpha
    alpha = where(finite, p.alpha, 3.0 + 0 * p.alpha)
    mean = alpha * p.scale / (alpha - 1)
    variance = p.scale.pow(2) * alpha / ((alpha - 1).pow(2) * (alpha - 2))
    return finite, mean, variance


@register_kl(Pareto, Exponential)
def _kl_pareto_exponential(p, q):
    finite, mean, _ = _pareto_moments(p, 1)
    result = -p.entropy() - q.rate.log() + q.rate * mean
    return _where(finite, result, _inf_like(result))


@register_kl(Pareto, Gamma)
def _kl_pareto_gamma(p, q):
    finite, mean, _ = _pareto_moments(p, 1)
    mean_log = p.scale.log() + p.alpha.reciprocal()
    result = -p.entropy() + _neg_log_gamma(q, mean, mean_log)
    return _where(finite, result, _inf_like(result))


@register_kl(Pareto, Normal)
def _kl_pareto_normal(p, q):
    finite, mean, variance = _pareto_moments(p, 2)
    result = (-p.entropy() + q.scale.log() + 0.5 * math.log(2 * math.pi)
              + (variance + (mean - q.loc).pow(2)) / (2 * q.scale.pow(2)))
    return _where(finite, result, _inf_like(result))


@register_kl(Uniform, Pareto)
def _kl_uniform_pareto(p, q):
    mean_log = _uniform_mean_log(p.low, p.high)
    result = (-p.entropy() - q.alpha.log() - q.alpha * q.scale.log()
              + (q.alpha + 1) * mean_log)
    return _where(p.low < q.scale, _inf_like(result), result)


# ---- Gaussians given by a full or a low-rank-plus-diagonal covariance -----------------------

def _covariance_root(dist):
    """F with covariance F F^T: L for a MultivariateNormal, [W, sqrt(D)] for a low-rank one."""
    from disthook import cat, diag_embed

    if isinstance(dist, LowRankMultivariateNormal):
        return cat([dist._unbroadcasted_cov_factor,
                    diag_embed(dist._unbroadcasted_cov_diag.sqrt())], -1)
    return dist._unbroadcasted_scale_tril


def _gaussian_terms(q, root_p, diff):
    """(log det Sigma_q, tr(Sigma_q^-1 F F^T), diff^T Sigma_q^-1 diff) for q either kind."""
    if isinstance(q, LowRankMultivariateNormal):
        w, d, cap = (q._unbroadcasted_cov_factor, q._unbroadcasted_cov_diag,
                     q._capacitance_tril)
        # Woodbury: Sigma_q^-1 = D^-1 - A^T A with A = L_C^-1 W^T D^-1
        plain = (root_p.pow(2) / d.unsqueeze(-1)).sum((-2, -1))
        a_root = _solve_lower(cap, (w / d.unsqueeze(-1)).mT @ root_p)
        trace = plain - a_root.pow(2).sum((-2, -1))
        return log_det(d, cap), trace, woodbury_mahalanobis(w, d, cap, diff)
    from disthook import broadcast_shapes

    tril = q._unbroadcasted_scale_tril
    batch = broadcast_shapes(tril.shape[:-2], root_p.shape[:-2])
    trace = _solve_lower(tril, root_p.expand(batch + tuple(root_p.shape[-2:]))).pow(2).sum(
        (-2, -1))
    half_log_det = tril.diagonal(dim1=-2, dim2=-1).log().sum(-1)
    return 2 * half_log_det, trace, batch_mahalanobis(tril, diff)


@register_kl(MultivariateNormal, MultivariateNormal)
@register_kl(LowRankMultivariateNormal, LowRankMultivariateNormal)
@register_kl(MultivariateNormal, LowRankMultivariateNormal)
@register_kl(LowRankMultivariateNormal, MultivariateNormal)
def _kl_gaussian_gaussian(p, q):
    """0.5 (tr(Sigma_q^-1 Sigma_p) + Mahalanobis - n + log det Sigma_q - log det Sigma_p)."""
    if p.event_shape != q.event_shape:
        low_rank = [isinstance(d, LowRankMultivariateNormal) for d in (p, q)]
        kind = "Low Rank " if all(low_rank) else "(Low Rank) " if any(low_rank) else ""
        raise ValueError(f"KL-divergence between two {kind}Multivariate Normals with "
                         "different event shapes cannot be computed")
    n = p.event_shape[0]
    root_p = _covariance_root(p)
    log_det_q, trace, mahalanobis = _gaussian_terms(q, root_p, q.loc - p.loc)
    if isinstance(p, LowRankMultivariateNormal):
        log_det_p = log_det(p._unbroadcasted_cov_diag, p._capacitance_tril)
    else:
        log_det_p = 2 * p._unbroadcasted_scale_tril.diagonal(dim1=-2, dim2=-1).log().sum(-1)
    return 0.5 * (trace + mahalanobis - n + log_det_q - log_det_p)
