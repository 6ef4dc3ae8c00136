"""Bernoulli(probs | logits): 1 with probability ``probs``."""
from __future__ import annotations

from typing import ClassVar

from disthook.distributions import constraints
from disthook.distributions.categorical import ONE_OF_MSG
from disthook.distributions.distribution import (
    Distribution,
    as_float_tensor,
    finfo,
    from_numpy,
    lazy_property,
)
from disthook.distributions.exp_family import ExponentialFamily

__all__ = ["Bernoulli", "BinaryEvent", "probs_to_logits"]


def probs_to_logits(probs, is_binary: bool = False):
    """Logits of ``probs`` clamped inside (0, 1) by the dtype's eps (torch's clamp)."""
    eps = finfo(probs, "eps")
    clamped = probs.clamp(eps, 1 - eps)
    return clamped.log() - (-clamped).log1p() if is_binary else clamped.log()


class BinaryEvent(Distribution):
    """A distribution given by the probability ``probs`` (or the ``logits``) of one event
    per trial: Bernoulli, Geometric, Binomial."""

    arg_constraints: ClassVar[dict] = {"probs": constraints.unit_interval,
                                       "logits": constraints.real}
    _expand_params: ClassVar[tuple] = ("probs", "logits")

    def __init__(self, probs=None, logits=None, validate_args: bool | None = None) -> None:
        if (probs is None) == (logits is None):
            raise ValueError(ONE_OF_MSG)
        if probs is not None:
            self.probs = as_float_tensor(probs)
        else:
            self.logits = as_float_tensor(logits)
        param = self.probs if probs is not None else self.logits
        super().__init__(param.shape, (), validate_args)

    @lazy_property
    def logits(self):
        return probs_to_logits(self.probs, is_binary=True)

    @lazy_property
    def probs(self):
        return self.logits.sigmoid()

    @property
    def param_shape(self):
        return self.batch_shape


class Bernoulli(BinaryEvent, ExponentialFamily):
    _mean_carrier_measure = 0

    @property
    def _natural_params(self):
        return (self.probs.logit(),)

    def _log_normalizer(self, x):
        return x.exp().log1p()

    support = constraints.boolean
    has_enumerate_support = True

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

        p = self.probs.detach()._data
        u = gen().random(self._extended_shape(sample_shape))
        return from_numpy(u < p, self.probs)

    def log_prob(self, value):
        from disthook import broadcast_tensors
        from disthook.nn.functional import binary_cross_entropy_with_logits

        self._check_sample(value)
        logits, value = broadcast_tensors(self.logits, as_float_tensor(value, self.logits))
        return -binary_cross_entropy_with_logits(logits, value, reduction="none")

    def entropy(self):
        from disthook.nn.functional import binary_cross_entropy_with_logits

        return binary_cross_entropy_with_logits(self.logits, self.probs, reduction="none")

    def enumerate_support(self, expand: bool = True):
        from disthook import tensor

        return self._support(tensor([0.0, 1.0], dtype=self.probs.dtype), expand)
