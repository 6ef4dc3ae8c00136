"""Cauchy(loc, scale) and HalfCauchy(scale): heavy tails, no mean or variance."""
from __future__ import annotations

import math

from disthook.distributions.distribution import from_numpy
from disthook.distributions.normal import LocationScale

__all__ = ["Cauchy"]


class Cauchy(LocationScale):
    @property
    def mean(self):
        from disthook import full

        return full(self._extended_shape(), math.nan, dtype=self.loc.dtype)

    @property
    def variance(self):
        from disthook import full

        return full(self._extended_shape(), math.inf, dtype=self.loc.dtype)

    def rsample(self, sample_shape=()):
        from disthook.random import gen

        eps = gen().standard_cauchy(self._extended_shape(sample_shape))
        return self.loc + from_numpy(eps, self.loc) * self.scale

    def log_prob(self, value):
        self._check_sample(value)
        z = (value - self.loc) / self.scale
        return -math.log(math.pi) - self.scale.log() - z.pow(2).log1p()

    def cdf(self, value):
        self._check_sample(value)
        return ((value - self.loc) / self.scale).atan() / math.pi + 0.5

    def icdf(self, value):
        return (math.pi * (value - 0.5)).tan() * self.scale + self.loc

    def entropy(self):
        return math.log(4 * math.pi) + self.scale.log()
