"""Kumaraswamy(concentration1, concentration0): a transformed Uniform on (0, 1)."""
from __future__ import annotations

import math
from typing import ClassVar

from disthook.distributions import constraints
from disthook.distributions.distribution import broadcast_all
from disthook.distributions.distribution import fill_where as _where_else
from disthook.distributions.gumbel import EULER_GAMMA
from disthook.distributions.transformed_distribution import TransformedDistribution
from disthook.distributions.transforms import AffineTransform, PowerTransform
from disthook.distributions.uniform import Uniform

__all__ = ["Kumaraswamy"]


def _kumaraswamy_moment(a, b, n: int):
    """E[X^n] = b * B(1 + n / a, b)."""
    shifted = 1 + n / a
    return b * (shifted.lgamma() + b.lgamma() - (shifted + b).lgamma()).exp()


class Kumaraswamy(TransformedDistribution):
    """(1 - (1 - U) ** (1 / concentration0)) ** (1 / concentration1) for U uniform."""

    arg_constraints: ClassVar[dict] = {"concentration1": constraints.positive,
                                       "concentration0": constraints.positive}
    support = constraints.unit_interval
    has_rsample = True
    _expand_params: ClassVar[tuple] = ("concentration1", "concentration0")

    def __init__(self, concentration1, concentration0,
                 validate_args: bool | None = None) -> None:
        from disthook import ones_like, zeros_like

        self.concentration1, self.concentration0 = broadcast_all(concentration1,
                                                                 concentration0)
        base = Uniform(zeros_like(self.concentration0), ones_like(self.concentration0),
                       validate_args=validate_args)
        transforms = [PowerTransform(self.concentration0.reciprocal()),
                      AffineTransform(1.0, -1.0),
                      PowerTransform(self.concentration1.reciprocal())]
        super().__init__(base, transforms, validate_args=validate_args)

    @property
    def mean(self):
        return _kumaraswamy_moment(self.concentration1, self.concentration0, 1)

    @property
    def mode(self):
        """((a - 1) / (a b - 1)) ** (1 / a) where a, b >= 1 (not both 1); NaN elsewhere.
        torch 2.13's own formula gives NaN for every parameter; this is the density's
        maximum."""
        a, b = self.concentration1, self.concentration0
        has_mode = (a >= 1) & (b >= 1) & ((a > 1) | (b > 1))
        safe_a = _where_else(has_mode, a, 2.0)  # keeps the unused branch finite
        safe_b = _where_else(has_mode, b, 2.0)
        log_mode = ((safe_a - 1).log() - (safe_a * safe_b - 1).log()) / safe_a
        return _where_else(has_mode, log_mode.exp(), math.nan)

    @property
    def variance(self):
        second = _kumaraswamy_moment(self.concentration1, self.concentration0, 2)
        return second - self.mean.pow(2)

    def entropy(self):
        a, b = self.concentration1, self.concentration0
        harmonic = (b + 1).digamma() + EULER_GAMMA
        return (1 - b.reciprocal()) + (1 - a.reciprocal()) * harmonic - a.log() - b.log()
