"""Resampling of the spatial dims (``F.interpolate``): nearest and (bi/tri)linear.

Both are separable: along each spatial dim the output is a fixed matrix (output size x input
size) times the input, so one op applies one matrix per dim, and its backward is the same op
with the matrices transposed (differentiable in turn). The matrices follow torch's index
arithmetic: float32 ``floor(i * scale)`` for nearest, torch's source-index rule for linear.
"""
from __future__ import annotations

import numpy as np

from disthook.ops.base import Op


def _scale(in_size: int, out_size: int, scale_factor, align_corners: bool) -> float:
    """Input positions per output position, as torch computes it."""
    if align_corners:
        return (in_size - 1) / (out_size - 1) if out_size > 1 else 0.0
    if scale_factor is not None and scale_factor > 0:
        return 1.0 / scale_factor
    return in_size / out_size


def nearest_matrix(in_size: int, out_size: int, scale_factor, exact: bool = False):
    """One-hot rows: output ``i`` takes input ``floor(i * scale)`` (``floor((i + 0.5) *
    scale)`` for 'nearest-exact'), computed in float32 as torch's kernel does."""
    scale = np.float32(_scale(in_size, out_size, scale_factor, False))
    i = np.arange(out_size, dtype=np.float32)
    if exact:
        src = np.floor((i + np.float32(0.5)) * scale)
    elif out_size == in_size:
        src = i
    elif out_size == 2 * in_size:
        src = np.floor(i / 2)
    else:
        src = np.floor(i * scale)
    src = np.minimum(src.astype(np.int64), in_size - 1)
    m = np.zeros((out_size, in_size))
    m[np.arange(out_size), src] = 1.0
    return m


def linear_matrix(in_size: int, out_size: int, scale_factor, align_corners: bool):
    """Rows of two weights: output ``i`` mixes the two inputs around its source position."""
    scale = _scale(in_size, out_size, scale_factor, align_corners)
    i = np.arange(out_size, dtype=np.float64)
    if align_corners:
        src = i * scale
    else:
        src = np.maximum((i + 0.5) * scale - 0.5, 0.0)
    i0 = np.minimum(np.floor(src).astype(np.int64), in_size - 1)
    i1 = np.minimum(i0 + 1, in_size - 1)
    w1 = src - i0
    m = np.zeros((out_size, in_size))
    rows = np.arange(out_size)
    np.add.at(m, (rows, i0), 1.0 - w1)
    np.add.at(m, (rows, i1), w1)
    return m


def _apply(x: np.ndarray, matrices: tuple) -> np.ndarray:
    """``x`` with each trailing spatial dim k multiplied by ``matrices[k]``."""
    first = x.ndim - len(matrices)
    for k, m in enumerate(matrices):
        axis = first + k
        x = np.moveaxis(np.tensordot(m.astype(x.dtype, copy=False), x, axes=([1], [axis])),
                        0, axis)
    return np.ascontiguousarray(x)


class Resample(Op):
    """One matrix per trailing spatial dim; subclasses carry torch's node names."""

    @staticmethod
    def forward(ctx, a, matrices):
        ctx.matrices = matrices
        return _apply(a._data, matrices)

    @staticmethod
    def backward(ctx, g):
        return ResampleBackward.apply(g, matrices=tuple(m.T for m in ctx.matrices))


class ResampleBackward(Resample):
    """The transposed resampling (the gradient of one), itself differentiable."""

    node_name = "UpsampleBackwardBackward0"


NODE_NAMES = {
    ("nearest", 1): "UpsampleNearest1DBackward0",
    ("nearest", 2): "UpsampleNearest2DBackward0",
    ("nearest", 3): "UpsampleNearest3DBackward0",
    ("nearest-exact", 1): "UpsampleNearestExact1DBackward0",
    ("nearest-exact", 2): "UpsampleNearestExact2DBackward0",
    ("nearest-exact", 3): "UpsampleNearestExact3DBackward0",
    ("linear", 1): "UpsampleLinear1DBackward0",
    ("bilinear", 2): "UpsampleBilinear2DBackward0",
    ("trilinear", 3): "UpsampleTrilinear3DBackward0",
}
OPS = {key: type(name.replace("Backward0", ""), (Resample,), {"node_name": name})
       for key, name in NODE_NAMES.items()}
