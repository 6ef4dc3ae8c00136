"""Max unpooling: the partial inverse of max pooling, one op per pooled rank.

Each value goes to the flat position (into the pooled dims of the output) that its index
names, every other position is zero. The gradient gathers from those positions; its own
gradient scatters back, so any order of derivative works.
"""
from __future__ import annotations

import math

import numpy as np

from disthook.ops.base import Op
from disthook.ops.shape import GatherAlong


def _rows(shape: tuple, nd: int) -> tuple:
    """``shape`` as (planes, positions): the leading dims together, the last ``nd`` flat."""
    return math.prod(shape[:-nd]), math.prod(shape[-nd:])


class MaxUnpool2d(Op):
    """``x`` of shape (..., h, w) and ``indices`` (an int64 array of that shape): zeros of
    shape (..., *output_size) with each value at the flat position its index names."""

    node_name = "MaxUnpool2DBackward0"

    @staticmethod
    def forward(ctx, x, indices, output_size):
        nd = len(output_size)
        planes, count = _rows(x._data.shape, nd)
        index = indices.reshape(planes, count)
        size = math.prod(output_size)
        bad = (index < 0) | (index >= size)
        if bad.any():
            raise RuntimeError(f"Found an invalid max index: {index[bad][0]} (output volumes "
                               f"are of size {'x'.join(map(str, output_size))}")
        out = np.zeros((planes, size), dtype=x._data.dtype)
        np.put_along_axis(out, index, x._data.reshape(planes, count), axis=1)
        ctx.index, ctx.in_shape, ctx.size = index, x._data.shape, size
        return out.reshape(x._data.shape[:-nd] + tuple(output_size))

    @staticmethod
    def backward(ctx, g):
        rows = g.reshape(ctx.index.shape[0], ctx.size)
        return GatherAlong.apply(rows, index=ctx.index, dim=1).reshape(ctx.in_shape)


class MaxUnpool3d(MaxUnpool2d):
    """The same over the last three dims (torch's 3-d node)."""

    node_name = "MaxUnpool3DBackward0"
