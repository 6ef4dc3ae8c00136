"""Convolution, with its two gradients as ops of their own.

Layout as torch: input ``(N, C_in, *spatial)``, weight ``(C_out, C_in / groups, *kernel)``.
The forward pads the input, unfolds it into columns (im2col: one strided view, copied a few
samples at a time) and multiplies each group's weight matrix with them (a bias rides in the
product as one more column of the weight matrix, against a row of ones); the weight gradient
multiplies the output gradient with the same columns (when no graph of the gradients is
recorded, the bias gradient rides in that product the same way), the input gradient
multiplies the weight with the output gradient and folds the product back onto the input
(col2im). Each gradient is again a linear map of one of the other operands, and the three
ops are each other's adjoints:

    y  = conv(x, w)             dx = conv_input_grad(g, w)     dw = conv_weight_grad(x, g)

so the backward of every one of them is written with the other two, and derivatives of
any order work (``create_graph=True``).
"""
from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
from numpy.lib.stride_tricks import as_strided

from disthook import _blas
from disthook.ops.base import Op, plain_float, plain_tensor

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
# The forward and the weight gradient copy each sample's windows (im2col) into one buffer
# reused for every batch of samples, and the forward's product writes straight into the
# output. The input gradient of a stride-1 convolution works in the "wide" layout: the padded
# input is flattened per channel, and the output gradient is laid out as if each output row
# were as long as a padded input row (the extra outputs at the end of each row hold zeros).
# Along the last kernel dim it is a correlation: for each offset of the other kernel dims a
# product gives a contiguous run of the input gradient, and those runs are added into place
# (3 adds for a 3x3 kernel rather than 9). On MKL the product is one per last kernel offset,
# each reading the wide output gradient where it lies, shifted by the offset, and adding
# into one result; on numpy the shifted blocks are copied (contiguous copies) and one
# product, 3x deeper, takes them. Strided convolutions fold every kernel offset through
# strided views.

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
    """Geometry of the wide layout: padded spatial shape, the length of a wide output block
    (``out[0]`` rows of a padded row's length), the flat offset of each kernel offset of all
    dims but the last, the last dim's kernel size and dilation, and the flat size per
    channel that the input gradient's runs reach."""

    padded: tuple
    length: int
    outer_offsets: tuple
    last_kernel: int
    last_dilation: int
    flat_size: int

    @classmethod
    @functools.lru_cache(maxsize=256)
    def of(cls, spatial: tuple, spec: ConvSpec, kernel: tuple, out: tuple) -> _Wide:
        """The geometry of one convolution's shapes; cached, since working it out costs tens
        of microseconds of Python and a training loop asks for the same shapes every step."""
        padded = tuple(n + lo + hi for n, (lo, hi) in zip(spatial, spec.padding))
        strides = tuple(math.prod(padded[i + 1:]) for i in range(len(padded)))
        length = out[0] * strides[0]
        outer = tuple(sum(k * d * st for k, d, st in zip(ks, spec.dilation, strides))
                      for ks in np.ndindex(*kernel[:-1]))
        edge = spec.dilation[-1] * (kernel[-1] - 1)
        flat_size = max(math.prod(padded), outer[-1] + length + edge)
        return cls(padded, length, outer, kernel[-1], spec.dilation[-1], flat_size)

    @property
    def edge(self) -> int:
        """How far the last kernel dim reaches: its dilated size less one."""
        return self.last_dilation * (self.last_kernel - 1)

    def block(self, row: np.ndarray, out: tuple) -> np.ndarray:
        """The view ``(N, C, *out)`` of ``row`` (``(N, C, >= length)``, contiguous last dim)
        where a wide block keeps the outputs: ``out[0]`` rows of a padded row's length, each
        holding the outputs at its start."""
        strides = tuple(math.prod(self.padded[i + 1:]) * row.itemsize
                        for i in range(len(self.padded)))
        view = as_strided(row, shape=(*row.shape[:2], out[0], *self.padded[1:]),
                          strides=(*row.strides[:2], *strides))
        return view[(..., *[slice(0, m) for m in out[1:]])]


def _windows(x: np.ndarray, spec: ConvSpec, kernel: tuple, out: tuple) -> np.ndarray:
    """A read-only strided view ``(N, C, *kernel, *out)`` of the padded input: entry
    ``[n, c, k, o]`` is the element that kernel offset ``k`` reads for output ``o``."""
    xp = _pad(x, spec.padding)
    st, dims = xp.strides, range(len(kernel))
    return as_strided(
        xp, shape=(*xp.shape[:2], *kernel, *out),
        strides=(st[0], st[1], *[st[2 + i] * spec.dilation[i] for i in dims],
                 *[st[2 + i] * spec.stride[i] for i in dims]),
        writeable=False)


