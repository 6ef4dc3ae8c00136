"""``torch.distributions``: Normal, Categorical and Bernoulli, differentiable through
disthook's ops (``rsample`` and ``log_prob`` carry gradients to the parameters).

Other torch distributions, transforms and ``kl_divergence`` are not provided: their names
raise an AttributeError naming the three that are.
"""
from disthook.distributions.bernoulli import Bernoulli
from disthook.distributions.categorical import Categorical
from disthook.distributions.distribution import Distribution
from disthook.distributions.normal import Normal

__all__ = ["Bernoulli", "Categorical", "Distribution", "Normal"]


def __getattr__(name: str):
    if name[:1].isupper() or name in ("kl_divergence", "register_kl", "transforms",
                                      "constraints"):
        raise AttributeError(
            f"disthook.distributions has no {name}: it provides Normal, Categorical and "
            "Bernoulli (log_prob, sample, rsample for Normal, entropy, mean, variance)")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
