"""Resampling of the spatial dims (``F.interpolate``): nearest, (bi/tri)linear, bicubic, and
bilinear or bicubic with antialiasing.

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


def _cubic(x: np.ndarray, a: float) -> np.ndarray:
    """Keys' cubic convolution kernel with parameter ``a`` at distances ``x``."""
    x = np.abs(x)
    near = ((a + 2) * x - (a + 3)) * x * x + 1
    far = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return np.where(x <= 1, near, np.where(x < 2, far, 0.0))


def cubic_matrix(in_size: int, out_size: int, scale_factor, align_corners: bool):
    """Rows of four weights (Keys' kernel, a = -0.75, as torch's bicubic): output ``i`` mixes
    the four inputs around its source position, which is not clamped at the border; the
    indices past either end take the edge input."""
    scale = _scale(in_size, out_size, scale_factor, align_corners)
    i = np.arange(out_size, dtype=np.float64)
    src = i * scale if align_corners else (i + 0.5) * scale - 0.5
    floor = np.floor(src)
    t = src - floor
    m = np.zeros((out_size, in_size))
    rows = np.arange(out_size)
    for k in range(-1, 3):
        index = np.clip(floor.astype(np.int64) + k, 0, in_size - 1)
        np.add.at(m, (rows, index), _cubic(t - k, -0.75))
    return m


def antialias_matrix(in_size: int, out_size: int, scale_factor, align_corners: bool,
                     cubic: bool):
    """Rows of torch's antialiased resampling (``antialias=True``): when shrinking, the
    triangle (bilinear) or cubic (a = -0.5) filter is widened by the scale, so each output
    averages every input under it; the weights of a row sum to one."""
    scale = _scale(in_size, out_size, scale_factor, align_corners)
    support = (2.0 if cubic else 1.0) * max(scale, 1.0)
    inv = 1.0 / scale if scale >= 1.0 else 1.0
    m = np.zeros((out_size, in_size))
    for i in range(out_size):
        center = scale * (i + 0.5)
        lo = max(int(center - support + 0.5), 0)
        hi = min(int(center + support + 0.5), in_size)
        x = (np.arange(lo, hi) - center + 0.5) * inv
        w = _cubic(x, -0.5) if cubic else np.maximum(0.0, 1.0 - np.abs(x))
        total = w.sum()
        m[i, lo:hi] = w / total if total else w
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
    ("bicubic", 2): "UpsampleBicubic2DBackward0",
    ("bilinear-aa", 2): "UpsampleBilinear2DAaBackward0",
    ("bicubic-aa", 2): "UpsampleBicubic2DAaBackward0",
}
OPS = {key: type(name.replace("Backward0", ""), (Resample,), {"node_name": name})
       for key, name in NODE_NAMES.items()}
