"""Scans and order statistics: cumprod, cummax/cummin, logcumsumexp, nansum, and the ops that
pick one element per slice (median, nanmedian, kthvalue, mode), whose gradient goes back to
the picked position.
"""
from __future__ import annotations

import numpy as np

from disthook.ops.base import OUTPUT, Op
from disthook.ops.reduce import expand_back, flip_cumsum


def _tensor(array):
    from disthook.tensor import Tensor

    return Tensor._make(array, None, 0)


def no_second_order(g, what: str, depends_on_inputs: bool = True) -> None:
    """Refuse to record a backward computed here in numpy (create_graph=True, which runs
    backward with grad mode on) when the gradient it returns depends on something that
    requires grad, rather than give second derivatives that are silently zero."""
    from disthook.autograd import grad_mode

    if grad_mode._state.enabled and (g.requires_grad or depends_on_inputs):
        raise NotImplementedError(f"the second derivative of {what} is not implemented in "
                                  "disthook (its first derivative is computed in numpy)")


class Cumprod(Op):
    saved_names = ("self", "result")
    complex_ok = True  # the gradient is conjugated, as torch's (the conjugates' formula)

    @staticmethod
    def forward(ctx, a, dim):
        ctx.save_for_backward(a, OUTPUT)
        ctx.dim = dim
        x = a._data
        dtype = np.int64 if x.dtype.kind in "biu" else x.dtype
        flat = x.reshape(-1) if x.ndim == 0 else x
        # (the ufunc's own accumulate, as Cumsum: no warning from numpy's wrapper module)
        return np.multiply.accumulate(flat, axis=dim, dtype=dtype).reshape(x.shape)

    @staticmethod
    def backward(ctx, g):
        a, out = ctx.saved_tensors
        dim = ctx.dim if a.ndim else 0
        if a.ndim == 0:
            return g
        if a._data.dtype.kind == "c":
            a, out = a.conj(), out.conj()
        if not bool((a._data == 0).any()):
            return flip_cumsum(g * out, dim) / a
        no_second_order(g, "cumprod of an input with zeros", a.requires_grad)
        x, w = np.moveaxis(a._data, dim, -1), np.moveaxis(g._data, dim, -1)
        y = np.moveaxis(out._data, dim, -1)
        with np.errstate(invalid="ignore", divide="ignore"):
            return _tensor(np.moveaxis(_cumprod_grad_with_zeros(x, w, y), -1, dim))


def _cumprod_grad_with_zeros(x, w, y):
    """cumprod's gradient along the last axis of ``x`` (with zeros; ``w`` the incoming
    gradient, ``y`` the output) in torch's three parts, so that an inf or nan beside a zero
    gives what torch's does: before a slice's first zero, the suffix sums of w * y over x;
    at it, the output just before it times the sum over the outputs up to the second zero
    of w times the product of the elements after the first zero; after it, 0."""
    zeros_so_far = np.cumsum(x == 0, axis=-1)
    before = zeros_so_far == 0
    suffix = np.flip(np.cumsum(np.flip(np.where(before, w * y, 0), -1), axis=-1), -1)
    grad = np.where(before, suffix / np.where(before, x, 1), 0).astype(x.dtype)
    first_run = zeros_so_far == 1
    z1 = np.argmax(first_run, axis=-1)[..., None]
    first = np.zeros_like(first_run)
    np.put_along_axis(first, z1, True, axis=-1)
    first &= first_run
    between = first_run & ~first
    inner = (np.cumprod(np.where(between, x, 1), axis=-1) * np.where(first_run, w, 0)).sum(-1)
    lead = np.where(z1 == 0, 1, np.take_along_axis(y, np.maximum(z1 - 1, 0), axis=-1))
    return np.where(first, (inner[..., None] * lead).astype(x.dtype), grad)


class Logcumsumexp(Op):
    saved_names = ("self", "result")

    @staticmethod
    def forward(ctx, a, dim):
        ctx.save_for_backward(a, OUTPUT)
        ctx.dim = dim
        x = a._data.reshape(-1) if a._data.ndim == 0 else a._data
        return np.logaddexp.accumulate(x, axis=dim).reshape(a._data.shape)

    @staticmethod
    def backward(ctx, g):
        a, out = ctx.saved_tensors
        if a.ndim == 0:
            return g
        # d out[j] / d a[k] = exp(a[k] - out[j]) for j >= k; shift by the max to stay finite
        top = a.detach().amax(ctx.dim, keepdim=True)
        return (a - top).exp() * flip_cumsum(g * (top - out).exp(), ctx.dim)


class Nansum(Op):
    saved_names = ("self",)

    @staticmethod
    def forward(ctx, a, dim=None, keepdim=False):
        ctx.save_for_backward(a)
        ctx.dims, ctx.keepdim = dim, keepdim
        x = a._data
        dtype = np.int64 if x.dtype.kind in "biu" else x.dtype
        with np.errstate(invalid="ignore", over="ignore"):  # inf - inf: nan, as torch's, silent
            return np.asarray(np.nansum(x, axis=dim, keepdims=keepdim, dtype=dtype))

    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved_tensors
        return expand_back(g, a.shape, ctx.dims, ctx.keepdim) * a.isnan().logical_not()


