"""The base of every distribution: shapes, argument and sample validation, expand,
sample under no_grad; and the small helpers the distributions share."""
from __future__ import annotations

from typing import ClassVar

from disthook.autograd import grad_mode

__all__ = ["Distribution"]


def finfo(t, name: str) -> float:
    """``numpy.finfo(<t's dtype>).<name>`` (eps, tiny, min, max) as a float."""
    import numpy as np

    return float(getattr(np.finfo(t._data.dtype), name))


def as_float_tensor(value, like=None):
    """A python number or tensor as a floating tensor (the default dtype for numbers)."""
    from disthook.tensor import Tensor, tensor

    if isinstance(value, Tensor):
        return value if value.is_floating_point() else value.float()
    return tensor(value, dtype=None if like is None else like.dtype)


def broadcast_all(*values):
    """Parameters as float tensors of one shape; numbers take a tensor argument's dtype."""
    from disthook import broadcast_tensors
    from disthook.tensor import Tensor

    like = next((v for v in values if isinstance(v, Tensor) and v.is_floating_point()), None)
    return broadcast_tensors(*(as_float_tensor(v, like) for v in values))


def sum_rightmost(value, dim: int):
    """``value`` summed over its ``dim`` rightmost dims (none when ``dim`` is 0)."""
    return value.reshape(value.shape[:value.dim() - dim] + (-1,)).sum(-1) if dim else value


def from_numpy(data, like):
    """A constant tensor (no graph) of numpy ``data`` in ``like``'s dtype."""
    from disthook.tensor import Tensor

    return Tensor._make(data.astype(like._data.dtype), None, 0)


def fill_where(condition, value, fill: float):
    """``value`` where ``condition`` holds, the number ``fill`` elsewhere."""
    from disthook import full_like, where

    return where(condition, value, full_like(value, fill))


def text(value) -> str:
    """``value`` as torch's f-strings show it: a 0-d tensor as its number."""
    from disthook.tensor import Tensor

    if isinstance(value, Tensor) and value.dim() == 0:
        return str(value.item())
    return str(value)


class lazy_property:
    """A parameter computed from another on first read, then stored on the instance
    (``probs`` from ``logits``): only the parameters given are validated and shown."""

    def __init__(self, fn) -> None:
        self.fn = fn
        self.__doc__ = fn.__doc__

    def __get__(self, instance, owner=None):
        if instance is None:
            return self
        value = self.fn(instance)
        instance.__dict__[self.fn.__name__] = value
        return value


