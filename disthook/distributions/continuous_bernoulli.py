"""ContinuousBernoulli(probs | logits): the density on [0, 1] proportional to
probs^x (1 - probs)^(1 - x) (Loaiza-Ganem and Cunningham, 2019), for VAEs on pixel values.

Its normalizer C = 2 atanh(1 - 2p) / (1 - 2p) and the moments divide 0 by 0 at p = 1/2, so
inside ``lims`` (around 1/2) they are Taylor expansions in p - 1/2, as torch computes them.
"""
from __future__ import annotations

import math
from typing import ClassVar

from disthook.distributions import constraints
from disthook.distributions.bernoulli import BinaryEvent
from disthook.distributions.distribution import as_float_tensor, finfo, from_numpy, lazy_property
from disthook.distributions.exp_family import ExponentialFamily

__all__ = ["ContinuousBernoulli"]


def _clamp_probs(probs):
    eps = finfo(probs, "eps")
    return probs.clamp(min=eps, max=1 - eps)


class ContinuousBernoulli(BinaryEvent, ExponentialFamily):
    support = constraints.unit_interval
    has_rsample = True
    _mean_carrier_measure = 0
    _expand_params: ClassVar[tuple] = ("probs", "logits")

    def __init__(self, probs=None, logits=None, lims=(0.499, 0.501),
                 validate_args: bool | None = None) -> None:
        if probs is not None:
            probs = as_float_tensor(probs)
            # torch checks probs only when validate_args is given, then clamps them
            if validate_args is not None and not bool(
                    self.arg_constraints["probs"].check(probs).all()):
                raise ValueError("The parameter probs has invalid values")
            probs = _clamp_probs(probs)
        self._lims = lims
        super().__init__(probs, logits, validate_args)

    @lazy_property
    def probs(self):
        return _clamp_probs(self.logits.sigmoid())

    def _stable(self):
        """Where p is outside ``lims``: the closed forms are accurate there."""
        low, high = self._lims
        return (self.probs <= low) | (self.probs > high)

    def _cut_probs(self):
        """p where it is stable, ``lims[0]`` elsewhere (so the unused closed forms stay
        finite, and so do their gradients)."""
        from disthook import full_like, where

        return where(self._stable(), self.probs, full_like(self.probs, self._lims[0]))

    def _log_norm(self):
        """log C(p): log|log(1 - p) - log p| - log|1 - 2p|, or its Taylor series."""
        from disthook import where

        p = self._cut_probs()
        closed = ((-p).log1p() - p.log()).abs().log() - (1 - 2 * p).abs().log()
        x = (self.probs - 0.5).pow(2)
        taylor = math.log(2.0) + (4.0 / 3.0 + 104.0 / 45.0 * x) * x
        return where(self._stable(), closed, taylor)

    @property
    def mean(self):
        from disthook import where

        p = self._cut_probs()
        closed = p / (2 * p - 1) + 1 / ((-p).log1p() - p.log())
        x = self.probs - 0.5
        taylor = 0.5 + (1.0 / 3.0 + 16.0 / 45.0 * x.pow(2)) * x
        return where(self._stable(), closed, taylor)

    @property
    def variance(self):
        from disthook import where

        p = self._cut_probs()
        closed = p * (p - 1) / (1 - 2 * p).pow(2) + 1 / ((-p).log1p() - p.log()).pow(2)
        x = (self.probs - 0.5).pow(2)
        taylor = 1.0 / 12.0 - (1.0 / 15.0 - 128.0 / 945.0 * x) * x
        return where(self._stable(), closed, taylor)

    @property
    def stddev(self):
        return self.variance.sqrt()

    def rsample(self, sample_shape=()):
        from disthook.random import gen

        u = from_numpy(gen().random(self._extended_shape(sample_shape)), self.probs)
        return self.icdf(u)

    def log_prob(self, value):
        from disthook import broadcast_tensors
        from disthook.nn.functional import binary_cross_entropy_with_logits

        self._check_sample(value)
        logits, value = broadcast_tensors(self.logits, value)
        return (-binary_cross_entropy_with_logits(logits, value, reduction="none")
                + self._log_norm())

    def cdf(self, value):
        from disthook import ones_like, where, zeros_like

        self._check_sample(value)
        p = self._cut_probs()
        closed = (p.pow(value) * (1 - p).pow(1 - value) + p - 1) / (2 * p - 1)
        inside = where(self._stable(), closed, value)
        return where(value <= 0, zeros_like(inside), where(value >= 1, ones_like(inside),
                                                           inside))

    def icdf(self, value):
        from disthook import where

        p = self._cut_probs()
        closed = (((-p + value * (2 * p - 1)).log1p() - (-p).log1p())
                  / (p.log() - (-p).log1p()))
        return where(self._stable(), closed, value)

    def entropy(self):
        log_q, log_p = (-self.probs).log1p(), self.probs.log()
        return self.mean * (log_q - log_p) - self._log_norm() - log_q

    @property
    def _natural_params(self):
        return (self.logits,)

    def _log_normalizer(self, x):
        """log C as a function of the logit x: log|expm1(x)| - log|x|, or its series."""
        from disthook import full_like, where

        low, high = self._lims[0] - 0.5, self._lims[1] - 0.5
        stable = (x <= low) | (x > high)
        cut = where(stable, x, full_like(x, low))
        closed = cut.expm1().abs().log() - cut.abs().log()
        taylor = 0.5 * x + x.pow(2) / 24.0 - x.pow(4) / 2880.0
        return where(stable, closed, taylor)
