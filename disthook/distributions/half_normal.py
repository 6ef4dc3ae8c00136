"""HalfNormal(scale) = |Normal(0, scale)|."""
from __future__ import annotations

import math

from disthook.distributions.normal import Normal
from disthook.distributions.transformed_distribution import HalfDistribution

__all__ = ["HalfNormal"]


class HalfNormal(HalfDistribution):
    """|Normal(0, scale)|."""

    def __init__(self, scale, validate_args: bool | None = None) -> None:
        super().__init__(Normal(0, scale, validate_args=False), validate_args)

    @property
    def mean(self):
        return self.scale * math.sqrt(2 / math.pi)

    @property
    def variance(self):
        return self.scale.pow(2) * (1 - 2 / math.pi)
