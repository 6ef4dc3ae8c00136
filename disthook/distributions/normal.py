"""Normal(loc, scale): differentiable draws ``loc + scale * eps``."""
from __future__ import annotations

import math
from typing import ClassVar

from disthook.distributions import constraints
from disthook.distributions.distribution import (
    Distribution,
    LocationMean,
    broadcast_all,
    from_numpy,
)
from disthook.distributions.exp_family import ExponentialFamily

__all__ = ["LocationScale", "Normal"]


class LocationScale(LocationMean, Distribution):
    """A family on the reals given by ``loc`` and a positive ``scale`` (Normal, Laplace),
    both broadcast to the batch shape; draws are differentiable in both."""

    arg_constraints: ClassVar[dict] = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    has_rsample = True
    _expand_params: ClassVar[tuple] = ("loc", "scale")

    def __init__(self, loc, scale, validate_args: bool | None = None) -> None:
        self.loc, self.scale = broadcast_all(loc, scale)
        super().__init__(self.loc.shape, (), validate_args)


class Normal(LocationScale, ExponentialFamily):
    _mean_carrier_measure = 0

    @property
    def _natural_params(self):
        return (self.loc / self.scale.pow(2), -0.5 * self.scale.pow(2).reciprocal())

    def _log_normalizer(self, x, y):
        return -0.25 * x.pow(2) / y + 0.5 * (-math.pi / y).log()


    @property
    def variance(self):
        return self.scale.pow(2)

    @property
    def stddev(self):
        return self.scale

    def rsample(self, sample_shape=()):
        from disthook.random import gen

        eps = gen().standard_normal(self._extended_shape(sample_shape))
        return self.loc + from_numpy(eps, self.loc) * self.scale

    def log_prob(self, value):
        self._check_sample(value)
        var = self.scale ** 2
        return -((value - self.loc) ** 2) / (2 * var) - self.scale.log() - math.log(
            math.sqrt(2 * math.pi))

    def cdf(self, value):
        self._check_sample(value)
        # times the scale's reciprocal, as torch: with float32 parameters it is float32's
        return 0.5 * (1 + ((value - self.loc) * self.scale.reciprocal() / math.sqrt(2)).erf())

    def icdf(self, value):
        return self.loc + self.scale * (2 * value - 1).erfinv() * math.sqrt(2)

    def entropy(self):
        return 0.5 + 0.5 * math.log(2 * math.pi) + self.scale.log()
