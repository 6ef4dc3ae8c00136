"""OneHotCategorical(probs | logits): a Categorical whose draws are one-hot vectors;
OneHotCategoricalStraightThrough adds the straight-through gradient to ``rsample``."""
from __future__ import annotations

from typing import ClassVar

from disthook.distributions import constraints
from disthook.distributions.categorical import Categorical
from disthook.distributions.distribution import Distribution

__all__ = ["CategoricalEvent", "OneHotCategorical", "OneHotCategoricalStraightThrough"]


class CategoricalEvent(Distribution):
    """A distribution over vectors of the categorical's length, given by its ``probs`` or
    ``logits`` (OneHotCategorical, ExpRelaxedCategorical)."""

    arg_constraints: ClassVar[dict] = {"probs": constraints.simplex,
                                       "logits": constraints.real_vector}

    def __init__(self, probs=None, logits=None, validate_args: bool | None = None) -> None:
        self._categorical = Categorical(probs, logits)
        batch_shape = self._categorical.batch_shape
        event_shape = self._categorical.param_shape[-1:]
        super().__init__(batch_shape, event_shape, validate_args)

    def expand(self, batch_shape, _instance=None):
        new = type(self).__new__(type(self)) if _instance is None else _instance
        new.__dict__.update(self.__dict__)
        new._categorical = self._categorical.expand(batch_shape)
        return self._expanded(new, batch_shape)

    @property
    def probs(self):
        return self._categorical.probs

    @property
    def logits(self):
        return self._categorical.logits

    @property
    def param_shape(self):
        return self._categorical.param_shape


class OneHotCategorical(CategoricalEvent):
    support = constraints.one_hot
    has_enumerate_support = True

    @property
    def mean(self):
        return self._categorical.probs

    @property
    def mode(self):
        from disthook.nn.functional import one_hot

        probs = self._categorical.probs
        return one_hot(probs.argmax(-1), probs.shape[-1]).to(probs.dtype)

    @property
    def variance(self):
        return self._categorical.probs * (1 - self._categorical.probs)

    def sample(self, sample_shape=()):
        from disthook.nn.functional import one_hot

        probs = self._categorical.probs
        return one_hot(self._categorical.sample(sample_shape), probs.shape[-1]).to(probs.dtype)

    def log_prob(self, value):
        self._check_sample(value)
        return self._categorical.log_prob(value.argmax(-1))

    def entropy(self):
        return self._categorical.entropy()

    def enumerate_support(self, expand: bool = True):
        from disthook import eye

        n = self.event_shape[0]
        values = eye(n, dtype=self._categorical.probs.dtype)
        values = values.reshape((n,) + (1,) * len(self.batch_shape) + (n,))
        return values.expand((n,) + tuple(self.batch_shape) + (n,)) if expand else values


class OneHotCategoricalStraightThrough(OneHotCategorical):
    """One-hot draws whose gradient is that of ``probs`` (straight-through estimator)."""

    has_rsample = True

    def rsample(self, sample_shape=()):
        draws = self.sample(sample_shape)
        probs = self._categorical.probs
        return draws + (probs - probs.detach())