class Distribution:
    """``batch_shape`` (independent distributions) and ``event_shape`` (one draw's shape).

    ``arg_constraints`` names each parameter and the set it must lie in; with validation on
    (torch's default) invalid parameters and values outside ``support`` raise ValueError.
    """

    has_rsample = False
    has_enumerate_support = False
    _validate_args = True
    arg_constraints: ClassVar[dict] = {}
    support = None
    # the tensors ``expand`` broadcasts to a new batch shape (their trailing event dims kept)
    _expand_params: ClassVar[tuple] = ()

    @staticmethod
    def set_default_validate_args(value: bool) -> None:
        """Turn argument and sample validation on or off for every distribution."""
        if value not in (True, False):
            raise ValueError(f"set_default_validate_args expects True or False, got {value!r}")
        Distribution._validate_args = value

    def __init__(self, batch_shape=(), event_shape=(), validate_args: bool | None = None):
        from disthook.tensor import Size

        self._batch_shape = Size(batch_shape)
        self._event_shape = Size(event_shape)
        if validate_args is not None:
            self._validate_args = validate_args
        if self._validate_args:
            self._validate_parameters()

    def _validate_parameters(self) -> None:
        from disthook.distributions import constraints

        for param, constraint in self.arg_constraints.items():
            if constraints.is_dependent(constraint):
                continue
            if param not in self.__dict__ and isinstance(getattr(type(self), param, None),
                                                         lazy_property):
                continue  # computed from the parameter that was given, which is checked
            value = getattr(self, param)
            if not bool(constraint.check(value).all()):
                raise ValueError(
                    f"Expected parameter {param} ({type(value).__name__} of shape "
                    f"{tuple(value.shape)}) of distribution {self!r} to satisfy the "
                    f"constraint {constraint!r}, but found invalid values:\n{text(value)}")

    @property
    def batch_shape(self):
        return self._batch_shape

    @property
    def event_shape(self):
        return self._event_shape

    @property
    def mean(self):
        raise NotImplementedError(f"{type(self).__name__} does not implement mean")

    @property
    def mode(self):
        raise NotImplementedError(f"{type(self).__name__} does not implement mode")

    @property
    def variance(self):
        raise NotImplementedError(f"{type(self).__name__} does not implement variance")

    @property
    def stddev(self):
        return self.variance.sqrt()

    def expand(self, batch_shape, _instance=None):
        """The same distribution over a larger batch shape (parameters expanded, not
        copied, and not validated again)."""
        from disthook.tensor import Size

        batch_shape = Size(batch_shape)
        new = type(self).__new__(type(self)) if _instance is None else _instance
        new.__dict__.update(self.__dict__)
        for name in self._expand_params:
            if name in self.__dict__:
                param = self.__dict__[name]
                trailing = tuple(param.shape[len(self.batch_shape):])
                new.__dict__[name] = param.expand(tuple(batch_shape) + trailing)
        return self._expanded(new, batch_shape)

    def _expanded(self, new, batch_shape):
        """``new`` (its parameters already expanded) finished as this distribution over
        ``batch_shape``: shapes set, validation as this one's, arguments not checked again."""
        Distribution.__init__(new, batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def _extended_shape(self, sample_shape=()) -> tuple:
        from disthook.tensor import Size

        if isinstance(sample_shape, int):
            sample_shape = (sample_shape,)
        return Size(tuple(sample_shape) + tuple(self._batch_shape) + tuple(self._event_shape))

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
        raise NotImplementedError(f"{type(self).__name__} does not implement log_prob")

    def cdf(self, value):
        raise NotImplementedError(f"{type(self).__name__} does not implement cdf")

    def icdf(self, value):
        raise NotImplementedError(f"{type(self).__name__} does not implement icdf")

    def entropy(self):
        raise NotImplementedError(f"{type(self).__name__} does not implement entropy")

    def enumerate_support(self, expand: bool = True):
        raise NotImplementedError(f"{type(self).__name__} does not implement "
                                  "enumerate_support")

    def perplexity(self):
        return self.entropy().exp()

    def _support(self, values, expand: bool):
        """The support ``values`` (1-d) as ``enumerate_support`` gives them: one row per
        value, over the batch shape."""
        values = values.reshape((-1,) + (1,) * len(self.batch_shape))
        return values.expand((-1,) + tuple(self.batch_shape)) if expand else values

    def _validate_sample(self, value) -> None:
        """A value to score must be a tensor that broadcasts with batch + event shape and
        lies in the support (only with validation on)."""
        from disthook.tensor import Tensor

        if not isinstance(value, Tensor):
            raise ValueError("The value argument to log_prob must be a Tensor")  # noqa: TRY004 (torch's type)
        event_start = value.dim() - len(self._event_shape)
        if tuple(value.shape[event_start:]) != tuple(self._event_shape):
            raise ValueError(f"The right-most size of value must match event_shape: "
                             f"{value.size()} vs {self._event_shape}.")
        expected = self._batch_shape + self._event_shape
        for got, want in zip(reversed(value.shape), reversed(expected)):
            if got != 1 and want != 1 and got != want:
                raise ValueError(f"Value is not broadcastable with batch_shape+event_shape: "
                                 f"{value.size()} vs {expected}.")
        support = self.support
        if support is not None and not bool(support.check(value).all()):
            raise ValueError(
                f"Expected value argument ({type(value).__name__} of shape "
                f"{tuple(value.shape)}) to be within the support ({support!r}) of the "
                f"distribution {self!r}, but found invalid values:\n{text(value)}")

    def _check_sample(self, value) -> None:
        if self._validate_args:
            self._validate_sample(value)

    def __repr__(self) -> str:
        shown = []
        for name in self.arg_constraints:
            if name in self.__dict__:
                param = self.__dict__[name]
                shown.append(f"{name}: {text(param) if param.numel() == 1 else param.size()}")
        return f"{type(self).__name__}({', '.join(shown)})"


class LocationMean:
    """For a distribution whose mean and mode are its ``loc`` (symmetric, unimodal)."""

    @property
    def mean(self):
        return self.loc

    @property
    def mode(self):
        return self.loc
