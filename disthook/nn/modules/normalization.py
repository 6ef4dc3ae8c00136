"""``LayerNorm`` and ``RMSNorm`` (over each sample's trailing dims), ``GroupNorm`` (over groups
of channels) and the local response norms (across neighbouring channels)."""
from __future__ import annotations

import numbers

import numpy as np

from disthook.nn import functional as F
from disthook.nn import init
from disthook.nn._functional.normalization import channel_matmul
from disthook.nn.modules.module import Module
from disthook.nn.parameter import Parameter
from disthook.tensor import Tensor, empty


class LayerNorm(Module):
    """Normalises the last ``len(normalized_shape)`` dims; an elementwise weight (ones) and
    bias (zeros) of that shape when ``elementwise_affine``."""

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True,
                 bias: bool = True, device=None, dtype=None) -> None:
        super().__init__()
        if isinstance(normalized_shape, numbers.Integral):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        _affine_parameters(self, self.normalized_shape, elementwise_affine, bias, dtype, device)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        _reset_affine(self)

    def forward(self, input: Tensor) -> Tensor:
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}, bias={self.bias is not None}")


class GroupNorm(Module):
    """Normalises each sample over groups of ``num_channels / num_groups`` channels; a
    per-channel weight (ones) and bias (zeros) when ``affine``."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5,
                 affine: bool = True, device=None, dtype=None, *, bias: bool = True) -> None:
        super().__init__()
        if num_channels % num_groups != 0:
            raise ValueError("num_channels must be divisible by num_groups")
        self.num_groups = num_groups
        self.num_channels = num_channels
        self.eps = eps
        self.affine = affine
        _affine_parameters(self, (num_channels,), affine, bias, dtype, device)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        _reset_affine(self)

    def forward(self, input: Tensor) -> Tensor:
        return F.group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.num_groups}, {self.num_channels}, eps={self.eps}, "
                f"affine={self.affine}, bias={self.bias is not None}")


def _affine_parameters(module: Module, shape: tuple, affine: bool, bias: bool, dtype,
                       device) -> None:
    """A weight and (with ``bias``) a bias of ``shape`` when ``affine``; None otherwise."""
    module.register_parameter(
        "weight", Parameter(empty(shape, dtype=dtype, device=device)) if affine else None)
    module.register_parameter(
        "bias", Parameter(empty(shape, dtype=dtype, device=device)) if affine and bias else None)


def _reset_affine(module: Module) -> None:
    """Weight ones, bias zeros (where they exist)."""
    if module.weight is not None:
        init.ones_(module.weight)
    if module.bias is not None:
        init.zeros_(module.bias)


class RMSNorm(Module):
    """Divides by the root mean square over the last ``len(normalized_shape)`` dims; an
    elementwise weight (ones) when ``elementwise_affine``. ``eps`` None: the machine epsilon
    of the input's dtype."""

    def __init__(self, normalized_shape, eps: float | None = None,
                 elementwise_affine: bool = True, device=None, dtype=None) -> None:
        super().__init__()
        if isinstance(normalized_shape, numbers.Integral):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(empty(self.normalized_shape, dtype=dtype, device=device))
        else:
            self.register_parameter("weight", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.elementwise_affine:
            init.ones_(self.weight)

    def forward(self, x: Tensor) -> Tensor:
        return F.rms_norm(x, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}")


class LocalResponseNorm(Module):
    """Normalises each channel by the mean square of its ``size`` neighbouring channels."""

    def __init__(self, size: int, alpha: float = 1e-4, beta: float = 0.75,
                 k: float = 1.0) -> None:
        super().__init__()
        self.size = size
        self.alpha = alpha
        self.beta = beta
        self.k = k

    def forward(self, input: Tensor) -> Tensor:
        return F.local_response_norm(input, self.size, self.alpha, self.beta, self.k)

    def extra_repr(self) -> str:
        return f"{self.size}, alpha={self.alpha}, beta={self.beta}, k={self.k}"


class CrossMapLRN2d(Module):
    """The legacy (Lua torch) local response norm of 4-d input. Its channel windows are those
    of torch's running-sum implementation, which keeps channel 0 in every window from
    channel ``(size - 1) // 2 + 1`` on and lets windows grow there: reproduced as is."""

    def __init__(self, size: int, alpha: float = 1e-4, beta: float = 0.75,
                 k: float = 1) -> None:
        super().__init__()
        self.size = size
        self.alpha = alpha
        self.beta = beta
        self.k = k

    def forward(self, input: Tensor) -> Tensor:
        if input.ndim != 4:
            raise ValueError(f"CrossMapLRN2d: Expected input to be 4D, got {input.ndim}D "
                             "instead.")
        band = _legacy_band(input.shape[1], self.size).astype(input._data.dtype)
        scale = channel_matmul(input * input, band) * (self.alpha / self.size) + self.k
        return input * scale.pow(-self.beta)

    def extra_repr(self) -> str:
        return f"{self.size}, alpha={self.alpha}, beta={self.beta}, k={self.k}"


def _legacy_band(channels: int, size: int) -> np.ndarray:
    """Row ``c``: how often each channel's square enters channel ``c``'s sum, replaying the
    legacy running sum (start with the first ``pre_pad`` channels; each step adds the channel
    ``pre_pad - 1`` ahead and, past ``pre_pad``, drops the one ``pre_pad`` behind)."""
    pre_pad = (size - 1) // 2 + 1
    band = np.zeros((channels, channels))
    band[0, :min(pre_pad, channels)] = 1
    for c in range(1, channels):
        band[c] = band[c - 1]
        if c < channels - pre_pad + 1:
            band[c, c + pre_pad - 1] += 1
        if c > pre_pad:
            band[c, c - pre_pad] -= 1
    return band
