"""Normal(loc, scale): differentiable draws ``loc + scale * eps``."""
from __future__ import annotations

import math

from disthook.distributions.distribution import Distribution, as_float_tensor

__all__ = ["Normal"]


class Normal(Distribution):
    has_rsample = True

    def __init__(self, loc, scale, validate_args: bool | None = None) -> None:
        from disthook import broadcast_tensors
        from disthook.tensor import Tensor

        loc = as_float_tensor(loc, scale if isinstance(scale, Tensor) else None)
        scale = as_float_tensor(scale, loc)
        self.loc, self.scale = broadcast_tensors(loc, scale)
        super().__init__(self.loc.shape, (), validate_args)
        if self._validate_args and not bool((self.scale > 0).all()):
            raise ValueError(
                f"Expected parameter scale ({type(scale).__name__} of shape "
                f"{tuple(scale.shape)}) of distribution {self!r} to satisfy the constraint "
                f"GreaterThan(lower_bound=0.0), but found invalid values:\n{scale}")

    @property
    def mean(self):
        return self.loc

    @property
    def mode(self):
        return self.loc

    @property
    def variance(self):
        return self.scale.pow(2)

    @property
    def stddev(self):
        return self.scale

    def rsample(self, sample_shape=()):
        from disthook.random import gen
        from disthook.tensor import Tensor

        shape = self._extended_shape(sample_shape)
        eps = gen().standard_normal(shape).astype(self.loc._data.dtype)
        return self.loc + Tensor._make(eps, None, 0) * self.scale

    def log_prob(self, value):
        value = as_float_tensor(value, self.loc)
        var = self.scale ** 2
        return -((value - self.loc) ** 2) / (2 * var) - self.scale.log() - math.log(
            math.sqrt(2 * math.pi))

    def cdf(self, value):
        value = as_float_tensor(value, self.loc)
        return 0.5 * (1 + ((value - self.loc) / (self.scale * math.sqrt(2))).erf())

    def entropy(self):
        return 0.5 + 0.5 * math.log(2 * math.pi) + self.scale.log()

    def __repr__(self) -> str:
        return f"Normal(loc: {self.loc.size()}, scale: {self.scale.size()})"
