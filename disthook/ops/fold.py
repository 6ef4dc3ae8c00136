"""``unfold`` (im2col) and ``fold`` (col2im) of 4-d input: each is the other's adjoint, so each
op's backward is the other op and every order of derivative works."""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

from disthook.ops.base import Op


def blocks(spatial: tuple, kernel, dilation, padding, stride) -> tuple:
    """The number of sliding blocks along each of the two spatial dims."""
    return tuple((n + 2 * p - d * (k - 1) - 1) // s + 1
                 for n, k, d, p, s in zip(spatial, kernel, dilation, padding, stride))


def im2col(x: np.ndarray, kernel, dilation, padding, stride) -> np.ndarray:
    """``(N, C, H, W)`` to ``(N, C * kh * kw, L)``: every block, channel-major then kernel
    row-major, blocks row-major."""
    n, c = x.shape[:2]
    out = blocks(x.shape[2:], kernel, dilation, padding, stride)
    ph, pw = padding
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw))) if ph or pw else x
    s = xp.strides
    window = as_strided(xp, shape=(n, c, *kernel, *out),
                        strides=(s[0], s[1], s[2] * dilation[0], s[3] * dilation[1],
                                 s[2] * stride[0], s[3] * stride[1]), writeable=False)
    return np.ascontiguousarray(window).reshape(n, c * kernel[0] * kernel[1], out[0] * out[1])


def col2im(cols: np.ndarray, size: tuple, kernel, dilation, padding, stride) -> np.ndarray:
    """The adjoint of ``im2col``: every column entry added back at the position it reads."""
    n = cols.shape[0]
    out = blocks(size, kernel, dilation, padding, stride)
    c = cols.shape[1] // (kernel[0] * kernel[1])
    cols = cols.reshape(n, c, *kernel, *out)
    ph, pw = padding
    xp = np.zeros((n, c, size[0] + 2 * ph, size[1] + 2 * pw), dtype=cols.dtype)
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            rows = slice(i * dilation[0], i * dilation[0] + stride[0] * (out[0] - 1) + 1,
                         stride[0])
            columns = slice(j * dilation[1], j * dilation[1] + stride[1] * (out[1] - 1) + 1,
                            stride[1])
            xp[:, :, rows, columns] += cols[:, :, i, j]
    return xp[:, :, ph:ph + size[0], pw:pw + size[1]]


class Im2Col(Op):
    @staticmethod
    def forward(ctx, x, kernel, dilation, padding, stride):
        ctx.geometry = (tuple(x._data.shape[2:]), kernel, dilation, padding, stride)
        return im2col(x._data, kernel, dilation, padding, stride)

    @staticmethod
    def backward(ctx, g):
        size, kernel, dilation, padding, stride = ctx.geometry
        return Col2Im.apply(g, size=size, kernel=kernel, dilation=dilation, padding=padding,
                            stride=stride)


class Col2Im(Op):
    @staticmethod
    def forward(ctx, cols, size, kernel, dilation, padding, stride):
        ctx.geometry = (kernel, dilation, padding, stride)
        return np.ascontiguousarray(col2im(cols._data, size, kernel, dilation, padding, stride))

    @staticmethod
    def backward(ctx, g):
        kernel, dilation, padding, stride = ctx.geometry
        return Im2Col.apply(g, kernel=kernel, dilation=dilation, padding=padding, stride=stride)
