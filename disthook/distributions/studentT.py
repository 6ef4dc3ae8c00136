"""StudentT(df, loc, scale): a Normal whose precision is Gamma distributed.

Draws are ``loc + scale * x / sqrt(z / df)`` with x standard normal and z ~ Chi2(df); torch
differentiates them through the Chi2's implicit gradient, which disthook does not reproduce,
so ``rsample`` raises (as Gamma's does).
"""
# ruff: noqa: N999 (torch names this module studentT)
from __future__ import annotations

import math
from typing import ClassVar

from disthook.distributions import constraints
from disthook.distributions.chi2 import Chi2
from disthook.distributions.distribution import Distribution, broadcast_all, from_numpy
from disthook.distributions.gamma import _no_rsample

__all__ = ["StudentT"]


class StudentT(Distribution):
    arg_constraints: ClassVar[dict] = {"df": constraints.positive, "loc": constraints.real,
                                       "scale": constraints.positive}
    support = constraints.real
    _expand_params: ClassVar[tuple] = ("df", "loc", "scale")

    def __init__(self, df, loc=0.0, scale=1.0, validate_args: bool | None = None) -> None:
        self.df, self.loc, self.scale = broadcast_all(df, loc, scale)
        self._chi2 = Chi2(self.df)  # validates df first, as torch's does
        super().__init__(self.df.shape, (), validate_args)

    @property
    def mean(self):
        from disthook import full_like, where

        return where(self.df > 1, self.loc, full_like(self.loc, math.nan))

    @property
    def mode(self):
        return self.loc

    @property
    def variance(self):
        from disthook import full_like, where

        finite = self.scale.pow(2) * self.df / (self.df - 2)
        infinite_or_nan = where(self.df > 1, full_like(self.df, math.inf),
                                full_like(self.df, math.nan))
        return where(self.df > 2, finite, infinite_or_nan)

    def rsample(self, sample_shape=()):
        raise _no_rsample(self)

    def sample(self, sample_shape=()):
        import numpy as np

        from disthook.random import gen

        shape = self._extended_shape(sample_shape)
        x = gen().standard_normal(shape)
        z = self._chi2.expand(shape).sample()._data.astype(np.float64)
        df = self.df.detach()._data.astype(np.float64)
        y = x / np.sqrt(z / df)
        return self.loc.detach() + from_numpy(y, self.loc) * self.scale.detach()

    def log_prob(self, value):
        self._check_sample(value)
        y = (value - self.loc) / self.scale
        normalizer = (self.scale.log() + 0.5 * self.df.log() + 0.5 * math.log(math.pi)
                      + (0.5 * self.df).lgamma() - (0.5 * (self.df + 1.0)).lgamma())
        return -0.5 * (self.df + 1.0) * (y.pow(2) / self.df).log1p() - normalizer

    def entropy(self):
        half_df = 0.5 * self.df
        half_next = 0.5 * (self.df + 1)
        log_beta = half_df.lgamma() + math.lgamma(0.5) - half_next.lgamma()
        return (self.scale.log() + half_next * (half_next.digamma() - half_df.digamma())
                + 0.5 * self.df.log() + log_beta)
