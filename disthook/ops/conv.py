"""Convolution, with its two gradients as ops of their own.

Layout as torch: input ``(N, C_in, *spatial)``, weight ``(C_out, C_in / groups, *kernel)``.
The forward pads the input, unfolds it into columns (im2col: one strided view, copied a few
samples at a time) and multiplies each group's weight matrix with them; the weight gradient multiplies the
output gradient with the same columns, the input gradient folds the product of the weight
and the output gradient back onto the input (col2im). Each gradient is again a linear map
of one of the other operands, and the three ops are each other's adjoints:

    y  = conv(x, w)             dx = conv_input_grad(g, w)     dw = conv_weight_grad(x, g)

so the backward of every one of them is written with the other two, and derivatives of
any order work (``create_graph=True``).
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
from numpy.lib.stride_tricks import as_strided

from disthook.ops.base import Op

if TYPE_CHECKING:
    from disthook.tensor import Tensor


class ConvSpec(NamedTuple):
    """Everything but the operands: per spatial dim ``stride``, ``padding`` as (before,
    after), ``dilation``; and the number of ``groups``."""

    stride: tuple
    padding: tuple
    dilation: tuple
    groups: int


def conv_output_size(spec: ConvSpec, spatial: tuple, kernel: tuple) -> tuple:
    return tuple(
        (n + lo + hi - d * (k - 1) - 1) // s + 1
        for n, (lo, hi), d, k, s in zip(spatial, spec.padding, spec.dilation, kernel, spec.stride))


# ---- numpy: unfold the input into columns and fold columns back --------------------------
#
# Two layouts of the columns. Strided convolutions read each window through a strided view
# (``_columns``/``_fold``). Stride-1 convolutions use the "wide" layout: the padded input is
# flattened per channel and every kernel offset reads one contiguous run of it, as if each
# output row were as long as a padded input row; the extra outputs at the end of each row
# are dropped (forward) or given a zero gradient (backward). Its copies and adds move long
# contiguous runs, which numpy does several times faster than short rows.

def _pad(x: np.ndarray, padding: tuple) -> np.ndarray:
    if not any(lo or hi for lo, hi in padding):
        return x
    shape = x.shape[:2] + tuple(n + lo + hi for n, (lo, hi) in zip(x.shape[2:], padding))
    out = np.zeros(shape, dtype=x.dtype)
    out[(..., *[slice(lo, lo + n) for n, (lo, _) in zip(x.shape[2:], padding)])] = x
    return out


def _is_wide(spec: ConvSpec) -> bool:
    return all(s == 1 for s in spec.stride)


class _Wide(NamedTuple):
    """Geometry of the wide layout: padded spatial shape, its flat strides (elements), the
    length of a wide output row block and the flat offset of each kernel offset."""

    padded: tuple
    flat_strides: tuple
    length: int
    offsets: list

    @classmethod
    def of(cls, spatial: tuple, spec: ConvSpec, kernel: tuple, out: tuple) -> _Wide:
        padded = tuple(n + lo + hi for n, (lo, hi) in zip(spatial, spec.padding))
        strides = tuple(math.prod(padded[i + 1:]) for i in range(len(padded)))
        length = out[0] * strides[0]
        offsets = [sum(k * d * st for k, d, st in zip(ks, spec.dilation, strides))
                   for ks in np.ndindex(*kernel)]
        return cls(padded, strides, length, offsets)

    @property
    def flat_size(self) -> int:
        return max(math.prod(self.padded), self.offsets[-1] + self.length)

    def widen(self, g: np.ndarray) -> np.ndarray:
        """``(N, C, *out)`` to ``(N, C, length)``: each row zero-extended to padded length."""
        n, c, first, *rest = g.shape
        if tuple(rest) == self.padded[1:]:
            return g.reshape(n, c, self.length)
        wide = np.zeros((n, c, first, *self.padded[1:]), dtype=g.dtype)
        wide[(..., *[slice(0, m) for m in g.shape[2:]])] = g
        return wide.reshape(n, c, self.length)


def _flat_padded(x: np.ndarray, spec: ConvSpec, wide: _Wide) -> np.ndarray:
    """The zero-padded input, flattened per channel, with zeros after it as far as the
    last kernel offset reads."""
    n, c = x.shape[:2]
    flat = np.zeros((n, c, wide.flat_size), dtype=x.dtype)
    grid = flat[:, :, :math.prod(wide.padded)].reshape(n, c, *wide.padded)
    grid[(..., *[slice(lo, lo + m) for m, (lo, _) in zip(x.shape[2:], spec.padding)])] = x
    return flat


def _columns(x: np.ndarray, spec: ConvSpec, kernel: tuple, out: tuple) -> np.ndarray:
    """im2col: ``(N, groups, C_in / groups * prod(kernel), length)``, contiguous; ``length``
    is ``prod(out)``, or the wide length for stride-1 convolutions."""
    n, c = x.shape[:2]
    g = spec.groups
    dims = range(len(kernel))
    if _is_wide(spec):
        wide = _Wide.of(x.shape[2:], spec, kernel, out)
        flat = _flat_padded(x, spec, wide)
        st, item = flat.strides, flat.itemsize
        window = as_strided(
            flat, shape=(n, c, *kernel, wide.length),
            strides=(st[0], st[1],
                     *[item * wide.flat_strides[i] * spec.dilation[i] for i in dims], item),
            writeable=False)
        return window.reshape(n, g, c // g * math.prod(kernel), wide.length)
    xp = _pad(x, spec.padding)
    st = xp.strides
    window = as_strided(
        xp, shape=(n, c, *kernel, *out),
        strides=(st[0], st[1], *[st[2 + i] * spec.dilation[i] for i in dims],
                 *[st[2 + i] * spec.stride[i] for i in dims]),
        writeable=False)
    return window.reshape(n, g, c // g * math.prod(kernel), math.prod(out))


def _fold(cols: np.ndarray, x_shape: tuple, spec: ConvSpec, kernel: tuple,
          out: tuple) -> np.ndarray:
    """col2im, the adjoint of ``_columns``: add every column entry back at the input position
    it was read from. One vectorised add per kernel offset; the result may be a view."""
    n, c = x_shape[:2]
    inner = tuple(slice(lo, lo + m) for m, (lo, _) in zip(x_shape[2:], spec.padding))
    if _is_wide(spec):
        wide = _Wide.of(x_shape[2:], spec, kernel, out)
        cols = cols.reshape(n, c, len(wide.offsets), wide.length)
        flat = np.zeros((n, c, wide.flat_size), dtype=cols.dtype)
        for j, off in enumerate(wide.offsets):
            flat[:, :, off:off + wide.length] += cols[:, :, j]
        grid = flat[:, :, :math.prod(wide.padded)].reshape(n, c, *wide.padded)
        return grid[(..., *inner)]
    cols = cols.reshape(n, c, *kernel, *out)
    padded = tuple(m + lo + hi for m, (lo, hi) in zip(x_shape[2:], spec.padding))
    xp = np.zeros((n, c, *padded), dtype=cols.dtype)
    for k in np.ndindex(*kernel):
        window = tuple(slice(ki * d, ki * d + s * (o - 1) + 1, s)
                       for ki, d, s, o in zip(k, spec.dilation, spec.stride, out))
        xp[(slice(None), slice(None), *window)] += cols[(slice(None), slice(None), *k)]
    return xp[(..., *inner)]


def _weight_matrix(w: np.ndarray, groups: int) -> np.ndarray:
    return w.reshape(groups, w.shape[0] // groups, -1)


def _grad_rows(g: np.ndarray, spec: ConvSpec, x_spatial: tuple, kernel: tuple) -> np.ndarray:
    """The output gradient as ``(N, groups, C_out / groups, length)`` in the columns'
    layout."""
    n, o = g.shape[:2]
    if _is_wide(spec):
        g = _Wide.of(x_spatial, spec, kernel, g.shape[2:]).widen(g)
    return g.reshape(n, spec.groups, o // spec.groups, math.prod(g.shape[2:]))


# The columns of a whole batch can be many times the input (9x for a 3x3 kernel), so each
# function below unfolds, multiplies and folds a few samples at a time: the columns of one
# batch of samples stay in the CPU cache between the copy that makes them and the product
# that reads them, and are never all in memory at once.
BATCH_COLUMNS_BYTES = 1 << 20


def _batches(x_shape: tuple, spec: ConvSpec, kernel: tuple, out: tuple, itemsize: int):
    """Slices of the batch dim, each holding about BATCH_COLUMNS_BYTES of columns."""
    n, c = x_shape[:2]
    length = (_Wide.of(x_shape[2:], spec, kernel, out).length if _is_wide(spec)
              else math.prod(out))
    per_sample = max(1, c * math.prod(kernel) * length * itemsize)
    step = max(1, BATCH_COLUMNS_BYTES // per_sample)
    return [slice(i, i + step) for i in range(0, n, step)]


def conv_forward(x: np.ndarray, w: np.ndarray, spec: ConvSpec,
                 bias: np.ndarray | None = None) -> np.ndarray:
    """``conv(x, w)``, plus ``bias`` per output channel when given."""
    kernel = w.shape[2:]
    out = conv_output_size(spec, x.shape[2:], kernel)
    wm = _weight_matrix(w, spec.groups)
    y = np.empty((x.shape[0], w.shape[0], *out), dtype=np.result_type(x.dtype, w.dtype))
    wide = _Wide.of(x.shape[2:], spec, kernel, out) if _is_wide(spec) else None
    if bias is not None:
        bias = bias.reshape(-1, *[1] * len(kernel))
    for rows in _batches(x.shape, spec, kernel, out, x.itemsize):
        cols = _columns(x[rows], spec, kernel, out)
        part = np.matmul(wm, cols)  # (B, G, C_out / G, length)
        if wide is not None:  # drop the extra outputs at the end of each wide row
            part = part.reshape(cols.shape[0], w.shape[0], out[0], *wide.padded[1:])
            part = part[(..., *[slice(0, m) for m in out])]
        else:
            part = part.reshape(cols.shape[0], w.shape[0], *out)
        if bias is None:
            y[rows] = part
        else:
            np.add(part, bias, out=y[rows])
    return y


def conv_input_grad(g: np.ndarray, w: np.ndarray, spec: ConvSpec, x_shape: tuple) -> np.ndarray:
    kernel = w.shape[2:]
    out = g.shape[2:]
    wmt = _weight_matrix(w, spec.groups).transpose(0, 2, 1)
    dx = np.empty(x_shape, dtype=np.result_type(g.dtype, w.dtype))
    for rows in _batches(x_shape, spec, kernel, out, dx.itemsize):
        gm = _grad_rows(g[rows], spec, x_shape[2:], kernel)
        cols = np.matmul(wmt, gm)
        dx[rows] = _fold(cols, (cols.shape[0], *x_shape[1:]), spec, kernel, out)
    return dx


def conv_weight_grad(x: np.ndarray, g: np.ndarray, spec: ConvSpec,
                     w_shape: tuple) -> np.ndarray:
    kernel, out = tuple(w_shape[2:]), g.shape[2:]
    dw = np.zeros((spec.groups, w_shape[0] // spec.groups, math.prod(w_shape[1:])),
                  dtype=np.result_type(x.dtype, g.dtype))
    for rows in _batches(x.shape, spec, kernel, out, x.itemsize):
        cols = _columns(x[rows], spec, kernel, out)
        gm = _grad_rows(g[rows], spec, x.shape[2:], kernel)
        part = np.matmul(gm, cols.transpose(0, 1, 3, 2))  # (B, G, C_out / G, C_in / G * K)
        dw += part[0] if part.shape[0] == 1 else part.sum(axis=0)
    return dw.reshape(w_shape)


# ---- the ops ---------------------------------------------------------------------------------

class Convolution(Op):
    """``conv(x, w) + bias``. Like torch's node it always has three inputs; without a bias
    the third is an empty placeholder (``has_bias=False``) that takes no gradient."""

    node_name = "ConvolutionBackward0"

    @staticmethod
    def forward(ctx, x, w, bias, spec, has_bias=True):
        xd, wd = x._data, w._data
        need = ctx.needs_input_grad
        if need:
            ctx.save_for_backward(x if need[1] else None, w if need[0] else None)
            ctx.spec, ctx.x_shape, ctx.w_shape = spec, xd.shape, wd.shape
        return conv_forward(xd, wd, spec, bias._data if has_bias else None)

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        need = ctx.needs_input_grad
        gx = gw = gb = None
        if need[0]:
            gx = ConvInputGrad.apply(g, w, spec=ctx.spec, x_shape=ctx.x_shape)
        if need[1]:
            gw = ConvWeightGrad.apply(x, g, spec=ctx.spec, w_shape=ctx.w_shape)
        if need[2]:
            gb = g.sum(dim=(0, *range(2, g.ndim)))
        return gx, gw, gb


def absent(like) -> Tensor:
    """The placeholder Tensor for an operand that is not given (no bias, no weight)."""
    from disthook.tensor import Tensor

    return Tensor._make(np.empty(0, dtype=like._data.dtype), None, 0)


def convolve(x, w, bias, spec: ConvSpec):
    """``Convolution`` of Tensors, ``bias`` optional."""
    if bias is None:
        return Convolution.apply(x, w, absent(x), spec=spec, has_bias=False)
    return Convolution.apply(x, w, bias, spec=spec)


class ConvInputGrad(Op):
    """``dx = conv_input_grad(g, w)``: the transposed convolution, linear in each operand."""

    node_name = "ConvolutionBackwardBackward0"

    @staticmethod
    def forward(ctx, g, w, spec, x_shape):
        need = ctx.needs_input_grad
        if need:
            ctx.save_for_backward(g if need[1] else None, w if need[0] else None)
            ctx.spec, ctx.w_shape = spec, w._data.shape
        return conv_input_grad(g._data, w._data, spec, x_shape)

    @staticmethod
    def backward(ctx, h):
        g, w = ctx.saved_tensors
        need = ctx.needs_input_grad
        dg = convolve(h, w, None, ctx.spec) if need[0] else None
        dw = ConvWeightGrad.apply(h, g, spec=ctx.spec, w_shape=ctx.w_shape) if need[1] else None
        return dg, dw


class ConvWeightGrad(Op):
    """``dw = conv_weight_grad(x, g)``: correlates the input with the output gradient."""

    node_name = "ConvolutionBackwardBackward0"

    @staticmethod
    def forward(ctx, x, g, spec, w_shape):
        xd = x._data
        need = ctx.needs_input_grad
        if need:
            ctx.save_for_backward(x if need[1] else None, g if need[0] else None)
            ctx.spec, ctx.x_shape = spec, xd.shape
        return conv_weight_grad(xd, g._data, spec, w_shape)

    @staticmethod
    def backward(ctx, h):
        x, g = ctx.saved_tensors
        need = ctx.needs_input_grad
        dx = ConvInputGrad.apply(g, h, spec=ctx.spec, x_shape=ctx.x_shape) if need[0] else None
        dg = convolve(x, h, None, ctx.spec) if need[1] else None
        return dx, dg


class ConvTranspose(Op):
    """The transposed convolution ``conv_input_grad(x, w) + bias`` (what torch records as
    the same ConvolutionBackward0 node as a convolution): its input gradient is the
    convolution of the output gradient, its weight gradient the correlation of that with
    the input."""

    node_name = "ConvolutionBackward0"

    @staticmethod
    def forward(ctx, x, w, bias, spec, out_shape, has_bias=True):
        need = ctx.needs_input_grad
        if need:
            ctx.save_for_backward(x if need[1] else None, w if need[0] else None)
            ctx.spec, ctx.w_shape = spec, w._data.shape
        y = conv_input_grad(x._data, w._data, spec, out_shape)
        if has_bias:
            y += bias._data.reshape(-1, *[1] * (y.ndim - 2))
        return y

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        need = ctx.needs_input_grad
        gx = convolve(g, w, None, ctx.spec) if need[0] else None
        gw = ConvWeightGrad.apply(g, x, spec=ctx.spec, w_shape=ctx.w_shape) if need[1] else None
        gb = g.sum(dim=(0, *range(2, g.ndim))) if need[2] else None
        return gx, gw, gb


def conv_transpose(x, w, bias, spec: ConvSpec, out_shape: tuple):
    """``ConvTranspose`` of Tensors, ``bias`` optional."""
    if bias is None:
        return ConvTranspose.apply(x, w, absent(x), spec=spec, out_shape=out_shape,
                                   has_bias=False)
    return ConvTranspose.apply(x, w, bias, spec=spec, out_shape=out_shape)
