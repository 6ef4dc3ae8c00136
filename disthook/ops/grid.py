"""``F.affine_grid`` as one node, as torch records it (``AffineGridGeneratorBackward0``).

The grid is ``base @ theta^T``: ``base`` holds the output's normalised pixel coordinates (and
a column of ones) and depends on sizes only, so the node keeps it as a constant and saves no
tensor. Like torch's, its backward can run again after a backward without ``retain_graph``
(a spatial transformer that samples one grid several times, each with its own ``grad``).
"""
from __future__ import annotations

import numpy as np

from disthook.ops.base import Op


class AffineGridGenerator(Op):
    """``theta`` (N, k, k+1) -> grid (N, *spatial, k); ``base`` is (P, k+1), P the points."""

    @staticmethod
    def forward(ctx, theta, base, spatial):
        ctx.base, ctx.spatial = base, spatial
        grid = np.matmul(base.astype(theta._data.dtype, copy=False),
                         np.swapaxes(theta._data, 1, 2))
        return np.ascontiguousarray(grid.reshape(theta.shape[0], *spatial, base.shape[1] - 1))

    @staticmethod
    def backward(ctx, g):
        from disthook.tensor import Tensor

        n, k = g.shape[0], ctx.base.shape[1] - 1
        base = Tensor._make(np.ascontiguousarray(ctx.base.astype(g._data.dtype)), None, 0)
        return g.reshape(n, -1, k).transpose(1, 2) @ base

