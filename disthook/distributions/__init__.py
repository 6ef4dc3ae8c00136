"""``torch.distributions``: distributions differentiable through disthook's ops.

Normal, Uniform, Exponential, Laplace, LogNormal, HalfNormal, MultivariateNormal,
Independent, TransformedDistribution, Bernoulli, Categorical, OneHotCategorical(StraightThrough),
Poisson, Gamma, Beta and Dirichlet, with ``log_prob``, ``entropy``, moments, ``cdf`` /
``icdf`` where torch has them, ``expand`` and torch's argument validation (``constraints``,
``validate_args``, ``Distribution.set_default_validate_args``). ``rsample`` is pathwise for
the location-scale families, MultivariateNormal and transforms; Gamma, Beta and Dirichlet
draw without gradient (their ``rsample`` raises: torch's implicit gradient is not
reproduced). Draws come from disthook's random stream (``manual_seed``), not torch's.
``kl_divergence`` / ``register_kl`` dispatch as torch does, with torch's closed forms for
the pairs above; ``transforms`` has Affine, Exp, Sigmoid, Tanh, Abs and Compose.

Other torch distributions and transforms import and raise NotImplementedError at use
(``disthook._surface``).
"""
from disthook.distributions import constraints, transforms
from disthook.distributions.bernoulli import Bernoulli
from disthook.distributions.categorical import Categorical
from disthook.distributions.distribution import Distribution
from disthook.distributions.exponential import Exponential
from disthook.distributions.gamma import Beta, Dirichlet, Gamma
from disthook.distributions.independent import Independent
from disthook.distributions.kl import kl_divergence, register_kl
from disthook.distributions.laplace import Laplace
from disthook.distributions.multivariate_normal import MultivariateNormal
from disthook.distributions.normal import Normal
from disthook.distributions.one_hot_categorical import (
    OneHotCategorical,
    OneHotCategoricalStraightThrough,
)
from disthook.distributions.poisson import Poisson
from disthook.distributions.transformed_distribution import (
    HalfNormal,
    LogNormal,
    TransformedDistribution,
)
from disthook.distributions.transforms import (
    AbsTransform,
    AffineTransform,
    ComposeTransform,
    ExpTransform,
    SigmoidTransform,
    TanhTransform,
    Transform,
    identity_transform,
)
from disthook.distributions.uniform import Uniform

__all__ = [
    "AbsTransform",
    "AffineTransform",
    "Bernoulli",
    "Beta",
    "Categorical",
    "ComposeTransform",
    "Dirichlet",
    "Distribution",
    "ExpTransform",
    "Exponential",
    "Gamma",
    "HalfNormal",
    "Independent",
    "Laplace",
    "LogNormal",
    "MultivariateNormal",
    "Normal",
    "OneHotCategorical",
    "OneHotCategoricalStraightThrough",
    "Poisson",
    "SigmoidTransform",
    "TanhTransform",
    "Transform",
    "TransformedDistribution",
    "Uniform",
    "constraints",
    "identity_transform",
    "kl",
    "kl_divergence",
    "register_kl",
    "transforms",
]
