"""Categorical(probs | logits) over the last dimension."""
from __future__ import annotations

from typing import ClassVar

from disthook.distributions import constraints
from disthook.distributions.distribution import Distribution, as_float_tensor, finfo, lazy_property

__all__ = ["Categorical"]

ONE_OF_MSG = "Either `probs` or `logits` must be specified, but not both."


class Categorical(Distribution):
    arg_constraints: ClassVar[dict] = {"probs": constraints.simplex,
                                       "logits": constraints.independent(constraints.real, 1)}
    has_enumerate_support = True
    _expand_params: ClassVar[tuple] = ("probs", "logits")

    def __init__(self, probs=None, logits=None, validate_args: bool | None = None) -> None:
        if (probs is None) == (logits is None):
            raise ValueError(ONE_OF_MSG)
        if probs is not None:
            probs = as_float_tensor(probs)
            if probs.dim() < 1:
                raise ValueError("`probs` parameter must be at least one-dimensional.")
            self.probs = probs / probs.sum(-1, keepdim=True)
        else:
            logits = as_float_tensor(logits)
            if logits.dim() < 1:
                raise ValueError("`logits` parameter must be at least one-dimensional.")
            self.logits = logits - logits.logsumexp(-1, keepdim=True)
        param = self.probs if probs is not None else self.logits
        self._num_events = param.shape[-1]
        super().__init__(param.shape[:-1], (), validate_args)

    @lazy_property
    def logits(self):
        return self.probs.clamp(min=finfo(self.probs, "eps"), max=1 - finfo(self.probs, "eps")
                                ).log()

    @lazy_property
    def probs(self):
        return self.logits.softmax(-1)

    @constraints.dependent_property(is_discrete=True, event_dim=0)
    def support(self):
        return constraints.integer_interval(0, self._num_events - 1)

    @property
    def param_shape(self):
        return self.probs.shape

    @property
    def mean(self):
        from disthook import full

        return full(self._extended_shape(), float("nan"), dtype=self.probs.dtype)

    @property
    def mode(self):
        return self.probs.argmax(-1)

    @property
    def variance(self):
        from disthook import full

        return full(self._extended_shape(), float("nan"), dtype=self.probs.dtype)

    def sample(self, sample_shape=()):
        import numpy as np

        from disthook.random import gen
        from disthook.tensor import Tensor

        probs = self.probs.detach()._data.astype(np.float64).reshape(-1, self._num_events)
        shape = self._extended_shape(sample_shape)
        n = int(np.prod(shape[:len(shape) - len(self.batch_shape)]))
        # inverse-CDF draw per row: n uniforms against each row's cumulative sums
        cdf = np.cumsum(probs, axis=-1)
        cdf /= cdf[:, -1:]
        u = gen().random((n, probs.shape[0], 1))
        draws = (u > cdf[None]).sum(-1).clip(max=self._num_events - 1)
        return Tensor._make(draws.reshape(tuple(shape)).astype(np.int64), None, 0)

    def log_prob(self, value):
        from disthook import broadcast_tensors

        self._check_sample(value)
        value = value.long().unsqueeze(-1)
        value, log_pmf = broadcast_tensors(value, self.logits)
        return log_pmf.gather(-1, value[..., :1]).squeeze(-1)

    def entropy(self):
        logits = self.logits.clamp(min=finfo(self.logits, "min"))
        return -(logits * self.probs).sum(-1)

    def enumerate_support(self, expand: bool = True):
        from disthook import arange

        return self._support(arange(self._num_events), expand)