class _Pick(Op):
    """(values, indices) of one element picked per slice along ``dim``; the gradient goes to
    the picked element. ``pick(x, dim)`` returns the indices along the last axis of x moved."""

    @classmethod
    def forward(cls, ctx, a, dim, keepdim=False, **params):
        x = a._data
        moved = np.moveaxis(x.reshape(1) if x.ndim == 0 else x, dim, -1)
        if moved.shape[-1] == 0:
            raise IndexError(f"{cls.__name__.lower()}(): Expected reduction dim {dim} to have "
                             "non-zero size.")
        idx = cls.pick(moved, **params)
        values = np.take_along_axis(moved, idx[..., None], -1)[..., 0]
        if keepdim and x.ndim:
            values, idx = np.expand_dims(values, dim), np.expand_dims(idx, dim)
        ctx.shape, ctx.dim, ctx.keepdim = x.shape, dim, keepdim
        ctx.index = idx
        return values, idx.astype(np.int64)

    @staticmethod
    def backward(ctx, g, _gi=None):
        if not ctx.shape:
            return g
        idx = _tensor(ctx.index.astype(np.int64))
        if not ctx.keepdim:
            g, idx = g.unsqueeze(ctx.dim), idx.unsqueeze(ctx.dim)
        return g.new_zeros(ctx.shape).scatter(ctx.dim, idx, g)


def _lower_median(x: np.ndarray) -> np.ndarray:
    order = np.argsort(x, axis=-1, kind="stable")
    return order[..., (x.shape[-1] - 1) // 2]


def _nan_lower_median(x: np.ndarray) -> np.ndarray:
    order = np.argsort(x, axis=-1, kind="stable")  # nans sort last
    count = (~np.isnan(x)).sum(-1)
    k = np.where(count > 0, (count - 1) // 2, x.shape[-1] - 1)
    return np.take_along_axis(order, k[..., None], -1)[..., 0]


def _median_with_nan(x: np.ndarray) -> np.ndarray:
    """torch's median: nan when the slice has a nan (the first nan's index)."""
    idx = _lower_median(x)
    nan = np.isnan(x)
    has_nan = nan.any(-1)
    return np.where(has_nan, nan.argmax(-1), idx) if has_nan.any() else idx


class Median(_Pick):
    node_name = "MedianBackward1"
    pick = staticmethod(_median_with_nan)


class Nanmedian(_Pick):
    node_name = "NanmedianBackward1"
    pick = staticmethod(_nan_lower_median)


class MedianAll(Op):
    """``median()`` over all elements (torch's MedianBackward0, one node): the gradient is
    shared evenly among the elements equal to the median (the nans, where it is nan), as
    torch's; the median over a dim gives it to the picked element alone."""

    node_name = "MedianBackward0"
    pick = staticmethod(_median_with_nan)

    @classmethod
    def forward(cls, ctx, a):
        flat = a._data.reshape(-1)
        ctx.save_for_backward(a, OUTPUT)
        return np.asarray(flat[cls.pick(flat)])

    @staticmethod
    def backward(ctx, g):
        a, value = ctx.saved_tensors
        tied = a.isnan() if bool(value.isnan()) else a == value
        return tied * (g / tied.sum())


class NanmedianAll(MedianAll):
    node_name = "NanmedianBackward0"
    pick = staticmethod(_nan_lower_median)


class Kthvalue(_Pick):
    node_name = "KthvalueBackward0"
    @staticmethod
    def pick(x, k):
        if not 1 <= k <= x.shape[-1]:
            raise IndexError(f"kthvalue(): selected number k out of range for dimension "
                             f"of size {x.shape[-1]}")
        return np.argsort(x, axis=-1, kind="stable")[..., k - 1]


class Mode(_Pick):
    node_name = "ModeBackward0"
    @staticmethod
    def pick(x):
        """The smallest most frequent value; its last index, as torch on CPU."""
        flat = x.reshape(-1, x.shape[-1])
        out = np.empty(flat.shape[0], dtype=np.int64)
        for r, row in enumerate(flat):
            values, counts = np.unique(row, return_counts=True)
            value = values[np.argmax(counts)]
            out[r] = np.flatnonzero(row == value)[-1]
        return out.reshape(x.shape[:-1])


class CumExtreme(Op):
    """cummax / cummin: running extreme and the index where it was reached (the last such
    index on ties, as torch)."""

    node_name = "CummaxBackward0"
    ufunc = np.greater_equal

    @classmethod
    def forward(cls, ctx, a, dim):
        x = a._data.reshape(1) if a._data.ndim == 0 else a._data
        moved = np.moveaxis(x, dim, -1)
        values = np.empty_like(moved)
        idx = np.zeros(moved.shape, dtype=np.int64)
        if moved.shape[-1]:
            best, where = moved[..., 0].copy(), np.zeros(moved.shape[:-1], np.int64)
            for k in range(moved.shape[-1]):
                cur = moved[..., k]
                take = cls.ufunc(cur, best) | np.isnan(cur)
                take &= ~np.isnan(best) | np.isnan(cur)
                best = np.where(take, cur, best)
                where = np.where(take, k, where)
                values[..., k], idx[..., k] = best, where
        index = np.moveaxis(idx, -1, dim).reshape(a._data.shape)
        ctx.shape, ctx.dim, ctx.index = a._data.shape, dim, index
        return np.moveaxis(values, -1, dim).reshape(a._data.shape), index

    @staticmethod
    def backward(ctx, g, _gi=None):
        if not ctx.shape:
            return g
        return g.new_zeros(ctx.shape).scatter_add(ctx.dim, _tensor(ctx.index), g)


class Cummin(CumExtreme):
    node_name = "CumminBackward0"
    ufunc = np.less_equal
