"""Strided views and their adjoints: diagonal / diag_embed, unfold / its backward,
as_strided, and flip (a copy, as in torch).

A view op returns a numpy view of its input's memory (``view = True``), so writes through
it reach the input, as in torch. Each view's gradient is its adjoint op, written as an op of
its own, and the two are each other's backward: every order of derivative works.
"""
from __future__ import annotations

import numpy as np

from disthook.ops.base import Op

_strided = np.lib.stride_tricks.as_strided


def diagonal_view(x: np.ndarray, offset: int, dim1: int, dim2: int) -> np.ndarray:
    """A writable view of the diagonal of ``x`` over dims (dim1, dim2), last."""
    y = np.moveaxis(x, (dim1, dim2), (-2, -1))
    y = y[..., :, offset:] if offset >= 0 else y[..., -offset:, :]
    n = max(min(y.shape[-2], y.shape[-1]), 0)
    return _strided(y, y.shape[:-2] + (n,), y.strides[:-2] + (y.strides[-2] + y.strides[-1],))


class Diagonal(Op):
    view = True
    complex_ok = True  # moves values: the same rule for complex

    @staticmethod
    def forward(ctx, a, offset=0, dim1=0, dim2=1):
        ctx.shape, ctx.offset, ctx.dim1, ctx.dim2 = a._data.shape, offset, dim1, dim2
        return diagonal_view(a._data, offset, dim1, dim2)

    @staticmethod
    def backward(ctx, g):
        return DiagEmbed.apply(g, shape=ctx.shape, offset=ctx.offset, dim1=ctx.dim1,
                               dim2=ctx.dim2)


class DiagEmbed(Op):
    """Zeros of ``shape`` with ``a`` (whose last dim runs along the diagonal) written on the
    diagonal over (dim1, dim2): the adjoint of Diagonal."""

    complex_ok = True

    @staticmethod
    def forward(ctx, a, shape, offset=0, dim1=0, dim2=1):
        ctx.offset, ctx.dim1, ctx.dim2 = offset, dim1, dim2
        out = np.zeros(shape, dtype=a._data.dtype)
        diagonal_view(out, offset, dim1, dim2)[...] = a._data
        return out

    @staticmethod
    def backward(ctx, g):
        return Diagonal.apply(g, offset=ctx.offset, dim1=ctx.dim1, dim2=ctx.dim2)


def unfold_view(x: np.ndarray, dim: int, size: int, step: int) -> np.ndarray:
    if x.ndim == 0:
        return _strided(x, (size,), (0,))
    n = x.shape[dim]
    count = (n - size) // step + 1
    shape = x.shape[:dim] + (count,) + x.shape[dim + 1:] + (size,)
    st = x.strides
    strides = st[:dim] + (st[dim] * step,) + st[dim + 1:] + (st[dim],)
    return _strided(x, shape, strides)


class Unfold(Op):
    view = True

    @staticmethod
    def forward(ctx, a, dim, size, step):
        ctx.shape, ctx.dim, ctx.size, ctx.step = a._data.shape, dim, size, step
        return unfold_view(a._data, dim, size, step)

    @staticmethod
    def backward(ctx, g):
        return UnfoldBackward.apply(g, shape=ctx.shape, dim=ctx.dim, size=ctx.size,
                                    step=ctx.step)


class UnfoldBackward(Op):
    """The windows of ``a`` summed back to where unfold took them from."""

    @staticmethod
    def forward(ctx, a, shape, dim, size, step):
        ctx.dim, ctx.size, ctx.step = dim, size, step
        out = np.zeros(shape, dtype=a._data.dtype)
        if not shape:
            out[...] = a._data.sum()
            return out
        target = np.moveaxis(out, dim, -1)
        windows = np.moveaxis(a._data, dim, -2)
        starts = step * np.arange(windows.shape[-2])
        for j in range(size):
            target[..., starts + j] += windows[..., :, j]
        return out

    @staticmethod
    def backward(ctx, g):
        return Unfold.apply(g, dim=ctx.dim, size=ctx.size, step=ctx.step)


def storage_root(x: np.ndarray) -> np.ndarray:
    """The outermost numpy array whose memory ``x`` views, as a flat array."""
    root = x
    while isinstance(root.base, np.ndarray):
        root = root.base
    return root.reshape(-1) if root.flags.c_contiguous else root


def storage_offset(x: np.ndarray) -> int:
    root = storage_root(x)
    start = root.__array_interface__["data"][0]
    return (x.__array_interface__["data"][0] - start) // x.itemsize


def _positions(shape: tuple, strides: tuple, offset: int) -> np.ndarray:
    """The storage index of every element of a (shape, strides, offset) geometry."""
    pos = np.full(shape, offset, dtype=np.int64)
    for d, (n, st) in enumerate(zip(shape, strides)):
        step = np.arange(n, dtype=np.int64) * st
        pos = pos + step.reshape((n,) + (1,) * (len(shape) - d - 1))
    return pos


class AsStridedView(Op):
    """``as_strided(size, stride, storage_offset)`` over the input's storage (``offset``
    None: the input's own, read where the storage is: on a worker, for a value kept there).
    The gradient is summed into the storage's positions and read back in the input's
    geometry."""

    node_name = "AsStridedBackward0"
    view = True

    @staticmethod
    def forward(ctx, a, size, stride, offset):
        x = a._data
        root = storage_root(x)
        if offset is None:
            offset = storage_offset(x)
        need = offset + sum((n - 1) * s for n, s in zip(size, stride)) + 1 if all(size) else 0
        if root.ndim != 1 or need > root.size or offset < 0 or min(stride, default=0) < 0:
            raise RuntimeError(
                f"setStorage: sizes {list(size)}, strides {list(stride)}, storage offset "
                f"{offset}, and itemsize {x.itemsize} requiring a storage size of "
                f"{need * x.itemsize} are out of bounds for storage of size "
                f"{root.size * x.itemsize}")
        ctx.geometry = (root.size, tuple(size), tuple(stride), offset, x.shape,
                        tuple(s // x.itemsize for s in x.strides), storage_offset(x))
        return _strided(root[offset:], tuple(size), tuple(s * x.itemsize for s in stride))

    @staticmethod
    def backward(ctx, g):
        from disthook.ops.scan import no_second_order
        from disthook.tensor import Tensor

        no_second_order(g, "as_strided", depends_on_inputs=False)  # linear: g only
        n, size, stride, offset, in_shape, in_strides, in_offset = ctx.geometry
        storage = np.zeros(n, dtype=g._data.dtype)
        np.add.at(storage, _positions(size, stride, offset), g._data)
        return Tensor._make(storage[_positions(in_shape, in_strides, in_offset)], None, 0)


class Flip(Op):
    complex_ok = True
    @staticmethod
    def forward(ctx, a, dims):
        ctx.dims = dims
        return np.flip(a._data, dims).copy() if dims else a._data.copy()

    @staticmethod
    def backward(ctx, g):
        return Flip.apply(g, dims=ctx.dims)
