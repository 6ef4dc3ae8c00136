"""Rearranging ``nn.functional`` ops: ``unfold`` / ``fold`` (sliding blocks to columns and back)
and ``channel_shuffle``."""
from __future__ import annotations

import numpy as np

import disthook.nn.functional as F
from disthook.ops import fold as FoldOps
from disthook.ops.base import Op
from disthook.tensor import Tensor

__all__ = ["channel_shuffle", "fold", "native_channel_shuffle", "unfold"]


def _pair_args(kernel_size, dilation, padding, stride) -> tuple:
    return tuple(tuple(int(v) for v in F._ntuple(a, 2))
                 for a in (kernel_size, dilation, padding, stride))


def unfold(input: Tensor, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:
    """Every ``kernel_size`` block of ``(N, C, H, W)`` (or ``(C, H, W)``) input as a column:
    ``(N, C * prod(kernel_size), L)``."""
    if input.ndim not in (3, 4):
        raise NotImplementedError(f"Input Error: Only 3D or 4D input Tensors are supported "
                                  f"(got {input.ndim}D)")
    kernel, dilation, padding, stride = _pair_args(kernel_size, dilation, padding, stride)
    _check_geometry(kernel, dilation, padding, stride)
    batched = input.ndim == 4
    x = input if batched else input.unsqueeze(0)
    out = FoldOps.blocks(tuple(x.shape[2:]), kernel, dilation, padding, stride)
    if any(o < 1 for o in out):
        raise RuntimeError(
            f"Given input with spatial size ({x.shape[2]}, {x.shape[3]}), kernel_size="
            f"({kernel[0]}, {kernel[1]}), dilation=({dilation[0]}, {dilation[1]}), padding="
            f"({padding[0]}, {padding[1]}), calculated shape of the array of sliding blocks as "
            f"({out[0]}, {out[1]}), but its components must be at least one.")
    cols = FoldOps.Im2Col.apply(x, kernel=kernel, dilation=dilation, padding=padding,
                                stride=stride)
    return cols if batched else cols.squeeze(0)


def fold(input: Tensor, output_size, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:
    """The adjoint of ``unfold``: columns ``(N, C * prod(kernel_size), L)`` summed back into
    ``(N, C, *output_size)``, overlapping blocks adding up."""
    if input.ndim not in (2, 3):
        raise NotImplementedError(f"Input Error: Only unbatched (2D) or batched (3D) input "
                                  f"Tensors are supported (got {input.ndim}D)")
    size = tuple(int(v) for v in F._ntuple(output_size, 2))
    kernel, dilation, padding, stride = _pair_args(kernel_size, dilation, padding, stride)
    _check_geometry(kernel, dilation, padding, stride)
    batched = input.ndim == 3
    x = input if batched else input.unsqueeze(0)
    area = kernel[0] * kernel[1]
    if x.shape[1] % area:
        raise RuntimeError(f"Expected size of input's dimension 1 to be divisible by the "
                           f"product of kernel_size, but got input.size(1)={x.shape[1]} and "
                           f"kernel_size=({kernel[0]}, {kernel[1]})")
    out = FoldOps.blocks(size, kernel, dilation, padding, stride)
    if out[0] * out[1] != x.shape[2]:
        raise RuntimeError(
            f"Given output_size=({size[0]}, {size[1]}), kernel_size=({kernel[0]}, {kernel[1]}), "
            f"dilation=({dilation[0]}, {dilation[1]}), padding=({padding[0]}, {padding[1]}), "
            f"stride=({stride[0]}, {stride[1]}), expected size of input's dimension 2 to match "
            f"the calculated number of sliding blocks {out[0]} * {out[1]} = {out[0] * out[1]}, "
            f"but got input.size(2)={x.shape[2]}.")
    image = FoldOps.Col2Im.apply(x, size=size, kernel=kernel, dilation=dilation,
                                 padding=padding, stride=stride)
    return image if batched else image.squeeze(0)


def _check_geometry(kernel, dilation, padding, stride) -> None:
    if any(k <= 0 for k in kernel):
        raise RuntimeError(f"kernel size should be greater than zero, but got kernel_height: "
                           f"{kernel[0]} kernel_width: {kernel[1]}")
    if any(d <= 0 for d in dilation):
        raise RuntimeError(f"dilation should be greater than zero, but got dilation_height: "
                           f"{dilation[0]} dilation_width: {dilation[1]}")
    if any(p < 0 for p in padding):
        raise RuntimeError(f"padding should be non-negative, but got pad_height: {padding[0]} "
                           f"pad_width: {padding[1]}")
    if any(s <= 0 for s in stride):
        raise RuntimeError(f"stride should be greater than zero, but got stride_height: "
                           f"{stride[0]} stride_width: {stride[1]}")


def _shuffle(x: np.ndarray, groups: int) -> np.ndarray:
    n, c = x.shape[:2]
    rest = x.shape[2:]
    return np.ascontiguousarray(
        x.reshape(n, groups, c // groups, *rest).swapaxes(1, 2)).reshape(x.shape)


class ChannelShuffle(Op):
    """Channels ``(g, C/g)`` transposed to ``(C/g, g)``; its adjoint shuffles by ``C/g``."""

    @staticmethod
    def forward(ctx, x, groups):
        ctx.groups = x._data.shape[1] // groups
        return _shuffle(x._data, groups)

    @staticmethod
    def backward(ctx, g):
        return ChannelShuffle.apply(g, groups=ctx.groups)


def channel_shuffle(input: Tensor, groups: int) -> Tensor:
    """Interleave the channels (dim 1) of ``groups`` groups."""
    if input.ndim < 3:
        raise RuntimeError(f"channel_shuffle expects input to have at least 3 dimensions, but "
                           f"got input with sizes {list(input.shape)}")
    if groups <= 0:
        raise RuntimeError(f"Number of groups to divide channels in must be positive. Value of "
                           f"groups:{groups}")
    if input.shape[1] % groups:
        raise RuntimeError(f"Number of channels must be divisible by groups. Got "
                           f"{input.shape[1]} channels and {groups} groups.")
    return ChannelShuffle.apply(input, groups=int(groups))


native_channel_shuffle = channel_shuffle
