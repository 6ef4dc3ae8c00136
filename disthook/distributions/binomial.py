"""Binomial(total_count, probs | logits): successes in ``total_count`` trials."""
from __future__ import annotations

from typing import ClassVar

from disthook.distributions import constraints
from disthook.distributions.bernoulli import BinaryEvent
from disthook.distributions.categorical import ONE_OF_MSG
from disthook.distributions.distribution import Distribution, broadcast_all, from_numpy

__all__ = ["Binomial", "TrialCounts"]


class TrialCounts(BinaryEvent):
    """A count given by ``total_count`` and the probability ``probs`` (or ``logits``) of
    the event counted: Binomial, NegativeBinomial."""

    def __init__(self, total_count, probs=None, logits=None,
                 validate_args: bool | None = None) -> None:
        if (probs is None) == (logits is None):
            raise ValueError(ONE_OF_MSG)
        name = "probs" if probs is not None else "logits"
        total_count, param = broadcast_all(total_count, probs if probs is not None else logits)
        self.total_count = total_count.to(param.dtype)
        setattr(self, name, param)
        Distribution.__init__(self, param.shape, (), validate_args)


class Binomial(TrialCounts):
    arg_constraints: ClassVar[dict] = {"total_count": constraints.nonnegative_integer,
                                       "probs": constraints.unit_interval,
                                       "logits": constraints.real}
    has_enumerate_support = True
    _expand_params: ClassVar[tuple] = ("total_count", "probs", "logits")

    def __init__(self, total_count=1, probs=None, logits=None,
                 validate_args: bool | None = None) -> None:
        super().__init__(total_count, probs, logits, validate_args)

    @constraints.dependent_property(is_discrete=True, event_dim=0)
    def support(self):
        return constraints.integer_interval(0, self.total_count)

    @property
    def mean(self):
        return self.total_count * self.probs

    @property
    def mode(self):
        return ((self.total_count + 1) * self.probs).floor().clamp(max=self.total_count)

    @property
    def variance(self):
        return self.total_count * self.probs * (1 - self.probs)

    def sample(self, sample_shape=()):
        import numpy as np

        from disthook.random import gen

        shape = self._extended_shape(sample_shape)
        n = np.broadcast_to(self.total_count.detach()._data.astype(np.int64), shape)
        p = np.broadcast_to(self.probs.detach()._data.astype(np.float64), shape)
        return from_numpy(gen().binomial(n, p), self.probs)

    def log_prob(self, value):
        from disthook.nn.functional import softplus

        self._check_sample(value)
        n = self.total_count
        log_choose = (n + 1).lgamma() - (value + 1).lgamma() - (n - value + 1).lgamma()
        # k log p + (n - k) log(1 - p) = k * logits - n * softplus(logits)
        return log_choose + value * self.logits - n * softplus(self.logits)

    def entropy(self):
        values = self.enumerate_support(False)
        log_prob = self.log_prob(values)
        return -(log_prob.exp() * log_prob).sum(0)

    def enumerate_support(self, expand: bool = True):
        from disthook import arange

        total = int(self.total_count.max())
        if int(self.total_count.min()) != total:
            raise NotImplementedError("Inhomogeneous total count not supported by "
                                      "`enumerate_support`.")
        return self._support(arange(1 + total, dtype=self.probs.dtype), expand)
