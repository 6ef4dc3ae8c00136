"""Distributions defined as a transform of a simpler one: Weibull and Pareto (of an
Exponential), Kumaraswamy (of a Uniform), InverseGamma (1 / Gamma) and LogisticNormal
(stick-breaking of a Normal). Their densities and draws come from TransformedDistribution;
moments and entropies are the closed forms."""
from __future__ import annotations

import math
from typing import ClassVar

from disthook.distributions import constraints
from disthook.distributions.distribution import broadcast_all
from disthook.distributions.exponential import Exponential
from disthook.distributions.gamma import Gamma
from disthook.distributions.gumbel import EULER_GAMMA
from disthook.distributions.normal import Normal
from disthook.distributions.transformed_distribution import TransformedDistribution
from disthook.distributions.transforms import (
    AffineTransform,
    ExpTransform,
    PowerTransform,
    StickBreakingTransform,
)
from disthook.distributions.uniform import Uniform

__all__ = ["InverseGamma", "Kumaraswamy", "LogisticNormal", "Pareto", "Weibull"]


def _where_else(condition, value, fill: float):
    from disthook import full_like, where

    return where(condition, value, full_like(value, fill))


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


class Pareto(TransformedDistribution):
    """scale * exp(E) for E ~ Exponential(alpha)."""

    arg_constraints: ClassVar[dict] = {"alpha": constraints.positive,
                                       "scale": constraints.positive}
    _expand_params: ClassVar[tuple] = ("scale", "alpha")

    def __init__(self, scale, alpha, validate_args: bool | None = None) -> None:
        self.scale, self.alpha = broadcast_all(scale, alpha)
        base = Exponential(self.alpha, validate_args=validate_args)
        super().__init__(base, [ExpTransform(), AffineTransform(0, self.scale)],
                         validate_args=validate_args)

    @constraints.dependent_property(is_discrete=False, event_dim=0)
    def support(self):
        return constraints.greater_than_eq(self.scale)

    @property
    def mean(self):
        a = self.alpha.clamp(min=1)  # infinite for alpha <= 1
        return a * self.scale / (a - 1)

    @property
    def mode(self):
        return self.scale

    @property
    def variance(self):
        a = self.alpha.clamp(min=2)  # infinite for alpha <= 2
        return self.scale.pow(2) * a / ((a - 1).pow(2) * (a - 2))

    def entropy(self):
        return (self.scale / self.alpha).log() + (1 + self.alpha.reciprocal())


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


class LogisticNormal(TransformedDistribution):
    """Stick-breaking of a Normal vector: a distribution on the simplex."""

    arg_constraints: ClassVar[dict] = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.simplex
    has_rsample = True

    def __init__(self, loc, scale, validate_args: bool | None = None) -> None:
        base = Normal(loc, scale, validate_args=validate_args)
        if not base.batch_shape:
            base = base.expand((1,))
        super().__init__(base, StickBreakingTransform(), validate_args=validate_args)

    @property
    def loc(self):
        return self.base_dist.base_dist.loc

    @property
    def scale(self):
        return self.base_dist.base_dist.scale
