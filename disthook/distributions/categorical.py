"""Categorical(probs | logits) over the last dimension."""
from __future__ import annotations

from disthook.distributions.distribution import Distribution, as_float_tensor, finfo

__all__ = ["Categorical"]

ONE_OF_MSG = "Either `probs` or `logits` must be specified, but not both."


class Categorical(Distribution):
    def __init__(self, probs=None, logits=None, validate_args: bool | None = None) -> None:
        if (probs is None) == (logits is None):
            raise ValueError(ONE_OF_MSG)
        if probs is not None:
            probs = as_float_tensor(probs)
            if probs.dim() < 1:
                raise ValueError("`probs` parameter must be at least one-dimensional.")
            self.probs = probs / probs.sum(-1, keepdim=True)
            self.logits = self.probs.clamp(min=finfo(self.probs, "tiny")).log()
        else:
            logits = as_float_tensor(logits)
            if logits.dim() < 1:
                raise ValueError("`logits` parameter must be at least one-dimensional.")
            self.logits = logits - logits.logsumexp(-1, keepdim=True)
            self.probs = self.logits.softmax(-1)
        self._num_events = self.probs.shape[-1]
        super().__init__(self.probs.shape[:-1], (), validate_args)

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
        n = int(np.prod(sample_shape)) if len(tuple(sample_shape)) else 1
        rng = gen()
        # inverse-CDF draw per row: n uniforms against each row's cumulative sums
        cdf = np.cumsum(probs, axis=-1)
        cdf /= cdf[:, -1:]
        u = rng.random((n, probs.shape[0], 1))
        draws = (u > cdf[None]).sum(-1).clip(max=self._num_events - 1)
        return Tensor._make(draws.reshape(self._extended_shape(sample_shape)).astype(np.int64),
                            None, 0)

    def log_prob(self, value):
        from disthook import broadcast_tensors

        value = value.long().unsqueeze(-1)
        value, log_pmf = broadcast_tensors(value, self.logits)
        self._check_support((value >= 0) & (value < self._num_events), value)
        return log_pmf.gather(-1, value[..., :1]).squeeze(-1)

    def entropy(self):
        logits = self.logits.clamp(min=finfo(self.logits, "min"))
        return -(logits * self.probs).sum(-1)

    def enumerate_support(self, expand: bool = True):
        from disthook import arange

        return self._support(arange(self._num_events), expand)

    def __repr__(self) -> str:
        return f"Categorical(probs: {self.probs.size()}, logits: {self.logits.size()})"

