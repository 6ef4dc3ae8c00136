"""The base of every distribution: shapes, argument checks, sample under no_grad."""
from __future__ import annotations

from disthook.autograd import grad_mode

__all__ = ["Distribution"]


def finfo(t, name: str) -> float:
    """``numpy.finfo(<t's dtype>).<name>`` (eps, tiny, min) as a float."""
    import numpy as np

    return float(getattr(np.finfo(t._data.dtype), name))


def as_float_tensor(value, like=None):
    """A python number or tensor as a floating tensor (the default dtype for numbers)."""
    from disthook.tensor import Tensor, tensor

    if isinstance(value, Tensor):
        return value if value.is_floating_point() else value.float()
    return tensor(value, dtype=None if like is None else like.dtype)


class Distribution:
    """``batch_shape`` (independent distributions) and ``event_shape`` (one draw's shape)."""

    has_rsample = False
    _validate_args = False

    def __init__(self, batch_shape=(), event_shape=(), validate_args: bool | None = None):
        from disthook.tensor import Size

        self._batch_shape = Size(batch_shape)
        self._event_shape = Size(event_shape)
        if validate_args is not None:
            self._validate_args = validate_args

    @property
    def batch_shape(self):
        return self._batch_shape

    @property
    def event_shape(self):
        return self._event_shape

    @property
    def stddev(self):
        return self.variance.sqrt()

    def _extended_shape(self, sample_shape=()) -> tuple:
        return tuple(sample_shape) + tuple(self._batch_shape) + tuple(self._event_shape)

    def sample(self, sample_shape=()):
        """A draw without gradient (``rsample`` under no_grad where it exists)."""
        with grad_mode.no_grad():
            return self.rsample(sample_shape)

    def rsample(self, sample_shape=()):
        raise NotImplementedError(f"{type(self).__name__} does not support rsample: its "
                                  "samples are not differentiable in disthook or torch")

    def sample_n(self, n: int):
        return self.sample((n,))

    def log_prob(self, value):
        raise NotImplementedError

    def entropy(self):
        raise NotImplementedError

    def perplexity(self):
        return self.entropy().exp()

    def _support(self, values, expand: bool):
        """The support ``values`` (1-d) as ``enumerate_support`` gives them: one row per
        value, over the batch shape."""
        values = values.reshape((-1,) + (1,) * len(self.batch_shape))
        return values.expand((-1,) + tuple(self.batch_shape)) if expand else values

    def _check_support(self, ok, value) -> None:
        if self._validate_args and not bool(ok.all()):
            raise ValueError(
                f"Expected value argument ({type(value).__name__} of shape "
                f"{tuple(value.shape)}) to be within the support of the distribution "
                f"{type(self).__name__}, but found invalid values:\n{value}")

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
