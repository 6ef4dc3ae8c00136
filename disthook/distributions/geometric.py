"""Geometric(probs | logits): failures before the first success."""
from __future__ import annotations

import numpy as np

from disthook.distributions import constraints
from disthook.distributions.bernoulli import BinaryEvent
from disthook.distributions.distribution import as_float_tensor, finfo, from_numpy

__all__ = ["Geometric"]


class Geometric(BinaryEvent):
    """The number of failures before the first success, each trial a success with
    ``probs``."""

    support = constraints.nonnegative_integer

    @property
    def mean(self):
        return 1.0 / self.probs - 1.0

    @property
    def mode(self):
        from disthook import zeros_like

        return zeros_like(self.probs)

    @property
    def variance(self):
        return (1.0 / self.probs - 1.0) / self.probs

    def sample(self, sample_shape=()):

        from disthook.random import gen

        u = gen().uniform(finfo(self.probs, "tiny"), 1.0, self._extended_shape(sample_shape))
        p = self.probs.detach()._data.astype(np.float64)
        return from_numpy(np.floor(np.log(u) / np.log1p(-p)), self.probs)

    def log_prob(self, value):
        from disthook import broadcast_tensors, where, zeros_like

        self._check_sample(value)
        value, probs = broadcast_tensors(as_float_tensor(value, self.probs), self.probs)
        # a sure success at the first trial: 0 * log(0) counts as 0
        probs = where((probs == 1) & (value == 0), zeros_like(probs), probs)
        return value * (-probs).log1p() + self.probs.log()

    def entropy(self):
        from disthook.nn.functional import binary_cross_entropy_with_logits

        return binary_cross_entropy_with_logits(self.logits, self.probs,
                                                reduction="none") / self.probs
