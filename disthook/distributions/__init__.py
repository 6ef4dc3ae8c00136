"""``torch.distributions``: Normal, Categorical and Bernoulli, differentiable through
disthook's ops (``rsample`` and ``log_prob`` carry gradients to the parameters).

Other torch distributions, transforms and ``kl_divergence`` are not provided: their names
import and raise NotImplementedError at use, naming the three that are (``disthook._surface``).
"""
from disthook.distributions.bernoulli import Bernoulli
from disthook.distributions.categorical import Categorical
from disthook.distributions.distribution import Distribution
from disthook.distributions.normal import Normal

__all__ = ["Bernoulli", "Categorical", "Distribution", "Normal"]

