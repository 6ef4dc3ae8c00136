"""Reductions: sum, mean, var/std, max/min/amax/amin, prod, logsumexp, softmax family."""
from __future__ import annotations

import numpy as np

from disthook.ops.base import OUTPUT, Op


def norm_dims(dim, ndim: int, *, allow_none: bool = True) -> tuple | None:
    """Validate ``dim`` (int, tuple or None) against ``ndim``; IndexError names the range."""
    if dim is None:
        return None if allow_none else tuple(range(ndim))
    dims = (dim,) if isinstance(dim, (int, np.integer)) else tuple(dim)
    if len(dims) == 0:
        return None
    rank = max(ndim, 1)
    out = []
    for d in dims:
        if not -rank <= d < rank:
            raise IndexError(
                f"Dimension out of range (expected to be in range of [{-rank}, {rank - 1}], "
                f"but got {d})"
            )
        out.append(int(d) % rank if ndim else 0)
    if len(set(out)) != len(out):
        raise RuntimeError(f"dim {out} appears multiple times in the list of dims")
    return tuple(out) if ndim else None


def expand_back(g, in_shape: tuple, dims, keepdim: bool):
    """Broadcast a reduced gradient back over the reduced dims."""
    if dims is not None and not keepdim:
        for d in sorted(dims):
            g = g.unsqueeze(d)
    elif dims is None and g.ndim != len(in_shape):
        g = g.reshape((1,) * len(in_shape))
    return g.expand(in_shape)


class Sum(Op):
    node_name = "SumBackward1"

    @staticmethod
    def forward(ctx, a, dim=None, keepdim=False, dtype=None):
        ctx.shape, ctx.dims, ctx.keepdim = a._data.shape, dim, keepdim
        x = a._data
        out_dtype = dtype if dtype is not None else (
            np.int64 if x.dtype.kind in "bi" or x.dtype.kind == "u" else x.dtype)
        return np.sum(x, axis=dim, keepdims=keepdim, dtype=out_dtype)

    @staticmethod
    def backward(ctx, g):
        return expand_back(g, ctx.shape, ctx.dims, ctx.keepdim)


class SumAll(Sum):
    node_name = "SumBackward0"


class Mean(Op):
    node_name = "MeanBackward1"

    @staticmethod
    def forward(ctx, a, dim=None, keepdim=False):
        x = a._data
        if x.dtype.kind != "f":
            raise RuntimeError(
                "mean(): could not infer output dtype. Input dtype must be either a floating "
                f"point or complex dtype. Got: {_kind_name(x.dtype)}"
            )
        ctx.shape, ctx.dims, ctx.keepdim = x.shape, dim, keepdim
        ctx.count = x.size // max(1, np.mean(x, axis=dim, keepdims=keepdim).size) if x.size else 0
        return np.mean(x, axis=dim, keepdims=keepdim).astype(x.dtype, copy=False)

    @staticmethod
    def backward(ctx, g):
        return expand_back(g, ctx.shape, ctx.dims, ctx.keepdim) / ctx.count


class MeanAll(Mean):
    node_name = "MeanBackward0"


def _kind_name(dt) -> str:
    return {"i": "Long", "b": "Bool", "u": "Byte"}.get(dt.kind, str(dt))


class Var(Op):
    node_name = "VarBackward0"

    @staticmethod
    def forward(ctx, a, dim=None, correction=1, keepdim=False):
        ctx.save_for_backward(a)
        x = a._data
        ctx.dims, ctx.correction, ctx.keepdim = dim, correction, keepdim
        n = x.size if dim is None else int(np.prod([x.shape[d] for d in dim]))
        ctx.n = n
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.var(x, axis=dim, ddof=correction, keepdims=keepdim).astype(x.dtype)

    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved_tensors
        centered = a - a.mean(dim=ctx.dims, keepdim=True)
        g = expand_back(g, a.shape, ctx.dims, ctx.keepdim)
        return g * centered * (2.0 / (ctx.n - ctx.correction))


class Std(Op):
    node_name = "StdBackward0"

    @staticmethod
    def forward(ctx, a, dim=None, correction=1, keepdim=False):
        ctx.save_for_backward(a, OUTPUT)
        x = a._data
        ctx.dims, ctx.correction, ctx.keepdim = dim, correction, keepdim
        ctx.n = x.size if dim is None else int(np.prod([x.shape[d] for d in dim]))
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.std(x, axis=dim, ddof=correction, keepdims=keepdim).astype(x.dtype)

    @staticmethod
    def backward(ctx, g):
        a, out = ctx.saved_tensors
        centered = a - a.mean(dim=ctx.dims, keepdim=True)
        g = expand_back(g / out, a.shape, ctx.dims, ctx.keepdim)
        return g * centered * (1.0 / (ctx.n - ctx.correction))


