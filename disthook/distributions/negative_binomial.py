"""NegativeBinomial(total_count, probs | logits): successes before total_count failures."""
from __future__ import annotations

from typing import ClassVar

import numpy as np

from disthook.distributions import constraints
from disthook.distributions.binomial import TrialCounts
from disthook.distributions.distribution import from_numpy

__all__ = ["NegativeBinomial"]


class NegativeBinomial(TrialCounts):
    """Successes (each with ``probs``) before ``total_count`` failures."""

    arg_constraints: ClassVar[dict] = {"total_count": constraints.greater_than_eq(0),
                                       "probs": constraints.half_open_interval(0.0, 1.0),
                                       "logits": constraints.real}
    support = constraints.nonnegative_integer
    _expand_params: ClassVar[tuple] = ("total_count", "probs", "logits")

    @property
    def mean(self):
        return self.total_count * self.logits.exp()

    @property
    def mode(self):
        return ((self.total_count - 1) * self.logits.exp()).floor().clamp(min=0.0)

    @property
    def variance(self):
        return self.mean / (-self.logits).sigmoid()

    def sample(self, sample_shape=()):

        from disthook.distributions.gamma import Gamma
        from disthook.random import gen

        # a Poisson count whose rate is Gamma(total_count, exp(-logits)) distributed
        rate = Gamma(self.total_count, (-self.logits).exp(), validate_args=False)
        rates = rate.sample(sample_shape)._data.astype(np.float64)
        return from_numpy(gen().poisson(rates), self.probs)

    def log_prob(self, value):
        from disthook import where, zeros_like
        from disthook.nn.functional import logsigmoid

        self._check_sample(value)
        n = self.total_count
        unnormalized = n * logsigmoid(-self.logits) + value * logsigmoid(self.logits)
        normalizer = -(n + value).lgamma() + (1.0 + value).lgamma() + n.lgamma()
        # no failures and no successes: probability one
        normalizer = where(n + value == 0.0, zeros_like(normalizer), normalizer)
        return unnormalized - normalizer
