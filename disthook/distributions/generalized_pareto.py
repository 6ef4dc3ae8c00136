"""GeneralizedPareto(loc, scale, concentration): the law of exceedances over a threshold.

With z = (x - loc) / scale and xi the concentration, the survival function is
(1 + xi z)^(-1/xi), and exp(-z) in the limit xi = 0; xi within 1e-8 of 0 takes the limit
(so the formulas never divide by xi there). Draws are the inverse CDF of a uniform.
"""
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

__all__ = ["GeneralizedPareto"]


def _fill(condition, value, fill: float):
    """``value`` where ``condition`` holds, ``fill`` elsewhere."""
    from disthook import full_like, where

    return where(condition, value, full_like(value, fill))


class GeneralizedPareto(LocationMean, Distribution):
    arg_constraints: ClassVar[dict] = {"loc": constraints.real, "scale": constraints.positive,
                                       "concentration": constraints.real}
    has_rsample = True
    _expand_params: ClassVar[tuple] = ("loc", "scale", "concentration")

    def __init__(self, loc, scale, concentration, validate_args: bool | None = None) -> None:
        self.loc, self.scale, self.concentration = broadcast_all(loc, scale, concentration)
        super().__init__(self.loc.shape, (), validate_args)

    def _shape(self):
        """(where xi is zero, xi with those entries set to 1)."""
        is_zero = self.concentration.abs() <= 1e-8
        return is_zero, _fill(~is_zero, self.concentration, 1.0)

    @constraints.dependent_property(is_discrete=False, event_dim=0)
    def support(self):

        xi = self.concentration
        bounded = xi < 0
        upper = self.loc - self.scale / _fill(bounded, xi, -1.0)
        return constraints.interval(self.loc, _fill(bounded, upper, math.inf))

    @property
    def mean(self):
        finite = self.concentration < 1
        xi = _fill(finite, self.concentration, 0.5)
        return _fill(finite, self.loc + self.scale / (1 - xi), math.nan)

    @property
    def variance(self):
        finite = self.concentration < 0.5
        xi = _fill(finite, self.concentration, 0.25)
        return _fill(finite, self.scale.pow(2) / ((1 - xi).pow(2) * (1 - 2 * xi)), math.nan)

    def rsample(self, sample_shape=()):
        from disthook.random import gen

        u = from_numpy(gen().random(self._extended_shape(sample_shape)), self.loc)
        return self.icdf(u)

    def log_prob(self, value):
        from disthook import where

        self._check_sample(value)
        z = (value - self.loc) / self.scale
        is_zero, xi = self._shape()
        power = 1 / xi + 1
        general = where(power == 0, power, power * (xi * z).log1p())
        return -self.scale.log() - where(is_zero, z, general)

    def log_survival_function(self, value):
        from disthook import where

        self._check_sample(value)
        z = (value - self.loc) / self.scale
        is_zero, xi = self._shape()
        return where(is_zero, -z, -(xi * z).log1p() / xi)

    def log_cdf(self, value):
        return (-self.log_survival_function(value).exp()).log1p()

    def cdf(self, value):
        return self.log_cdf(value).exp()

    def icdf(self, value):
        from disthook import where

        is_zero, xi = self._shape()
        log_tail = (-value).log1p()
        general = self.loc + self.scale / xi * (-xi * log_tail).expm1()
        return where(is_zero, self.loc - self.scale * log_tail, general)

    def entropy(self):
        value = self.scale.log() + self.concentration + 1
        return value.broadcast_to(tuple(self._batch_shape))
