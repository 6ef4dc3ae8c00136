"""Relaxed (Concrete / Gumbel-softmax) distributions: continuous stand-ins for Bernoulli and
one-hot Categorical draws whose samples are differentiable in ``probs`` / ``logits``.

RelaxedBernoulli is sigmoid(LogitRelaxedBernoulli); RelaxedOneHotCategorical is
exp(ExpRelaxedCategorical), whose draws are the log-softmax of (logits + Gumbel noise) /
temperature.
"""
from __future__ import annotations

from typing import ClassVar

from disthook.distributions import constraints
from disthook.distributions.bernoulli import BinaryEvent
from disthook.distributions.distribution import as_float_tensor, finfo, from_numpy
from disthook.distributions.transformed_distribution import TransformedDistribution
from disthook.distributions.transforms import SigmoidTransform

__all__ = ["LogitRelaxedBernoulli", "RelaxedBernoulli"]


def _open_uniform(like, shape):
    """Uniform draws kept inside [eps, 1 - eps] (so both their logs are finite)."""
    import numpy as np

    from disthook.random import gen

    eps = finfo(like, "eps")
    return from_numpy(np.clip(gen().random(shape), eps, 1 - eps), like)


class LogitRelaxedBernoulli(BinaryEvent):
    """The logit of a RelaxedBernoulli draw: (logistic noise + logits) / temperature."""

    support = constraints.real
    has_rsample = True

    def __init__(self, temperature, probs=None, logits=None,
                 validate_args: bool | None = None) -> None:
        self.temperature = as_float_tensor(temperature)
        super().__init__(probs, logits, validate_args)

    def expand(self, batch_shape, _instance=None):
        new = super().expand(batch_shape, _instance)
        new.temperature = self.temperature
        return new

    def rsample(self, sample_shape=()):
        eps = finfo(self.probs, "eps")
        probs = self.probs.clamp(eps, 1 - eps)
        u = _open_uniform(probs, self._extended_shape(sample_shape))
        noise = u.log() - (-u).log1p()
        return (noise + probs.log() - (-probs).log1p()) / self.temperature

    def log_prob(self, value):
        self._check_sample(value)
        diff = self.logits - value * self.temperature
        return self.temperature.log() + diff - 2 * diff.exp().log1p()


class _RelaxedOf(TransformedDistribution):
    """A relaxed distribution: its base's temperature, logits and probs, transformed."""

    @property
    def temperature(self):
        return self.base_dist.temperature

    @property
    def logits(self):
        return self.base_dist.logits

    @property
    def probs(self):
        return self.base_dist.probs


class RelaxedBernoulli(_RelaxedOf):
    arg_constraints: ClassVar[dict] = {"probs": constraints.unit_interval,
                                       "logits": constraints.real}
    support = constraints.unit_interval
    has_rsample = True

    def __init__(self, temperature, probs=None, logits=None,
                 validate_args: bool | None = None) -> None:
        base = LogitRelaxedBernoulli(temperature, probs, logits)
        super().__init__(base, SigmoidTransform(), validate_args=validate_args)
