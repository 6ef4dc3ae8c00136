"""Pooling over windows given by index lists: adaptive max pooling (windows that grow and
overlap with the ratio of sizes), fractional max pooling (windows that start at
pseudo-random offsets) and adaptive average pooling in 3-d.

A window along pooled dim ``d`` is a row of ``starts[d]`` positions; the max over the product
of one row per dim is taken with one gather. Its gradient scatters (adding, since windows
may overlap) to the flat position of each maximum, and that scatter's adjoint is the gather
again, so every order of derivative works.
"""
from __future__ import annotations

import math

import numpy as np

from disthook import _dtype
from disthook.ops.base import Op


def adaptive_rows(n: int, o: int) -> np.ndarray:
    """``(o, k)`` input positions of adaptive window i (floor(i*n/o) .. ceil((i+1)*n/o) - 1),
    short windows padded by repeating their last position (harmless for a max)."""
    i = np.arange(o)
    start = (i * n) // o
    end = -((-(i + 1) * n) // o)
    k = int((end - start).max())
    return np.minimum(start[:, None] + np.arange(k), end[:, None] - 1)


def fractional_rows(n: int, o: int, k: int, samples: np.ndarray) -> np.ndarray:
    """``(*lead, o, k)`` positions of the fractional windows: window ``i`` starts at
    ``floor((i + u) * a) - floor(u * a)`` with ``a = (n - k) / (o - 1)`` and ``u`` the
    sample in [0, 1) of its plane; the last window ends at the input's end."""
    if o == 1:
        starts = np.zeros(samples.shape + (1,), dtype=np.int64)
    else:
        # in the samples' precision, as torch computes it (a float32 step may round)
        u = samples[..., None]
        alpha = np.asarray(n - k, dtype=u.dtype) / np.asarray(o - 1, dtype=u.dtype)
        i = np.arange(o, dtype=u.dtype)
        starts = (((i + u) * alpha).astype(np.int64) - (u * alpha).astype(np.int64))
        starts[..., -1] = n - k
    return starts[..., None] + np.arange(k)


def flat_positions(rows: list, lead: tuple, spatial: tuple) -> np.ndarray:
    """Flat positions into the pooled dims of every element of every window, shaped
    ``(*lead, o_1..o_nd, k_1 * .. * k_nd)``; ``rows[d]`` is ``(*lead or nothing, o_d, k_d)``."""
    nd = len(rows)
    flat = np.zeros((), dtype=np.int64)
    for d, r in enumerate(rows):
        o, k = r.shape[-2:]
        r = np.broadcast_to(r, lead + (o, k))
        ones = (1,) * (nd - 1 - d)
        r = r.reshape(lead + (1,) * d + (o,) + ones + (1,) * d + (k,) + ones)
        flat = flat * spatial[d] + r
    return flat.reshape(flat.shape[:len(lead) + nd] + (-1,))


def _gather(x: np.ndarray, positions: np.ndarray, nd: int) -> np.ndarray:
    """``x``'s values at flat ``positions`` (``(*lead, anything)``) of its last ``nd`` dims."""
    lead = x.shape[:x.ndim - nd]
    rows = x.reshape(lead + (-1,))
    pos = np.broadcast_to(positions, lead + positions.shape[len(lead):])
    taken = np.take_along_axis(rows, pos.reshape(lead + (-1,)), axis=-1)
    return taken.reshape(pos.shape)


def _scatter_add(g: np.ndarray, positions: np.ndarray, in_shape: tuple, nd: int) -> np.ndarray:
    """Zeros of ``in_shape`` with each value of ``g`` added at its flat position."""
    lead = tuple(in_shape[:len(in_shape) - nd])
    size = math.prod(in_shape[len(in_shape) - nd:])
    planes = math.prod(lead)
    pos = np.broadcast_to(positions, g.shape).reshape(planes, -1)
    pos = pos + (np.arange(planes, dtype=np.int64) * size)[:, None]
    out = np.bincount(pos.ravel(), weights=g.reshape(-1), minlength=planes * size)
    return out.astype(g.dtype, copy=False).reshape(in_shape)


class WindowMax(Op):
    """Max over index-list windows; a second output holds each maximum's flat index into
    the pooled dims (as torch's ``return_indices``)."""

    @staticmethod
    def forward(ctx, x, rows):
        xd = x._data
        nd = len(rows)
        lead = xd.shape[:xd.ndim - nd]
        positions = flat_positions(rows, lead, xd.shape[xd.ndim - nd:])
        values = _gather(xd, positions, nd)
        arg = np.argmax(values, axis=-1)[..., None]
        if _dtype.kind(values.dtype) == "f":  # a NaN in a window is its maximum, as in torch
            nan = np.isnan(values)
            has_nan = nan.any(-1, keepdims=True)
            arg = np.where(has_nan, np.argmax(nan, axis=-1)[..., None], arg)
        best = np.take_along_axis(values, arg, axis=-1)[..., 0]
        indices = np.take_along_axis(np.broadcast_to(positions, values.shape), arg,
                                     axis=-1)[..., 0]
        ctx.indices, ctx.in_shape, ctx.nd = indices, xd.shape, nd
        return best, indices

    @staticmethod
    def backward(ctx, g, g_indices=None):
        return ScatterAdd.apply(g, positions=ctx.indices, in_shape=ctx.in_shape, nd=ctx.nd)


class AdaptiveMaxPool2D(WindowMax):
    node_name = "AdaptiveMaxPool2DBackward0"


class AdaptiveMaxPool3D(WindowMax):
    node_name = "AdaptiveMaxPool3DBackward0"


class FractionalMaxPool2D(WindowMax):
    node_name = "FractionalMaxPool2DBackward0"


class FractionalMaxPool3D(WindowMax):
    node_name = "FractionalMaxPool3DBackward0"


class ScatterAdd(Op):
    """The gradient of a window max: each value added at its flat position."""

    node_name = "MaxPoolScatterBackward0"

    @staticmethod
    def forward(ctx, g, positions, in_shape, nd):
        ctx.positions, ctx.nd = positions, nd
        return _scatter_add(g._data, positions, in_shape, nd)

    @staticmethod
    def backward(ctx, h):
        return GatherFlat.apply(h, positions=ctx.positions, nd=ctx.nd)


class GatherFlat(Op):
    """``h``'s values at flat positions of its last ``nd`` dims; adjoint of ScatterAdd."""

    @staticmethod
    def forward(ctx, h, positions, nd):
        ctx.positions, ctx.in_shape, ctx.nd = positions, h._data.shape, nd
        return _gather(h._data, positions, nd)

    @staticmethod
    def backward(ctx, g):
        return ScatterAdd.apply(g, positions=ctx.positions, in_shape=ctx.in_shape, nd=ctx.nd)


# ---- adaptive average pooling in 3-d --------------------------------------------------------------

def _along(x, mats: tuple):
    """``x`` (array or Tensor) with ``mats[d]`` (``(o_d, n_d)``) applied along each of its last
    ``len(mats)`` dims."""
    nd = len(mats)
    for d, m in enumerate(mats):
        axis = x.ndim - nd + d
        x = (x.swapaxes(axis, -1) @ m.T).swapaxes(axis, -1)
    return x


class AdaptiveAvgPool3D(Op):
    """Adaptive average pooling of the last three dims: an averaging matrix along each (the
    average over a box is separable); its gradient is the transposed matrices."""

    @staticmethod
    def forward(ctx, x, out):
        from disthook.ops.pool import adaptive_matrix

        xd = x._data
        mats = tuple(adaptive_matrix(n, o, xd.dtype) for n, o in zip(xd.shape[-3:], out))
        ctx.mats = mats
        return np.ascontiguousarray(_along(xd, mats))

    @staticmethod
    def backward(ctx, g):
        return AdaptiveAvgPool3DAdjoint.apply(g, mats=tuple(m.T for m in ctx.mats))


class AdaptiveAvgPool3DAdjoint(Op):
    """The gradient of adaptive 3-d average pooling (and, transposed back, its adjoint)."""

    node_name = "AdaptiveAvgPool3DBackwardBackward0"

    @staticmethod
    def forward(ctx, g, mats):
        ctx.mats = mats
        return np.ascontiguousarray(_along(g._data, mats))

    @staticmethod
    def backward(ctx, h):
        return AdaptiveAvgPool3DAdjoint.apply(h, mats=tuple(m.T for m in ctx.mats))
