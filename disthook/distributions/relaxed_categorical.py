"""RelaxedOneHotCategorical(temperature, probs | logits) = exp(ExpRelaxedCategorical):
Gumbel-softmax draws on the simplex."""
from __future__ import annotations

import math
from typing import ClassVar

from disthook.distributions import constraints
from disthook.distributions.distribution import as_float_tensor
from disthook.distributions.one_hot_categorical import CategoricalEvent
from disthook.distributions.relaxed_bernoulli import _open_uniform, _RelaxedOf
from disthook.distributions.transforms import ExpTransform

__all__ = ["ExpRelaxedCategorical", "RelaxedOneHotCategorical"]


class ExpRelaxedCategorical(CategoricalEvent):
    """The log of a RelaxedOneHotCategorical draw."""

    support = constraints.real_vector
    has_rsample = True

    def __init__(self, temperature, probs=None, logits=None,
                 validate_args: bool | None = None) -> None:
        self.temperature = as_float_tensor(temperature)
        super().__init__(probs, logits, validate_args)

    def rsample(self, sample_shape=()):
        u = _open_uniform(self.logits, self._extended_shape(sample_shape))
        gumbels = -((-u.log()).log())
        scores = (self.logits + gumbels) / self.temperature
        return scores - scores.logsumexp(-1, keepdim=True)

    def log_prob(self, value):
        self._check_sample(value)
        k = self._categorical._num_events
        log_scale = math.lgamma(k) + (k - 1) * self.temperature.log()
        score = self.logits - value * self.temperature
        return (score - score.logsumexp(-1, keepdim=True)).sum(-1) + log_scale


class RelaxedOneHotCategorical(_RelaxedOf):
    arg_constraints: ClassVar[dict] = {"probs": constraints.simplex,
                                       "logits": constraints.real_vector}
    support = constraints.simplex
    has_rsample = True

    def __init__(self, temperature, probs=None, logits=None,
                 validate_args: bool | None = None) -> None:
        base = ExpRelaxedCategorical(temperature, probs, logits, validate_args=validate_args)
        super().__init__(base, ExpTransform(), validate_args=validate_args)
