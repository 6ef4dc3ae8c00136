"""Poisson(rate): counts; draws are not differentiable."""
from __future__ import annotations

from typing import ClassVar

from disthook.distributions import constraints
from disthook.distributions.distribution import broadcast_all, from_numpy
from disthook.distributions.exp_family import ExponentialFamily

__all__ = ["Poisson"]


class Poisson(ExponentialFamily):
    @property
    def _natural_params(self):
        return (self.rate.log(),)

    def _log_normalizer(self, x):
        return x.exp()

    arg_constraints: ClassVar[dict] = {"rate": constraints.nonnegative}
    support = constraints.nonnegative_integer
    _expand_params: ClassVar[tuple] = ("rate",)

    def __init__(self, rate, validate_args: bool | None = None) -> None:
        (self.rate,) = broadcast_all(rate)
        super().__init__(self.rate.shape, (), validate_args)

    @property
    def mean(self):
        return self.rate

    @property
    def mode(self):
        return self.rate.floor()

    @property
    def variance(self):
        return self.rate

    def sample(self, sample_shape=()):
        import numpy as np

        from disthook.random import gen

        rate = np.broadcast_to(self.rate.detach()._data, self._extended_shape(sample_shape))
        return from_numpy(gen().poisson(rate.astype(np.float64)), self.rate)

    def log_prob(self, value):
        from disthook import broadcast_tensors

        self._check_sample(value)
        rate, value = broadcast_tensors(self.rate, value)
        return value.xlogy(rate) - rate - (value + 1).lgamma()