def _fold_strided(cols: np.ndarray, x_shape: tuple, spec: ConvSpec, kernel: tuple,
                  out: tuple) -> np.ndarray:
    """col2im, the adjoint of ``_windows``: add every column entry back at the input position
    it was read from, one strided add per kernel offset; the result may be a view."""
    n, c = x_shape[:2]
    inner = tuple(slice(lo, lo + m) for m, (lo, _) in zip(x_shape[2:], spec.padding))
    cols = cols.reshape(n, c, *kernel, *out)
    padded = tuple(m + lo + hi for m, (lo, hi) in zip(x_shape[2:], spec.padding))
    xp = np.zeros((n, c, *padded), dtype=cols.dtype)
    for k in np.ndindex(*kernel):
        window = tuple(slice(ki * d, ki * d + s * (o - 1) + 1, s)
                       for ki, d, s, o in zip(k, spec.dilation, spec.stride, out))
        xp[(slice(None), slice(None), *window)] += cols[(slice(None), slice(None), *k)]
    return xp[(..., *inner)]


def _last_dim_weights(w: np.ndarray, groups: int) -> np.ndarray:
    """The weight as ``(G, outer kernel offsets * C_in / G, C_out / G * last kernel)``, the
    last kernel dim reversed: the matrix that takes the output gradient unfolded along the last
    kernel dim to one run of the input gradient per outer kernel offset."""
    o, cg, *kernel = w.shape
    w = w.reshape(groups, o // groups, cg, -1, kernel[-1])[..., ::-1]
    return w.transpose(0, 3, 2, 1, 4).reshape(groups, -1, o // groups * kernel[-1])


def _input_grad_wide(g: np.ndarray, w: np.ndarray, spec: ConvSpec, x_shape: tuple,
                     dx: np.ndarray) -> None:
    """The input gradient of a stride-1 convolution into ``dx`` (see the layouts above)."""
    n, c, groups, o = x_shape[0], x_shape[1], spec.groups, g.shape[1]
    wide = _Wide.of(tuple(x_shape[2:]), spec, tuple(w.shape[2:]), tuple(g.shape[2:]))
    wm = _last_dim_weights(w, groups)
    runs = wide.length + wide.edge  # the run each outer kernel offset adds
    outer = len(wide.outer_offsets)
    last, d = wide.last_kernel, wide.last_dilation
    step, batches = _batches(n, (o * last + c * outer) * runs * dx.itemsize)
    # held[:, i] is output channel i's wide gradient with `edge` zeros before it and its rows'
    # zeros between them: last kernel offset k reads its `runs` from k * dilation on. The
    # zeros are the same for every batch, so they are written once; each batch copies the
    # output gradient's rows into the block (one strided copy)
    held = np.zeros((min(step, n), o, runs + wide.edge), dtype=g.dtype)
    block = wide.block(held[:, :, wide.edge:], g.shape[2:])
    by_group = held.reshape(held.shape[0], groups, o // groups, runs + wide.edge)
    # (G, outer * C / G, C_out / G): the weights each last kernel offset's product takes
    per_offset = [np.ascontiguousarray(wm[..., k::last]) for k in range(last)]
    part = np.empty((min(step, n), groups, outer * (c // groups), runs), dtype=dx.dtype)
    unpadded = not any(lo or hi for lo, hi in spec.padding)
    if not unpadded:
        flat = np.empty((min(step, n), c, wide.flat_size), dtype=dx.dtype)
        inner = (..., *[slice(lo, lo + m) for m, (lo, _) in zip(x_shape[2:], spec.padding)])
    size = wide.flat_size if not unpadded else math.prod(x_shape[2:])

    @functools.cache
    def views(b: int) -> tuple:
        """The buffers' views for a batch of ``b`` samples (two sizes at most a call), and
        its products: made once, not per sample (each costs a microsecond or two of Python)."""
        reads = [by_group[:b, ..., k * d:k * d + runs] for k in range(last)]
        plans = [_blas.matmul_plan(per_offset[k], reads[k], part[:b], accumulate=k > 0)
                 for k in range(min(last, 2))]
        if None in plans:  # numpy's: one product of the shifted copies (a 3x deeper one)
            cols = np.empty((b, groups, o // groups, last, runs), dtype=g.dtype)
            products = [(cols[:, :, :, k], reads[k]) for k in range(last)], cols.reshape(
                b, groups, -1, runs)
        else:  # on MKL each offset's product reads the block where it lies, into part
            products = [(plans[min(k, 1)], per_offset[k], reads[k]) for k in range(last)]
        # (B, G, outer, C / G, runs) -> one (B, C, runs) run per outer kernel offset
        by_offset = part[:b].reshape(b, groups, outer, c // groups, runs).transpose(2, 0, 1, 3, 4)
        return block[:b], products, part[:b], _runs(by_offset, wide, runs, size)

    for rows in batches:
        b = rows.stop - rows.start
        into, products, product, pieces = views(b)
        into[...] = g[rows]
        if isinstance(products, tuple):
            copies, cols = products
            for dst, src in copies:
                dst[...] = src
            np.matmul(wm, cols, out=product)
        else:
            for run, weights, read in products:
                run(weights, read, product)
        if unpadded:  # the padded input is the input: the runs are added into dx itself
            _add_runs(dx[rows].reshape(b, groups, c // groups, size), pieces)
        else:
            _add_runs(flat[:b].reshape(b, groups, c // groups, size), pieces)
            dx[rows] = flat[:b, :, :math.prod(wide.padded)].reshape(b, c, *wide.padded)[inner]


def _runs(by_offset: np.ndarray, wide: _Wide, runs: int, size: int) -> list:
    """``(start, end, run)`` for each outer kernel offset: ``by_offset``'s run for it, cut
    where it would reach past ``size`` (past the last input)."""
    pieces = []
    for j, off in enumerate(wide.outer_offsets):
        end = min(off + runs, size)
        pieces.append((off, end, by_offset[j][..., :end - off]))
    return pieces


def _add_runs(into: np.ndarray, pieces: list) -> None:
    """``into[..., start:end] += run`` for each of ``_runs``' pieces, from zeros (the first
    offset is 0). Where the second run starts inside the first and reaches past it (a
    stride-1 kernel's rows), their overlap is written as one sum and the parts either side
    copied, so the first run is not copied in and read again."""
    (_, first, run), *rest = pieces
    if rest and rest[0][0] <= first <= rest[0][1]:
        (start, end, second), *rest = rest
        into[..., :start] = run[..., :start]
        np.add(run[..., start:], second[..., :first - start], out=into[..., start:first])
        # (+ 0: added into zeros as before, a -0.0 of the run arrives as +0.0)
        np.add(second[..., first - start:], 0, out=into[..., first:end])
        into[..., end:] = 0
    else:
        into[..., :first] = run
        into[..., first:] = 0
    for start, end, run in rest:
        into[..., start:end] += run


def _matmul(x: np.ndarray, y: np.ndarray, out: np.ndarray) -> None:
    """``np.matmul(x, y, out=out)``, on MKL where it takes the stack (``_blas.matmul_into``)."""
    if not _blas.matmul_into(x, y, out):
        np.matmul(x, y, out=out)


def _weight_matrix(w: np.ndarray, groups: int) -> np.ndarray:
    return w.reshape(groups, w.shape[0] // groups, -1)


# The columns of a whole batch can be many times the input (9x for a 3x3 kernel), so each
# function below unfolds, multiplies and folds a few samples at a time: the columns of one
# batch of samples stay in the CPU cache between the copy that makes them and the product
# that reads them, and are never all in memory at once.
BATCH_COLUMNS_BYTES = 1 << 20


def _batches(n: int, sample_bytes: int) -> tuple[int, list]:
    """The samples per batch (about BATCH_COLUMNS_BYTES of columns, at least one) and the
    slices of the batch dim."""
    step = max(1, BATCH_COLUMNS_BYTES // max(1, sample_bytes))
    return step, [slice(i, min(n, i + step)) for i in range(0, n, step)]


def conv_forward(x: np.ndarray, w: np.ndarray, spec: ConvSpec,
                 bias: np.ndarray | None = None) -> np.ndarray:
    """``conv(x, w)``, plus ``bias`` per output channel when given."""
    kernel = w.shape[2:]
    out = conv_output_size(spec, x.shape[2:], kernel)
    n, c, o, g = x.shape[0], x.shape[1], w.shape[0], spec.groups
    depth, length = c // g * math.prod(kernel), math.prod(out)
    wm = _weight_matrix(w, g)
    y = np.empty((n, o, *out), dtype=np.result_type(x.dtype, w.dtype))
    ym = y.reshape(n, g, o // g, length)
    windows = _windows(x, spec, kernel, out).reshape(n, g, c // g, *kernel, *out)
    step, batches = _batches(n, c * math.prod(kernel) * length * x.itemsize)
    # with a bias, each group's columns end in a row of ones and its weight matrix in the
    # bias: the product adds the bias (written once per call, not a pass over the output
    # per batch)
    cols = _blas.empty((min(step, n), g, depth + (bias is not None), length), x.dtype)
    if bias is not None:
        cols[:, :, depth] = 1
        wm = np.concatenate([wm, bias.reshape(g, o // g, 1).astype(wm.dtype, copy=False)],
                            axis=2)
    unfolded = cols[:, :, :depth].reshape(cols.shape[0], g, c // g, *kernel, *out)  # a view
    full = cols.shape[0]
    run = _blas.matmul_plan(wm, cols, ym[:full])  # a whole batch's products, checked once
    for rows in batches:
        b = rows.stop - rows.start
        if b == full:
            np.copyto(unfolded, windows[rows])
            if run is not None:
                run(wm, cols, ym[rows])
                continue
        else:
            np.copyto(unfolded[:b], windows[rows])
        _matmul(wm, cols[:b], ym[rows])
    return y


def conv_input_grad(g: np.ndarray, w: np.ndarray, spec: ConvSpec, x_shape: tuple) -> np.ndarray:
    dx = np.empty(x_shape, dtype=np.result_type(g.dtype, w.dtype))
    if _is_wide(spec):
        _input_grad_wide(g, w, spec, x_shape, dx)
        return dx
    kernel, out = w.shape[2:], g.shape[2:]
    n, c, groups, length = x_shape[0], x_shape[1], spec.groups, math.prod(out)
    wmt = _weight_matrix(w, groups).transpose(0, 2, 1)
    gm = g.reshape(g.shape[0], groups, g.shape[1] // groups, length)
    for rows in _batches(n, c * math.prod(kernel) * length * dx.itemsize)[1]:
        cols = np.matmul(wmt, gm[rows])
        dx[rows] = _fold_strided(cols, (cols.shape[0], *x_shape[1:]), spec, kernel, out)
    return dx


def conv_weight_grad(x: np.ndarray, g: np.ndarray, spec: ConvSpec, w_shape: tuple,
                     bias: bool = False):
    """``dw``, or with ``bias`` the pair ``(dw, db)``: the bias gradient (``g`` summed over all
    but its channel dim) rides in the same products, each group's columns ending in a row of
    ones, where a pass of its own would read all of ``g`` again."""
    kernel, out = tuple(w_shape[2:]), g.shape[2:]
    n, c, groups = x.shape[0], x.shape[1], spec.groups
    depth, length = c // groups * math.prod(kernel), math.prod(out)
    dw = np.zeros((groups, w_shape[0] // groups, depth + bias),
                  dtype=np.result_type(x.dtype, g.dtype))
    gm = g.reshape(g.shape[0], groups, g.shape[1] // groups, length)
    windows = _windows(x, spec, kernel, out).reshape(n, groups, c // groups, *kernel, *out)
    step, batches = _batches(n, c * math.prod(kernel) * length * x.itemsize)
    cols = _blas.empty((min(step, n), groups, depth + bias, length), x.dtype)
    if bias:
        cols[:, :, depth] = 1  # written once: the window copies never touch it
    unfolded = cols[:, :, :depth].reshape(cols.shape[0], groups, c // groups, *kernel, *out)
    # (B, G, L, C_in / G * K (+ 1)): each sample's columns as the product's right operand
    all_t = cols.transpose(0, 1, 3, 2)
    # each sample's product added into dw on MKL, its checks made once (they cost more
    # than the call): every sample's operands lie as the first one's
    run = _blas.matmul_plan(gm[0], all_t[0], dw, accumulate=True) if n else None
    for rows in batches:
        b = rows.stop - rows.start
        np.copyto(unfolded[:b], windows[rows])
        cols_t, grads = all_t[:b], gm[rows]
        if run is not None:
            for i in range(b):
                run(grads[i], cols_t[i], dw)
            continue
        prod = np.matmul(grads, cols_t)  # (B, G, C_out / G, C_in / G * K (+ 1))
        dw += prod[0] if prod.shape[0] == 1 else prod.sum(axis=0)
    if not bias:
        return dw.reshape(w_shape)
    return np.ascontiguousarray(dw[..., :depth]).reshape(w_shape), dw[..., depth].reshape(-1)


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
        if need[1] and need[2] and plain_float(x, g) and x._data.dtype == g._data.dtype:
            # no graph of them: both from the same products (one pass over g less)
            dw, db = conv_weight_grad(x._data, g._data, ctx.spec, ctx.w_shape, bias=True)
            return gx, plain_tensor(dw), plain_tensor(db)
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
