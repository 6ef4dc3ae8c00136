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
from disthook.distributions import constraints, transforms
from disthook.distributions.bernoulli import Bernoulli, Geometric
from disthook.distributions.binomial import Binomial, NegativeBinomial
from disthook.distributions.categorical import Categorical
from disthook.distributions.cauchy import Cauchy, HalfCauchy
from disthook.distributions.constraint_registry import biject_to, transform_to
from disthook.distributions.continuous_bernoulli import ContinuousBernoulli
from disthook.distributions.distribution import Distribution
from disthook.distributions.exp_family import ExponentialFamily
from disthook.distributions.exponential import Exponential
from disthook.distributions.fisher_snedecor import FisherSnedecor
from disthook.distributions.gamma import Beta, Chi2, Dirichlet, Gamma
from disthook.distributions.generalized_pareto import GeneralizedPareto
from disthook.distributions.gumbel import Gumbel
from disthook.distributions.independent import Independent
from disthook.distributions.kl import kl_divergence, register_kl
from disthook.distributions.laplace import Laplace
from disthook.distributions.lkj_cholesky import CorrCholeskyTransform, LKJCholesky
from disthook.distributions.lowrank_multivariate_normal import LowRankMultivariateNormal
from disthook.distributions.mixture_same_family import MixtureSameFamily
from disthook.distributions.multinomial import Multinomial
from disthook.distributions.multivariate_normal import MultivariateNormal
from disthook.distributions.normal import Normal
from disthook.distributions.one_hot_categorical import (
    OneHotCategorical,
    OneHotCategoricalStraightThrough,
)
from disthook.distributions.poisson import Poisson
from disthook.distributions.relaxed import RelaxedBernoulli, RelaxedOneHotCategorical
from disthook.distributions.student_t import StudentT
from disthook.distributions.transformed_distribution import (
    HalfNormal,
    LogNormal,
    TransformedDistribution,
)
from disthook.distributions.transformed_families import (
    InverseGamma,
    Kumaraswamy,
    LogisticNormal,
    Pareto,
    Weibull,
)
from disthook.distributions.transforms import (
    AbsTransform,
    AffineTransform,
    CatTransform,
    ComposeTransform,
    CumulativeDistributionTransform,
    ExpTransform,
    IndependentTransform,
    LowerCholeskyTransform,
    PositiveDefiniteTransform,
    PowerTransform,
    ReshapeTransform,
    SigmoidTransform,
    SoftmaxTransform,
    SoftplusTransform,
    StackTransform,
    StickBreakingTransform,
    TanhTransform,
    Transform,
    identity_transform,
)
from disthook.distributions.uniform import Uniform
from disthook.distributions.von_mises import VonMises
from disthook.distributions.wishart import Wishart

__all__ = [
    "AbsTransform",
    "AffineTransform",
    "Bernoulli",
    "Beta",
    "Binomial",
    "CatTransform",
    "Categorical",
    "Cauchy",
    "Chi2",
    "ComposeTransform",
    "ContinuousBernoulli",
    "CorrCholeskyTransform",
    "CumulativeDistributionTransform",
    "Dirichlet",
    "Distribution",
    "ExpTransform",
    "Exponential",
    "ExponentialFamily",
    "FisherSnedecor",
    "Gamma",
    "GeneralizedPareto",
    "Geometric",
    "Gumbel",
    "HalfCauchy",
    "HalfNormal",
    "Independent",
    "IndependentTransform",
    "InverseGamma",
    "Kumaraswamy",
    "LKJCholesky",
    "Laplace",
    "LogNormal",
    "LogisticNormal",
    "LowRankMultivariateNormal",
    "LowerCholeskyTransform",
    "MixtureSameFamily",
    "Multinomial",
    "MultivariateNormal",
    "NegativeBinomial",
    "Normal",
    "OneHotCategorical",
    "OneHotCategoricalStraightThrough",
    "Pareto",
    "Poisson",
    "PositiveDefiniteTransform",
    "PowerTransform",
    "RelaxedBernoulli",
    "RelaxedOneHotCategorical",
    "ReshapeTransform",
    "SigmoidTransform",
    "SoftmaxTransform",
    "SoftplusTransform",
    "StackTransform",
    "StickBreakingTransform",
    "StudentT",
    "TanhTransform",
    "Transform",
    "TransformedDistribution",
    "Uniform",
    "VonMises",
    "Weibull",
    "Wishart",
    "biject_to",
    "constraints",
    "identity_transform",
    "kl",
    "kl_divergence",
    "register_kl",
    "transform_to",
    "transforms",
]
