"""InverseGamma(concentration, rate) = 1 / Gamma(concentration, rate)."""
from __future__ import annotations

import math
from typing import ClassVar

from disthook.distributions import constraints
from disthook.distributions.distribution import fill_where as _where_else
from disthook.distributions.gamma import Gamma
from disthook.distributions.transformed_distribution import TransformedDistribution
from disthook.distributions.transforms import PowerTransform

__all__ = ["InverseGamma"]


class InverseGamma(TransformedDistribution):
    """1 / Gamma(concentration, rate)."""

    arg_constraints: ClassVar[dict] = {"concentration": constraints.positive,
                                       "rate": constraints.positive}
    support = constraints.positive

    def __init__(self, concentration, rate, validate_args: bool | None = None) -> None:
        from disthook import tensor

        base = Gamma(concentration, rate, validate_args=validate_args)
        minus_one = tensor(-1.0, dtype=base.rate.dtype)
        super().__init__(base, PowerTransform(minus_one), validate_args=validate_args)

    @property
    def concentration(self):
        return self.base_dist.concentration

    @property
    def rate(self):
        return self.base_dist.rate

    @property
    def mean(self):
        return _where_else(self.concentration > 1, self.rate / (self.concentration - 1),
                           math.inf)

    @property
    def mode(self):
        return self.rate / (self.concentration + 1)

    @property
    def variance(self):
        c = self.concentration
        value = self.rate.square() / ((c - 1).square() * (c - 2))
        return _where_else(c > 2, value, math.inf)

    def entropy(self):
        c = self.concentration
        return c + self.rate.log() + c.lgamma() - (1 + c) * c.digamma()
