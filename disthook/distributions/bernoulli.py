"""Bernoulli(probs | logits): 1 with probability ``probs``."""
from __future__ import annotations

from disthook.distributions.categorical import ONE_OF_MSG
from disthook.distributions.distribution import Distribution, as_float_tensor, finfo

__all__ = ["Bernoulli"]


class Bernoulli(Distribution):
    def __init__(self, probs=None, logits=None, validate_args: bool | None = None) -> None:
        if (probs is None) == (logits is None):
            raise ValueError(ONE_OF_MSG)
        if probs is not None:
            self.probs = as_float_tensor(probs)
            eps = finfo(self.probs, "eps")
            clamped = self.probs.clamp(eps, 1 - eps)
            self.logits = clamped.log() - (-clamped).log1p()
        else:
            self.logits = as_float_tensor(logits)
            self.probs = self.logits.sigmoid()
        super().__init__(self.probs.shape, (), validate_args)

    @property
    def mean(self):
        return self.probs

    @property
    def mode(self):
        mode = (self.probs >= 0.5).to(self.probs.dtype)
        return mode.masked_fill(self.probs == 0.5, float("nan"))

    @property
    def variance(self):
        return self.probs * (1 - self.probs)

    def sample(self, sample_shape=()):
        from disthook.random import gen
        from disthook.tensor import Tensor

        p = self.probs.detach()._data
        u = gen().random(self._extended_shape(sample_shape))
        return Tensor._make((u < p).astype(p.dtype), None, 0)

    def log_prob(self, value):
        from disthook.nn.functional import binary_cross_entropy_with_logits

        value = as_float_tensor(value, self.logits)
        self._check_support((value == 0) | (value == 1), value)
        logits = self.logits.broadcast_to(value.shape) if value.dim() > self.logits.dim() \
            else self.logits
        return -binary_cross_entropy_with_logits(logits, value.broadcast_to(logits.shape),
                                                 reduction="none")

    def entropy(self):
        from disthook.nn.functional import binary_cross_entropy_with_logits

        return binary_cross_entropy_with_logits(self.logits, self.probs, reduction="none")

    def enumerate_support(self, expand: bool = True):
        from disthook import tensor

        return self._support(tensor([0.0, 1.0], dtype=self.probs.dtype), expand)

    def __repr__(self) -> str:
        return f"Bernoulli(probs: {self.probs.size()})"

