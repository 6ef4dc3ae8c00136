"""Laplace(loc, scale): differentiable draws by the inverse CDF of a uniform."""
from __future__ import annotations

import math

from disthook.distributions.distribution import finfo, from_numpy
from disthook.distributions.normal import LocationScale

__all__ = ["Laplace"]


class Laplace(LocationScale):
    @property
    def variance(self):
        return 2 * self.scale.pow(2)

    @property
    def stddev(self):
        return math.sqrt(2) * self.scale

    def rsample(self, sample_shape=()):
        from disthook.random import gen

        # u in (-1, 1), away from -1 so that log1p(-|u|) stays finite
        low = finfo(self.loc, "eps") - 1
        u = from_numpy(gen().uniform(low, 1.0, self._extended_shape(sample_shape)), self.loc)
        return self.loc - self.scale * u.sign() * (-u.abs()).log1p()

    def log_prob(self, value):
        self._check_sample(value)
        return -(2 * self.scale).log() - (value - self.loc).abs() / self.scale

    def cdf(self, value):
        self._check_sample(value)
        z = value - self.loc
        return 0.5 - 0.5 * z.sign() * (-z.abs() / self.scale).expm1()

    def icdf(self, value):
        term = value - 0.5
        return self.loc - self.scale * term.sign() * (-2 * term.abs()).log1p()

    def entropy(self):
        return 1 + (2 * self.scale).log()
