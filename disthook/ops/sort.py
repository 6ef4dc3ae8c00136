"""Sorting and selection: sort and topk. Each returns (values, indices); the gradient of
the values goes back to the places the indices name."""
from __future__ import annotations

import numpy as np

from disthook.ops.base import Op


def sort_indices(x: np.ndarray, dim: int, descending: bool, stable: bool) -> np.ndarray:
    """Indices that sort ``x`` along ``dim``; ties keep their order when ``stable``, and
    NaN sorts as the largest value, as in torch."""
    kind = "stable" if stable else None
    if not descending:
        return np.argsort(x, axis=dim, kind=kind)
    # a stable descending sort: sort the reversed axis ascending, then map back and reverse
    n = x.shape[dim]
    flipped = np.flip(x, axis=dim)
    order = np.argsort(flipped, axis=dim, kind="stable")
    return np.flip(n - 1 - order, axis=dim)


def _gather_sorted(ctx, x: np.ndarray, index: np.ndarray, dim: int) -> tuple:
    """(values at ``index`` along ``dim``, index); ``ctx`` keeps where they came from."""
    if x.ndim == 0:  # a scalar sorts to itself
        index, dim = np.zeros((), np.int64), None
        values = x.copy()
    else:
        index = index.astype(np.int64)
        values = np.take_along_axis(x, index, axis=dim)
    ctx.index, ctx.dim, ctx.shape = index, dim, x.shape
    return values, index


class Sort(Op):
    """``sort(dim, descending)``."""

    @staticmethod
    def forward(ctx, a, dim=-1, descending=False, stable=False):
        x = a._data
        index = sort_indices(x, dim, descending, stable) if x.ndim else None
        return _gather_sorted(ctx, x, index, dim)

    @staticmethod
    def backward(ctx, g, g_idx=None):
        if ctx.dim is None:
            return g
        from disthook.ops.shape import ScatterAlong

        return ScatterAlong.apply(g, index=ctx.index, dim=ctx.dim, shape=ctx.shape)


class SortStable(Sort):
    """``sort(stable=True, ...)``: torch records it under its own node."""

    node_name = "SortBackward1"


class Topk(Sort):
    """The ``k`` largest (or smallest) values along ``dim``, in order (``sorted`` or not:
    sorted order is one torch allows)."""

    node_name = "TopkBackward0"

    @staticmethod
    def forward(ctx, a, k, dim=-1, largest=True, sorted=True):
        x = a._data
        index = None
        if x.ndim:
            index = np.take(sort_indices(x, dim, largest, stable=True), np.arange(k), axis=dim)
        return _gather_sorted(ctx, x, index, dim)
