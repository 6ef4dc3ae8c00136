"""Pooling over the last ``len(kernel)`` dims of any-rank input: max, average, adaptive average.

Windows are strided slices of a padded copy, one per kernel offset, so the work is a short
Python loop over the kernel (4 offsets for 2x2) of whole-array numpy operations. Every
backward is an op whose own backward is the forward again (average pooling and its
gradient are adjoint linear maps; max pooling's gradient scatters to the argmax and its
adjoint gathers from there), so any order of derivative works.
"""
from __future__ import annotations

import math

import numpy as np

from disthook import _dtype
from disthook.ops.base import Op


def pool_output_size(n: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    """torch's pooling output length; with ``ceil_mode`` the last window must start inside
    the input or its left padding."""
    span = n + 2 * p - d * (k - 1) - 1
    out = (span + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= n + p:
        out -= 1
    return out


def _padded(x: np.ndarray, kernel, stride, padding, dilation, out, fill) -> np.ndarray:
    """``x`` padded by ``padding`` before each pooled dim and as far after as the last
    window reaches, with ``fill``."""
    nd = len(kernel)
    spatial = x.shape[-nd:]
    after = [max(0, (o - 1) * s + d * (k - 1) + 1 - n - p)
             for n, k, s, p, d, o in zip(spatial, kernel, stride, padding, dilation, out)]
    if not any(padding) and not any(after):
        return x
    shape = x.shape[:-nd] + tuple(n + p + a for n, p, a in zip(spatial, padding, after))
    xp = np.full(shape, fill, dtype=x.dtype)
    xp[(..., *[slice(p, p + n) for n, p in zip(spatial, padding)])] = x
    return xp


def _windows(kernel, stride, dilation, out):
    """For each kernel offset (row-major), the index of the elements it reads in every
    window: one strided slice per pooled dim."""
    for k in np.ndindex(*kernel):
        yield (..., *[slice(ki * d, ki * d + s * (o - 1) + 1, s)
                      for ki, d, s, o in zip(k, dilation, stride, out)])


# ---- max pooling ----------------------------------------------------------------------------

def _lowest(dtype):
    return -np.inf if _dtype.kind(dtype) == "f" else np.iinfo(dtype).min


def max_pool(x: np.ndarray, kernel, stride, padding, dilation, out) -> tuple:
    """(values, arg): each window's maximum and which kernel offset (row-major) holds it;
    ties go to the first, as in torch."""
    views = _max_views(x, kernel, stride, padding, dilation, out)
    best = window_max(views)
    return best, _first_argmax(views, best)


def window_max(views: list) -> np.ndarray:
    best = views[0].copy()
    for v in views[1:]:
        np.maximum(best, v, out=best)  # NaN wins, as in torch
    return best


def _max_views(x: np.ndarray, kernel, stride, padding, dilation, out) -> list:
    xp = _padded(x, kernel, stride, padding, dilation, out, _lowest(x.dtype))
    return [xp[index] for index in _windows(kernel, stride, dilation, out)]


def _first_argmax(views: list, best: np.ndarray) -> np.ndarray:
    arg = np.full(best.shape, len(views) - 1, dtype=np.int8 if len(views) < 128 else np.int32)
    hit = np.empty(best.shape, dtype=bool)
    for j in range(len(views) - 2, -1, -1):
        # arg = j where offset j also holds the maximum: arithmetic, since a masked write
        # branches on every element and is several times slower on random data
        np.equal(views[j], best, out=hit)
        arg -= hit * (arg - j)
    if _dtype.kind(best.dtype) == "f" and np.isnan(best).any():
        for j, v in enumerate(views):  # torch keeps the last NaN of a window
            np.putmask(arg, np.isnan(v), j)
    return arg


# ---- windows that tile the input ---------------------------------------------------------
#
# With stride == kernel, no padding and no dilation (MaxPool2d(2), the usual case), every
# input element lies in at most one window, in the input's own layout as dims (o1, k1, o2,
# k2, ...). The maxima are reduced one pooled dim at a time, the last first (its slices are
# long strided runs; each later pass reads a kernel's size less), each reduction noting
# which slice won (a later one only where greater: the first maximum, as torch's). From
# those the forward keeps a bool of the input's shape, True at each window's first maximum
# (where the kernel offsets' way makes several strided passes of short rows, which numpy
# runs several times slower). The gradient is each output's gradient spread over its
# window times that bool, on the bits (an integer product: inf and NaN are copied, never
# multiplied by 0). A window holding NaN takes the kernel offsets' way (torch keeps the
# last NaN).

def tiles(in_shape, kernel, stride, padding, dilation, out) -> bool:
    """Whether the windows tile the front of the pooled dims: stride == kernel, no padding,
    no dilation, no window past the end (ceil_mode's last one)."""
    spatial = in_shape[len(in_shape) - len(kernel):]
    return all(s == k and p == 0 and (d == 1 or k == 1) and o * k <= n
               for n, k, s, p, d, o in zip(spatial, kernel, stride, padding, dilation, out))


def _spread_last(a: np.ndarray, k: int, plus_zero: bool = False) -> np.ndarray:
    """``a`` with each element of its last dim repeated ``k`` times (contiguous): one
    strided copy per repeat, each a single long loop (np.repeat is 2x slower). With
    ``plus_zero``, ``a + 0`` is what is repeated (-0.0 becomes +0.0)."""
    if k == 1 and not plus_zero:
        return a
    spread = np.empty(a.shape + (k,), a.dtype)
    for j in range(k):
        if plus_zero:
            np.add(a, 0, out=spread[..., j])
        else:
            spread[..., j] = a
    return spread.reshape(a.shape[:-1] + (a.shape[-1] * k,))


def _tile_shapes(lead: tuple, kernel, out) -> tuple:
    """The input's covered part as (lead, o1, k1, ..., o_n * k_n), and the maxima spread
    along the last dim as (lead, o1, 1, ..., o_n * k_n), which broadcasts against it."""
    split, spread = list(lead), list(lead)
    for o, k in zip(out[:-1], kernel[:-1]):
        split += [o, k]
        spread += [o, 1]
    last = out[-1] * kernel[-1]
    return tuple(split + [last]), tuple(spread + [last])


def _covered(a: np.ndarray, kernel, out) -> np.ndarray:
    """The part of ``a`` that the windows cover, dims split as ``_tile_shapes``' first; a
    view (setting ``shape`` raises rather than copy)."""
    view = a[(..., *[slice(0, o * k) for o, k in zip(out, kernel)])]
    view.shape = _tile_shapes(a.shape[:a.ndim - len(kernel)], kernel, out)[0]
    return view


def tile_max(x: np.ndarray, kernel, out, first: bool = False):
    """Each window's maximum, one pooled dim at a time from the last: the slices of the
    last dim are long strided runs, and each later pass reads a kernel's size less. With
    ``first``, ``(maxima, hits)``: ``hits`` True at each window's first maximum (row-major,
    as torch's: a later element wins only where it is greater), shaped as ``_covered(x)``;
    None where a window holds NaN (torch keeps its last NaN: the kernel offsets' way)."""
    nd = len(kernel)
    best = x[(..., *[slice(0, o * k) for o, k in zip(out, kernel)])]
    chosen = []  # (dim, which slice of it won) for each pooled dim reduced
    for i in range(nd - 1, -1, -1):
        k = kernel[i]
        if k == 1:
            continue
        before = (slice(None),) * (best.ndim - nd + i)
        parts = [best[(*before, slice(j, None, k))] for j in range(k)]
        if first:
            which = np.greater(parts[1], parts[0])
            which = which.view(np.uint8) if k <= 255 else which.astype(np.int32)
        best = np.maximum(parts[0], parts[1])  # NaN wins, as in torch
        for j, part in enumerate(parts[2:], 2):
            if first:  # which = j where this slice is greater than all before it
                which += np.greater(part, best) * (j - which)
            np.maximum(best, part, out=best)
        if first:
            chosen.append((i, which))
    best = best if best.base is None else best.copy()
    if not first:
        return best
    if _dtype.kind(best.dtype) == "f" and np.isnan(best).any():
        return best, None
    return best, _first_hits(chosen, x.shape[:x.ndim - nd], kernel, out)


def _first_hits(chosen: list, lead: tuple, kernel, out) -> np.ndarray:
    """``tile_max``'s hits from the slice each reduction chose: True where, along every
    pooled dim, the position is the one its reduction chose."""
    nd = len(kernel)
    if not chosen:  # a window of one element
        return np.ones(_tile_shapes(lead, kernel, out)[0], dtype=bool)
    hits = None
    for i, which in chosen:
        # spread along the last dim, then shaped as the input's split dims: full size
        # (o, k) before dim i, (o, 1) from it on
        shape = list(lead)
        for d in range(nd - 1):
            shape += [out[d], kernel[d] if d < i else 1]
        which = _spread_last(which, kernel[-1]).reshape(shape + [out[-1] * kernel[-1]])
        if i == nd - 1:
            pattern = np.tile(np.arange(kernel[i], dtype=which.dtype), out[i])
        else:
            pattern = np.arange(kernel[i], dtype=which.dtype).reshape(
                (kernel[i],) + (1,) * (2 * (nd - 2 - i) + 1))
        if hits is None:
            hits = which == pattern
        else:
            hits &= which == pattern
    return hits


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.dtype(f"u{a.dtype.itemsize}"))


def tile_scatter(g: np.ndarray, hits: np.ndarray, in_shape, kernel, out) -> np.ndarray:
    """The gradient of tiling windows: each output's gradient at its window's maximum
    (``hits``), zeros elsewhere, bit for bit."""
    nd = len(kernel)
    whole = all(o * k == n for o, k, n in zip(out, kernel, in_shape[len(in_shape) - nd:]))
    dx = np.empty(in_shape, g.dtype) if whole else np.zeros(in_shape, g.dtype)
    # torch adds each gradient into zeros, so a gradient of -0.0 lands as +0.0
    spread = _spread_last(g, kernel[-1], plus_zero=True).reshape(
        _tile_shapes(g.shape[:g.ndim - nd], kernel, out)[1])
    np.multiply(_bits(spread), hits.view(np.uint8), out=_covered(_bits(dx), kernel, out))
    return dx


def tile_arg(hits: np.ndarray, kernel, out) -> np.ndarray:
    """Which kernel offset (row-major) holds each window's maximum, from ``tile_max``'s hits."""
    nd = len(kernel)
    lead = hits.ndim - 2 * nd + 1
    split = hits.reshape(hits.shape[:-1] + (out[-1], kernel[-1]))
    order = [*range(lead), *[lead + 2 * i for i in range(nd)],
             *[lead + 2 * i + 1 for i in range(nd)]]
    windows = split.transpose(order).reshape(split.shape[:lead] + tuple(out) + (-1,))
    size = windows.shape[-1]
    return np.argmax(windows, axis=-1).astype(np.int8 if size < 128 else np.int32)


def flat_indices(arg: np.ndarray, geometry) -> np.ndarray:
    """The position of each window's maximum as a flat index into the pooled dims of the
    (unpadded) input: what ``return_indices`` returns."""
    in_shape, kernel, stride, padding, dilation, out = geometry
    nd = len(kernel)
    offsets = np.array(list(np.ndindex(*kernel)), dtype=np.int64).reshape(-1, nd)
    flat = np.zeros(arg.shape, dtype=np.int64)
    for i in range(nd):
        start = np.arange(out[i]) * stride[i] - padding[i]
        coord = start.reshape((-1,) + (1,) * (nd - 1 - i)) + offsets[arg, i] * dilation[i]
        flat = flat * in_shape[len(in_shape) - nd + i] + coord
    return flat


def _windows_disjoint(kernel, stride, dilation) -> bool:
    return all(s >= d * (k - 1) + 1 for k, s, d in zip(kernel, stride, dilation))


def max_pool_scatter(g: np.ndarray, arg: np.ndarray, geometry) -> np.ndarray:
    """Zeros of the input's shape with each window's gradient at its maximum (windows that
    overlap may add to one position). Disjoint windows: one indexed write of every window's
    gradient at its maximum's flat position; overlapping ones: a masked add per kernel
    offset."""
    in_shape, kernel, stride, padding, dilation, out = geometry
    nd = len(kernel)
    spatial = in_shape[-nd:]
    after = [max(0, (o - 1) * s + d * (k - 1) + 1 - n - p)
             for n, k, s, p, d, o in zip(spatial, kernel, stride, padding, dilation, out)]
    padded = tuple(in_shape[:-nd]) + tuple(n + p + a for n, p, a in zip(spatial, padding, after))
    xp = np.zeros(padded, dtype=g.dtype)
    disjoint = _windows_disjoint(kernel, stride, dilation)
    if disjoint and g.size:
        # no two windows share a position, so each gradient is written, not added: inf and
        # NaN land where torch puts them, and a masked write per offset (strided, 2-4x the
        # time) is not needed
        positions = _maximum_positions(arg, padded, kernel, stride, dilation)
        # (+ 0: torch adds each gradient into zeros, so -0.0 lands as +0.0)
        xp.reshape(-1)[positions.reshape(-1)] = g.reshape(-1) + 0
        if padded == tuple(in_shape):
            return xp
        return np.ascontiguousarray(
            xp[(..., *[slice(p, p + n) for n, p in zip(spatial, padding)])])
    mask = np.empty(arg.shape, dtype=bool)
    # multiplying by the mask is branch-free (a masked write is several times slower on a
    # random mask), but inf or NaN times 0 is NaN: with such gradients, the masked write
    finite = g.size == 0 or bool(np.isfinite(g.max()) and np.isfinite(g.min()))
    # the last kernel offset first: a position that several windows' maxima share then
    # takes their gradients in the windows' order, as torch adds them (the same rounding)
    for j, index in reversed(list(enumerate(_windows(kernel, stride, dilation, out)))):
        np.equal(arg, j, out=mask)
        if not finite:
            if disjoint:
                np.copyto(xp[index], g, where=mask)
            else:
                xp[index] += np.where(mask, g, np.zeros((), g.dtype))
        elif disjoint:
            np.multiply(g, mask, out=xp[index])
        else:
            xp[index] += g * mask
    if padded == tuple(in_shape):
        return xp
    return np.ascontiguousarray(xp[(..., *[slice(p, p + n) for n, p in zip(spatial, padding)])])


def _maximum_positions(arg: np.ndarray, padded: tuple, kernel, stride, dilation) -> np.ndarray:
    """The flat index into an array of shape ``padded`` of each window's maximum (``arg``:
    which kernel offset, row-major, holds it): the window's first element plus the offset."""
    nd = len(kernel)
    steps = np.cumprod((1,) + tuple(padded[:0:-1]))[::-1]  # elements per step of each dim
    offsets = np.zeros(1, dtype=np.intp)  # of each kernel offset, in arg's row-major order
    origins = (np.arange(math.prod(arg.shape[:-nd]), dtype=np.intp)
               * steps[len(padded) - nd - 1]).reshape((-1,) + (1,) * nd)
    for i in range(nd):
        step = int(steps[len(padded) - nd + i])
        offsets = (offsets[:, None] + np.arange(kernel[i], dtype=np.intp) * dilation[i] * step
                   ).reshape(-1)
        along = np.arange(arg.shape[len(arg.shape) - nd + i], dtype=np.intp) * stride[i] * step
        origins = origins + along.reshape((-1,) + (1,) * (nd - 1 - i))
    positions = np.take(offsets, arg)
    positions += origins.reshape(arg.shape)
    return positions


class MaxPool2d(Op):
    """Max pooling over the last two dims; with ``return_indices`` a second output holds the
    flat index (into H*W) of each maximum."""

    node_name = "MaxPool2DWithIndicesBackward0"

    @staticmethod
    def forward(ctx, x, kernel, stride, padding, dilation, out, return_indices=False):
        xd = x._data
        geometry = (xd.shape, kernel, stride, padding, dilation, out)
        need = bool(ctx.needs_input_grad)  # no graph: the maxima alone
        tiled = not return_indices and tiles(*geometry)
        views = None if tiled else _max_views(xd, kernel, stride, padding, dilation, out)
        hits = arg = None
        if tiled and need:
            values, hits = tile_max(xd, kernel, out, first=True)
        else:
            values = tile_max(xd, kernel, out) if tiled else window_max(views)
        if (need or return_indices) and hits is None:
            if views is None:
                views = _max_views(xd, kernel, stride, padding, dilation, out)
            arg = _first_argmax(views, values)
        ctx.arg, ctx.hits, ctx.geometry = arg, hits, geometry
        return (values, flat_indices(arg, geometry)) if return_indices else values

    @staticmethod
    def backward(ctx, g, g_indices=None):
        return MaxPoolScatter.apply(g, arg=ctx.arg, hits=ctx.hits, geometry=ctx.geometry)


class MaxPoolScatter(Op):
    """The gradient of max pooling; its adjoint gathers from each window's maximum. Each
    window's maximum is given as ``arg`` (its kernel offset) or, for tiling windows, as
    ``hits`` (``tile_max``)."""

    node_name = "MaxPool2DWithIndicesBackwardBackward0"

    @staticmethod
    def forward(ctx, g, arg, hits, geometry):
        ctx.arg, ctx.hits, ctx.geometry = arg, hits, geometry
        if hits is not None:
            in_shape, kernel, _, _, _, out = geometry
            return tile_scatter(g._data, hits, in_shape, kernel, out)
        return max_pool_scatter(g._data, arg, geometry)

    @staticmethod
    def backward(ctx, h):
        from disthook.ops.shape import GatherAlong

        arg = ctx.arg
        if arg is None:
            arg = tile_arg(ctx.hits, ctx.geometry[1], ctx.geometry[5])
        idx = flat_indices(arg, ctx.geometry)
        nd = len(ctx.geometry[1])  # the pooled dims, whose flat index idx holds
        lead = math.prod(idx.shape[:-nd])
        rows = h.reshape(lead, math.prod(h.shape[-nd:]))
        taken = GatherAlong.apply(rows, index=idx.reshape(lead, -1), dim=1)
        return taken.reshape(idx.shape)


class MaxPool3d(MaxPool2d):
    """Max pooling over the last three dims (the same windows, torch's 3-d node)."""

    node_name = "MaxPool3DWithIndicesBackward0"


# ---- average pooling ------------------------------------------------------------------------

def avg_divisor(spatial, kernel, stride, padding, out, count_include_pad: bool,
                divisor_override) -> np.ndarray | int:
    """What each window's sum is divided by, shaped to broadcast against the output: the
    window's size clipped to the padded input, or (``count_include_pad=False``) the number
    of input elements in it."""
    if divisor_override:
        return divisor_override
    total = None
    for i, (n, k, s, p, o) in enumerate(zip(spatial, kernel, stride, padding, out)):
        start = np.arange(o) * s - p
        end = np.minimum(start + k, n + p)
        size = end - start
        if not count_include_pad:
            size = np.minimum(end, n) - np.maximum(start, 0)
        size = size.reshape((-1,) + (1,) * (len(kernel) - 1 - i))
        total = size if total is None else total * size
    return total


def avg_pool(x: np.ndarray, kernel, stride, padding, out, divisor) -> np.ndarray:
    ones = (1,) * len(kernel)
    xp = _padded(x, kernel, stride, padding, ones, out, 0)
    acc = None
    for index in _windows(kernel, stride, ones, out):
        acc = xp[index].copy() if acc is None else np.add(acc, xp[index], out=acc)
    if _dtype.kind(x.dtype) == "f":
        return (acc / divisor).astype(x.dtype, copy=False)
    return (acc // divisor).astype(x.dtype, copy=False)


def avg_pool_grad(g: np.ndarray, in_shape, kernel, stride, padding, out,
                  divisor) -> np.ndarray:
    """The adjoint of ``avg_pool``: each output's gradient, divided by its window's
    divisor, added to every element of its window."""
    nd = len(kernel)
    ones = (1,) * nd
    spatial = in_shape[-nd:]
    after = [max(0, (o - 1) * s + k - n - p)
             for n, k, s, p, o in zip(spatial, kernel, stride, padding, out)]
    padded = tuple(in_shape[:-nd]) + tuple(n + p + a for n, p, a in zip(spatial, padding, after))
    xp = np.zeros(padded, dtype=g.dtype)
    share = (g / divisor).astype(g.dtype, copy=False)
    for index in _windows(kernel, stride, ones, out):
        xp[index] += share
    return xp[(..., *[slice(p, p + n) for n, p in zip(spatial, padding)])]


class AvgPool2d(Op):
    node_name = "AvgPool2DBackward0"

    @staticmethod
    def forward(ctx, x, kernel, stride, padding, out, divisor):
        ctx.params = (x._data.shape, kernel, stride, padding, out, divisor)
        return avg_pool(x._data, kernel, stride, padding, out, divisor)

    @staticmethod
    def backward(ctx, g):
        in_shape, *rest = ctx.params
        return AvgPoolGrad.apply(g, in_shape=in_shape, params=tuple(rest))


class AvgPoolGrad(Op):
    node_name = "AvgPool2DBackwardBackward0"

    @staticmethod
    def forward(ctx, g, in_shape, params):
        ctx.params = params
        return avg_pool_grad(g._data, in_shape, *params)

    @staticmethod
    def backward(ctx, h):
        kernel, stride, padding, out, divisor = ctx.params
        return AvgPool2d.apply(h, kernel=kernel, stride=stride, padding=padding, out=out,
                               divisor=divisor)


class AvgPool3d(AvgPool2d):
    node_name = "AvgPool3DBackward0"


# ---- adaptive average pooling ---------------------------------------------------------------

def adaptive_matrix(n: int, o: int, dtype) -> np.ndarray:
    """``(o, n)``: row i averages input positions floor(i*n/o) .. ceil((i+1)*n/o) - 1."""
    i = np.arange(o)
    start = (i * n) // o
    end = -((-(i + 1) * n) // o)
    pos = np.arange(n)
    inside = (pos >= start[:, None]) & (pos < end[:, None])
    return (inside / (end - start)[:, None]).astype(dtype)


class AdaptiveAvgPool2d(Op):
    """Adaptive average pooling of the last two dims: ``A_h @ x @ A_w.T`` with averaging
    matrices, since the average over a rectangle is separable."""

    node_name = "AdaptiveAvgPool2DBackward0"

    @staticmethod
    def forward(ctx, x, out):
        xd = x._data
        a_h = adaptive_matrix(xd.shape[-2], out[0], xd.dtype)
        a_w = adaptive_matrix(xd.shape[-1], out[1], xd.dtype)
        ctx.mats = (a_h, a_w)
        return np.matmul(a_h, np.matmul(xd, a_w.T))

    @staticmethod
    def backward(ctx, g):
        from disthook.tensor import Tensor

        a_h, a_w = ctx.mats
        return Tensor._make(a_h.T, None, 0) @ (g @ Tensor._make(a_w, None, 0))
