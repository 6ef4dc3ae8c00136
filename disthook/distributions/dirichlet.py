"""Dirichlet(concentration): distributions on the simplex; draws without gradient (see gamma)."""
from __future__ import annotations

from typing import ClassVar

import numpy as np

from disthook.distributions import constraints
from disthook.distributions.distribution import as_float_tensor, finfo, from_numpy
from disthook.distributions.exp_family import ExponentialFamily
from disthook.distributions.gamma import _no_rsample, _standard_gamma, _xlogy

__all__ = ["Dirichlet"]


class Dirichlet(ExponentialFamily):
    @property
    def _natural_params(self):
        return (self.concentration,)

    def _log_normalizer(self, x):
        return x.lgamma().sum(-1) - x.sum(-1).lgamma()

    arg_constraints: ClassVar[dict] = {
        "concentration": constraints.independent(constraints.positive, 1)}
    support = constraints.simplex
    _expand_params: ClassVar[tuple] = ("concentration",)

    def __init__(self, concentration, validate_args: bool | None = None) -> None:
        concentration = as_float_tensor(concentration)
        if concentration.dim() < 1:
            raise ValueError("`concentration` parameter must be at least one-dimensional.")
        self.concentration = concentration
        super().__init__(concentration.shape[:-1], concentration.shape[-1:], validate_args)

    @property
    def mean(self):
        return self.concentration / self.concentration.sum(-1, True)

    @property
    def mode(self):
        from disthook import where
        from disthook.nn.functional import one_hot

        above = (self.concentration - 1).clamp(min=0.0)
        total = above.sum(-1, True)
        mode = above / where(total > 0, total, total + 1)  # rows of zeros: see below
        # every concentration below one: the mass piles on the largest one's corner
        corner = one_hot(mode.argmax(-1), self.concentration.shape[-1]).to(mode.dtype)
        all_below = (self.concentration < 1).all(-1, keepdim=True)
        return where(all_below, corner, mode)

    @property
    def variance(self):
        total = self.concentration.sum(-1, True)
        return self.concentration * (total - self.concentration) / (total.pow(2) * (total + 1))

    def rsample(self, sample_shape=()):
        raise _no_rsample(self)

    def sample(self, sample_shape=()):

        gammas = _standard_gamma(self.concentration, self._extended_shape(sample_shape))
        draws = gammas / gammas.sum(-1, keepdims=True)
        eps = finfo(self.concentration, "tiny")
        return from_numpy(np.clip(draws, eps, 1 - finfo(self.concentration, "eps")),
                          self.concentration)

    def log_prob(self, value):
        self._check_sample(value)
        c = self.concentration
        return (_xlogy(c - 1.0, value).sum(-1) + c.sum(-1).lgamma() - c.lgamma().sum(-1))

    def entropy(self):
        c = self.concentration
        k = c.shape[-1]
        total = c.sum(-1)
        return (c.lgamma().sum(-1) - total.lgamma() - (k - total) * total.digamma()
                - ((c - 1.0) * c.digamma()).sum(-1))
