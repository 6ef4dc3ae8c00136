"""Uniform(low, high) on [low, high): differentiable draws ``low + u * (high - low)``."""
from __future__ import annotations

from typing import ClassVar

from disthook.distributions import constraints
from disthook.distributions.distribution import Distribution, broadcast_all, from_numpy

__all__ = ["Uniform"]


class Uniform(Distribution):
    has_rsample = True
    _expand_params: ClassVar[tuple] = ("low", "high")

    def __init__(self, low, high, validate_args: bool | None = None) -> None:
        self.low, self.high = broadcast_all(low, high)
        super().__init__(self.low.shape, (), validate_args)

    @property
    def arg_constraints(self):
        return {"low": constraints.less_than(self.high),
                "high": constraints.greater_than(self.low)}

    @constraints.dependent_property(is_discrete=False, event_dim=0)
    def support(self):
        return constraints.interval(self.low, self.high)

    @property
    def mean(self):
        return (self.high + self.low) / 2

    @property
    def mode(self):
        return float("nan") * self.high

    @property
    def stddev(self):
        return (self.high - self.low) / 12 ** 0.5

    @property
    def variance(self):
        return (self.high - self.low).pow(2) / 12

    def rsample(self, sample_shape=()):
        from disthook.random import gen

        u = from_numpy(gen().random(self._extended_shape(sample_shape)), self.low)
        return self.low + u * (self.high - self.low)

    def log_prob(self, value):
        self._check_sample(value)
        inside = (self.low <= value) & (self.high > value)
        return inside.to(self.low.dtype).log() - (self.high - self.low).log()

    def cdf(self, value):
        self._check_sample(value)
        return ((value - self.low) / (self.high - self.low)).clamp(min=0, max=1)

    def icdf(self, value):
        return value * (self.high - self.low) + self.low

    def entropy(self):
        return (self.high - self.low).log()
