"""Multinomial(total_count, probs | logits): counts per category of ``total_count``
categorical draws."""
from __future__ import annotations

from disthook.distributions import constraints
from disthook.distributions.binomial import Binomial
from disthook.distributions.one_hot_categorical import CategoricalEvent

__all__ = ["Multinomial"]


class Multinomial(CategoricalEvent):
    def __init__(self, total_count: int = 1, probs=None, logits=None,
                 validate_args: bool | None = None) -> None:
        if not isinstance(total_count, int):
            raise NotImplementedError("inhomogeneous total_count is not supported")
        self.total_count = total_count
        super().__init__(probs, logits, validate_args)

    @constraints.dependent_property(is_discrete=True, event_dim=1)
    def support(self):
        return constraints.multinomial(self.total_count)

    @property
    def mean(self):
        return self.probs * self.total_count

    @property
    def variance(self):
        return self.total_count * self.probs * (1 - self.probs)

    def sample(self, sample_shape=()):
        import numpy as np

        from disthook.distributions.distribution import from_numpy

        sample_shape = (sample_shape,) if isinstance(sample_shape, int) else tuple(sample_shape)
        draws = self._categorical.sample((self.total_count,) + sample_shape)._data
        k = self.event_shape[0]
        counts = (draws[..., None] == np.arange(k)).sum(0)
        return from_numpy(counts, self.probs)

    def log_prob(self, value):
        from disthook import broadcast_tensors, where, zeros_like

        self._check_sample(value)
        logits, value = broadcast_tensors(self.logits, value)
        # a category that cannot occur and does not: 0 * -inf counts as 0
        logits = where((value == 0) & (logits == float("-inf")), zeros_like(logits), logits)
        return ((value.sum(-1) + 1).lgamma() - (value + 1).lgamma().sum(-1)
                + (logits * value).sum(-1))

    def entropy(self):
        from disthook import tensor

        n = tensor(float(self.total_count), dtype=self.probs.dtype)
        counts = Binomial(self.total_count, self.probs, validate_args=False)
        support = counts.enumerate_support(expand=False)[1:]
        weights = (support + 1).lgamma()
        expected = (counts.log_prob(support).exp() * weights).sum((0, -1))
        return n * self._categorical.entropy() - (n + 1).lgamma() + expected
