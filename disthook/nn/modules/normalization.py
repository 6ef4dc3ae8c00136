"""``LayerNorm`` (over each sample's trailing dims) and ``GroupNorm`` (over groups of
channels)."""
from __future__ import annotations

import numbers

from disthook.nn import functional as F
from disthook.nn import init
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
