"""Weibull(scale, concentration) = scale * Exponential(1) ** (1 / concentration)."""
from __future__ import annotations

from typing import ClassVar

from disthook.distributions import constraints
from disthook.distributions.distribution import broadcast_all
from disthook.distributions.exponential import Exponential
from disthook.distributions.gumbel import EULER_GAMMA
from disthook.distributions.transformed_distribution import TransformedDistribution
from disthook.distributions.transforms import AffineTransform, PowerTransform

__all__ = ["Weibull"]


class Weibull(TransformedDistribution):
    """scale * E ** (1 / concentration) for E standard exponential."""

    arg_constraints: ClassVar[dict] = {"scale": constraints.positive,
                                       "concentration": constraints.positive}
    support = constraints.positive
    _expand_params: ClassVar[tuple] = ("scale", "concentration", "concentration_reciprocal")

    def __init__(self, scale, concentration, validate_args: bool | None = None) -> None:
        from disthook import ones_like

        self.scale, self.concentration = broadcast_all(scale, concentration)
        self.concentration_reciprocal = self.concentration.reciprocal()
        base = Exponential(ones_like(self.scale), validate_args=validate_args)
        transforms = [PowerTransform(self.concentration_reciprocal),
                      AffineTransform(0, self.scale)]
        super().__init__(base, transforms, validate_args=validate_args)

    @property
    def mean(self):
        return self.scale * (1 + self.concentration_reciprocal).lgamma().exp()

    @property
    def mode(self):
        c = self.concentration
        return self.scale * ((c - 1) / c) ** c.reciprocal()

    @property
    def variance(self):
        k = self.concentration_reciprocal
        return self.scale.pow(2) * ((1 + 2 * k).lgamma().exp() - (2 * (1 + k).lgamma()).exp())

    def entropy(self):
        k = self.concentration_reciprocal
        return EULER_GAMMA * (1 - k) + (self.scale * k).log() + 1
