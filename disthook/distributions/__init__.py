"""``torch.distributions``: distributions differentiable through disthook's ops.

Continuous: Normal, Uniform, Exponential, Laplace, Cauchy, Gumbel, LogNormal, HalfNormal,
HalfCauchy, StudentT, Gamma, Chi2, InverseGamma, Beta, Kumaraswamy, Dirichlet, Weibull,
Pareto, GeneralizedPareto, LogisticNormal, FisherSnedecor, ContinuousBernoulli, VonMises,
LKJCholesky, Wishart, MultivariateNormal, LowRankMultivariateNormal. Discrete: Bernoulli, Geometric,
Binomial, NegativeBinomial, Multinomial, Poisson, Categorical,
OneHotCategorical(StraightThrough). Relaxed: RelaxedBernoulli, RelaxedOneHotCategorical.
Built from others: Independent, MixtureSameFamily, TransformedDistribution (``transforms``:
Affine, Exp, Sigmoid, Tanh, Abs, Compose, Power, Softplus, Softmax, StickBreaking,
Independent, Reshape, LowerCholesky, PositiveDefinite, CumulativeDistribution, Cat, Stack,
CorrCholesky; ``biject_to`` / ``transform_to``).

ExponentialFamily is the base of the exponential families (entropy and same-family KL from
the log normalizer).

Each has ``log_prob``, ``entropy``, moments, ``cdf`` / ``icdf`` where torch has them,
``expand``, and torch's argument validation (``constraints``, ``validate_args``,
``Distribution.set_default_validate_args``). ``rsample`` is pathwise where torch's is
(location-scale families, MultivariateNormal, relaxed, transforms); Gamma, Chi2,
InverseGamma, Beta, Dirichlet, StudentT, FisherSnedecor and Wishart draw without gradient
and their ``rsample`` raises: torch's implicit gradient is not reproduced. Draws come from
disthook's random stream (``manual_seed``), not torch's. ``kl_divergence`` /
``register_kl`` dispatch as torch does, with torch's closed forms for the pairs among these
classes.

Every public name of torch 2.13's ``torch.distributions`` is here (``disthook._surface``).
"""
from __future__ import annotations

import importlib

# where each name lives: submodules are imported when a name of theirs is first read, so
# that ``import disthook`` does not pay for forty distributions nobody may use
_HOMES = {
    "bernoulli": ("Bernoulli",),
    "beta": ("Beta",),
    "binomial": ("Binomial",),
    "categorical": ("Categorical",),
    "cauchy": ("Cauchy",),
    "chi2": ("Chi2",),
    "constraint_registry": ("biject_to", "transform_to"),
    "continuous_bernoulli": ("ContinuousBernoulli",),
    "dirichlet": ("Dirichlet",),
    "distribution": ("Distribution",),
    "exp_family": ("ExponentialFamily",),
    "exponential": ("Exponential",),
    "fishersnedecor": ("FisherSnedecor",),
    "gamma": ("Gamma",),
    "generalized_pareto": ("GeneralizedPareto",),
    "geometric": ("Geometric",),
    "gumbel": ("Gumbel",),
    "half_cauchy": ("HalfCauchy",),
    "half_normal": ("HalfNormal",),
    "independent": ("Independent",),
    "inverse_gamma": ("InverseGamma",),
    "kl": ("kl_divergence", "register_kl"),
    "kumaraswamy": ("Kumaraswamy",),
    "laplace": ("Laplace",),
    "lkj_cholesky": ("LKJCholesky",),
    "log_normal": ("LogNormal",),
    "logistic_normal": ("LogisticNormal",),
    "lowrank_multivariate_normal": ("LowRankMultivariateNormal",),
    "mixture_same_family": ("MixtureSameFamily",),
    "multinomial": ("Multinomial",),
    "multivariate_normal": ("MultivariateNormal",),
    "negative_binomial": ("NegativeBinomial",),
    "normal": ("Normal",),
    "one_hot_categorical": ("OneHotCategorical", "OneHotCategoricalStraightThrough"),
    "pareto": ("Pareto",),
    "poisson": ("Poisson",),
    "relaxed_bernoulli": ("RelaxedBernoulli",),
    "relaxed_categorical": ("RelaxedOneHotCategorical",),
    "studentT": ("StudentT",),
    "transformed_distribution": ("TransformedDistribution",),
    "transforms": ("AbsTransform", "AffineTransform", "CatTransform", "ComposeTransform",
                   "CorrCholeskyTransform", "CumulativeDistributionTransform", "ExpTransform",
                   "IndependentTransform", "LowerCholeskyTransform", "PositiveDefiniteTransform",
                   "PowerTransform", "ReshapeTransform", "SigmoidTransform", "SoftmaxTransform",
                   "SoftplusTransform", "StackTransform", "StickBreakingTransform", "TanhTransform",
                   "Transform", "identity_transform"),
    "uniform": ("Uniform",),
    "von_mises": ("VonMises",),
    "weibull": ("Weibull",),
    "wishart": ("Wishart",),
}
_WHERE = {name: module for module, names in _HOMES.items() for name in names}
_SUBMODULES = ("constraints", "constraint_registry", "kl", "transforms", "utils")

__all__ = [
    "AbsTransform", "AffineTransform", "Bernoulli", "Beta", "Binomial", "CatTransform",
    "Categorical", "Cauchy", "Chi2", "ComposeTransform", "ContinuousBernoulli",
    "CorrCholeskyTransform", "CumulativeDistributionTransform", "Dirichlet", "Distribution",
    "ExpTransform", "Exponential", "ExponentialFamily", "FisherSnedecor", "Gamma",
    "GeneralizedPareto", "Geometric", "Gumbel", "HalfCauchy", "HalfNormal", "Independent",
    "IndependentTransform", "InverseGamma", "Kumaraswamy", "LKJCholesky", "Laplace", "LogNormal",
    "LogisticNormal", "LowRankMultivariateNormal", "LowerCholeskyTransform", "MixtureSameFamily",
    "Multinomial", "MultivariateNormal", "NegativeBinomial", "Normal", "OneHotCategorical",
    "OneHotCategoricalStraightThrough", "Pareto", "Poisson", "PositiveDefiniteTransform",
    "PowerTransform", "RelaxedBernoulli", "RelaxedOneHotCategorical", "ReshapeTransform",
    "SigmoidTransform", "SoftmaxTransform", "SoftplusTransform", "StackTransform",
    "StickBreakingTransform", "StudentT", "TanhTransform", "Transform", "TransformedDistribution",
    "Uniform", "VonMises", "Weibull", "Wishart", "biject_to", "constraints", "identity_transform",
    "kl", "kl_divergence", "register_kl", "transform_to", "transforms",
]


def __getattr__(name: str):
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
