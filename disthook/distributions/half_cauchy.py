"""HalfCauchy(scale) = |Cauchy(0, scale)|."""
from __future__ import annotations

import math

from disthook.distributions.cauchy import Cauchy
from disthook.distributions.transformed_distribution import HalfDistribution

__all__ = ["HalfCauchy"]


class HalfCauchy(HalfDistribution):
    """|Cauchy(0, scale)|."""

    def __init__(self, scale, validate_args: bool | None = None) -> None:
        super().__init__(Cauchy(0, scale, validate_args=False), validate_args)

    @property
    def mean(self):
        from disthook import full

        return full(self._extended_shape(), math.inf, dtype=self.scale.dtype)

    @property
    def variance(self):
        return self.base_dist.variance
