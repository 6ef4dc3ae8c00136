"""Gumbel(loc, scale): the law of a maximum; draws ``loc - scale * log(-log(u))``."""
from __future__ import annotations

import math
from typing import ClassVar

from disthook.distributions import constraints
from disthook.distributions.distribution import broadcast_all, finfo
from disthook.distributions.transformed_distribution import TransformedDistribution
from disthook.distributions.transforms import AffineTransform, ExpTransform
from disthook.distributions.uniform import Uniform

__all__ = ["Gumbel"]

EULER_GAMMA = 0.5772156649015329


class Gumbel(TransformedDistribution):
    arg_constraints: ClassVar[dict] = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    _expand_params: ClassVar[tuple] = ("loc", "scale")

    def __init__(self, loc, scale, validate_args: bool | None = None) -> None:
        from disthook import full_like, ones_like

        self.loc, self.scale = broadcast_all(loc, scale)
        # u in (tiny, 1 - eps) so that both logs stay finite
        low, high = finfo(self.loc, "tiny"), 1 - finfo(self.loc, "eps")
        base = Uniform(full_like(self.loc, low), full_like(self.loc, high),
                       validate_args=validate_args)
        transforms = [ExpTransform().inv, AffineTransform(0, -ones_like(self.scale)),
                      ExpTransform().inv, AffineTransform(self.loc, -self.scale)]
        super().__init__(base, transforms, validate_args=validate_args)

    def log_prob(self, value):
        self._check_sample(value)
        y = (self.loc - value) / self.scale
        return (y - y.exp()) - self.scale.log()

    @property
    def mean(self):
        return self.loc + self.scale * EULER_GAMMA

    @property
    def mode(self):
        return self.loc

    @property
    def stddev(self):
        return (math.pi / math.sqrt(6)) * self.scale

    @property
    def variance(self):
        return self.stddev.pow(2)

    def entropy(self):
        return self.scale.log() + (1 + EULER_GAMMA)