class Amax(Op):
    """max/min over dims with the gradient shared evenly among tied extremes."""

    node_name = "AmaxBackward0"
    fn = staticmethod(np.max)

    @classmethod
    def forward(cls, ctx, a, dim=None, keepdim=False):
        if a._data.size == 0:
            raise RuntimeError(
                f"{cls.__name__.lower()}(): Expected reduction dim to be specified for input."
                "numel() == 0. Specify the reduction dim with the 'dim' argument.")
        ctx.save_for_backward(a, OUTPUT)
        ctx.dims, ctx.keepdim = dim, keepdim
        return cls.fn(a._data, axis=dim, keepdims=keepdim)

    @staticmethod
    def backward(ctx, g):
        a, out = ctx.saved_tensors
        out = expand_back(out, a.shape, ctx.dims, ctx.keepdim)
        mask = (a == out).to(g.dtype)
        count = mask.sum(dim=ctx.dims, keepdim=True)
        return expand_back(g, a.shape, ctx.dims, ctx.keepdim) * mask / count


class Amin(Amax):
    node_name = "AminBackward0"
    fn = staticmethod(np.min)


class MaxAll(Amax):
    node_name = "MaxBackward1"


class MinAll(Amin):
    node_name = "MinBackward1"


class MaxDim(Op):
    """``max(dim)``: (values, indices); the gradient goes to the index taken."""

    node_name = "MaxBackward0"
    arg = staticmethod(np.argmax)

    @classmethod
    def forward(cls, ctx, a, dim=0, keepdim=False):
        x = a._data
        idx = cls.arg(x, axis=dim)
        idx_k = np.expand_dims(idx, dim)
        vals = np.take_along_axis(x, idx_k, axis=dim)
        ctx.dim, ctx.keepdim, ctx.shape = dim, keepdim, x.shape
        ctx.index = idx_k
        if not keepdim:
            vals = np.squeeze(vals, axis=dim)
            return vals, idx.astype(np.int64)
        return vals, idx_k.astype(np.int64)

    @staticmethod
    def backward(ctx, g, g_idx=None):
        from disthook.ops.shape import ScatterAlong

        if not ctx.keepdim:
            g = g.unsqueeze(ctx.dim)
        return ScatterAlong.apply(g, index=ctx.index, dim=ctx.dim, shape=ctx.shape)


class MinDim(MaxDim):
    node_name = "MinBackward0"
    arg = staticmethod(np.argmin)


class Prod(Op):
    node_name = "ProdBackward1"

    @staticmethod
    def forward(ctx, a, dim=None, keepdim=False):
        ctx.save_for_backward(a, OUTPUT)
        ctx.dim, ctx.keepdim = dim, keepdim
        return np.prod(a._data, axis=dim, keepdims=keepdim)

    @staticmethod
    def backward(ctx, g):
        a, out = ctx.saved_tensors
        g = expand_back(g, a.shape, ctx.dim, ctx.keepdim)
        if not (a._data == 0).any():
            return g * expand_back(out, a.shape, ctx.dim, ctx.keepdim) / a
        # with zeros: the product of all the other elements, computed directly
        x = a._data
        axis = ctx.dim if ctx.dim is not None else None
        flat = x.reshape(-1) if axis is None else np.moveaxis(x, axis[0], -1)
        left = np.cumprod(np.concatenate([np.ones_like(flat[..., :1]), flat[..., :-1]], -1), -1)
        right = np.flip(np.cumprod(np.flip(np.concatenate(
            [flat[..., 1:], np.ones_like(flat[..., :1])], -1), -1), -1), -1)
        others = left * right
        others = others.reshape(x.shape) if axis is None else np.moveaxis(others, -1, axis[0])
        return g * a.new_tensor(others)


class ProdAll(Prod):
    node_name = "ProdBackward0"


class LogSumExp(Op):
    node_name = "LogsumexpBackward0"

    @staticmethod
    def forward(ctx, a, dim=None, keepdim=False):
        ctx.save_for_backward(a, OUTPUT)
        ctx.dim, ctx.keepdim = dim, keepdim
        x = a._data
        m = np.max(x, axis=dim, keepdims=True)
        m = np.where(np.isfinite(m), m, 0)
        out = np.log(np.sum(np.exp(x - m), axis=dim, keepdims=True)) + m
        return out if keepdim else np.squeeze(out, axis=dim)

    @staticmethod
    def backward(ctx, g):
        a, out = ctx.saved_tensors
        out = expand_back(out, a.shape, ctx.dim, ctx.keepdim)
        return expand_back(g, a.shape, ctx.dim, ctx.keepdim) * (a - out).exp()


class Softmax(Op):
    @staticmethod
    def forward(ctx, a, dim):
        ctx.save_for_backward(OUTPUT)
        ctx.dim = dim
        x = a._data
        e = np.exp(x - np.max(x, axis=dim, keepdims=True))
        return e / np.sum(e, axis=dim, keepdims=True)

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return y * (g - (g * y).sum(dim=ctx.dim, keepdim=True))


class LogSoftmax(Op):
    @staticmethod
    def forward(ctx, a, dim):
        ctx.save_for_backward(OUTPUT)
        ctx.dim = dim
        x = a._data
        shifted = x - np.max(x, axis=dim, keepdims=True)
        return shifted - np.log(np.sum(np.exp(shifted), axis=dim, keepdims=True))

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return g - y.exp() * g.sum(dim=ctx.dim, keepdim=True)
