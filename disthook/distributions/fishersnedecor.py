"""FisherSnedecor(df1, df2): the ratio of two independent Chi2 variables, each over its
degrees of freedom. Draws are Gamma draws (no gradient, as for Gamma)."""
from __future__ import annotations

import math
from typing import ClassVar

from disthook.distributions import constraints
from disthook.distributions.distribution import Distribution, broadcast_all, finfo, from_numpy
from disthook.distributions.gamma import Gamma, _no_rsample

__all__ = ["FisherSnedecor"]


def _nan_unless(condition, value):
    from disthook import full_like, where

    return where(condition, value, full_like(value, math.nan))


class FisherSnedecor(Distribution):
    arg_constraints: ClassVar[dict] = {"df1": constraints.positive,
                                       "df2": constraints.positive}
    support = constraints.positive
    _expand_params: ClassVar[tuple] = ("df1", "df2")

    def __init__(self, df1, df2, validate_args: bool | None = None) -> None:
        self.df1, self.df2 = broadcast_all(df1, df2)
        # the numerator's and denominator's Chi2 / df; validated first, as in torch
        self._gamma1 = Gamma(self.df1 * 0.5, self.df1)
        self._gamma2 = Gamma(self.df2 * 0.5, self.df2)
        super().__init__(self.df1.shape, (), validate_args)

    @property
    def mean(self):
        return _nan_unless(self.df2 > 2, self.df2 / (self.df2 - 2))

    @property
    def mode(self):
        d1, d2 = self.df1, self.df2
        return _nan_unless(d1 > 2, (d1 - 2) / d1 * d2 / (d2 + 2))

    @property
    def variance(self):
        d1, d2 = self.df1, self.df2
        value = 2 * d2.pow(2) * (d1 + d2 - 2) / (d1 * (d2 - 2).pow(2) * (d2 - 4))
        return _nan_unless(d2 > 4, value)

    def rsample(self, sample_shape=()):
        raise _no_rsample(self)

    def sample(self, sample_shape=()):
        import numpy as np

        shape = self._extended_shape(sample_shape)
        tiny = finfo(self.df1, "tiny")
        x1 = self._gamma1.expand(shape).sample()
        x2 = self._gamma2.expand(shape).sample()
        ratio = x1._data.astype(np.float64) / np.maximum(x2._data.astype(np.float64), tiny)
        return from_numpy(np.maximum(ratio, tiny), self.df1)

    def log_prob(self, value):
        self._check_sample(value)
        half1, half2 = self.df1 * 0.5, self.df2 * 0.5
        ratio = self.df1 / self.df2
        log_beta = half1.lgamma() + half2.lgamma() - (half1 + half2).lgamma()
        return (half1 * ratio.log() + (half1 - 1) * value.log()
                - (half1 + half2) * (ratio * value).log1p() - log_beta)
