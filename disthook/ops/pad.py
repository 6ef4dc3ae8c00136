"""Padding by index: 'reflect', 'replicate' and 'circular' modes.

Each output position along a padded dim reads one input position, so padding is a gather
along each of the last dims and its gradient the matching scatter-add; the two ops are
each other's adjoints. (Constant padding is ``shape.ConstantPad``.)
"""
from __future__ import annotations

import numpy as np

from disthook.ops.base import Op

MODES = ("reflect", "replicate", "circular")


def source_index(n: int, before: int, after: int, mode: str) -> np.ndarray:
    """For each position of the padded dim, the input position it copies."""
    pos = np.arange(-before, n + after)
    if mode == "reflect":
        pos = np.abs(pos)
        return np.where(pos > n - 1, 2 * (n - 1) - pos, pos)
    if mode == "replicate":
        return np.clip(pos, 0, n - 1)
    return pos % n


class PadIndex(Op):
    """``x`` gathered at ``indices[i]`` along dim ``-(len(indices)) + i``."""

    @staticmethod
    def forward(ctx, x, indices):
        ctx.indices, ctx.in_shape = indices, x._data.shape
        out = x._data
        first = out.ndim - len(indices)
        for i, idx in enumerate(indices):
            out = np.take(out, idx, axis=first + i)
        return out

    @staticmethod
    def backward(ctx, g):
        return PadIndexGrad.apply(g, indices=ctx.indices, in_shape=ctx.in_shape)


class PadIndexGrad(Op):
    """Scatter-add of ``g`` back through the gathers of ``PadIndex``."""

    @staticmethod
    def forward(ctx, g, indices, in_shape):
        ctx.indices = indices
        out = g._data
        first = out.ndim - len(indices)
        for i in reversed(range(len(indices))):
            axis = first + i
            shape = list(out.shape)
            shape[axis] = in_shape[axis]
            acc = np.zeros(shape, dtype=out.dtype)
            np.add.at(acc, (slice(None),) * axis + (indices[i],), out)
            out = acc
        return out

    @staticmethod
    def backward(ctx, h):
        return PadIndex.apply(h, indices=ctx.indices)


def _named(mode: str, dims: int) -> type:
    """The gather op for ``mode`` over ``dims`` dims, under the node name torch uses."""
    name = {"reflect": f"ReflectionPad{dims}DBackward0",
            "replicate": f"ReplicationPad{dims}DBackward0", "circular": "CopySlices"}[mode]
    cls_name = f"{mode.capitalize()}Pad{dims}d"
    return type(cls_name, (PadIndex,), {"node_name": name, "__module__": __name__})


OPS = {(mode, dims): _named(mode, dims) for mode in MODES for dims in (1, 2, 3)}
