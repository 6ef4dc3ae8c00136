"""``scatter_reduce``: ``src``'s values reduced into ``self`` at ``index`` along a dim with
sum, prod, mean, amax or amin, ``self``'s own value taking part or not (``include_self``).
sum and mean are compositions of scatter_add; prod, amax and amin are one op each."""
from __future__ import annotations

import numpy as np

from disthook import _dtype
from disthook.ops.base import Op
from disthook.ops.shape import _along_dim, _index_region, _tensor

_UFUNCS = {"prod": np.multiply, "amax": np.maximum, "amin": np.minimum}
_IDENTITY = {"prod": 1, "amax": -np.inf, "amin": np.inf}


class ScatterReduce(Op):
    node_name = "ScatterReduceBackward0"
    saved_names = ("self", "src", "result")

    @staticmethod
    def forward(ctx, a, src, index, dim, reduce, include_self):
        ctx.index, ctx.dim, ctx.reduce, ctx.include_self = index, dim, reduce, include_self
        ctx.src_shape = src._data.shape
        out = a._data.copy()
        where = _along_dim(index, dim)
        values = src._data[_index_region(index)]
        if not include_self:
            ident = _IDENTITY[reduce]
            if _dtype.kind(out.dtype) != "f" and reduce != "prod":
                info = np.iinfo(out.dtype) if out.dtype.kind in "iu" else None
                ident = (info.min if reduce == "amax" else info.max) if info else ident
            out[where] = ident
        _UFUNCS[reduce].at(out, where, values)
        ctx.arrays = (a._data.copy(), values.copy(), out.copy())
        ctx.save_for_backward(a, src)
        return out

    @staticmethod
    def backward(ctx, g):
        from disthook.autograd import grad_mode

        x, values, out = ctx.arrays
        if grad_mode._state.enabled:  # create_graph=True: a backward that differentiates
            return _recorded_backward(ctx, g)
        where = _along_dim(ctx.index, ctx.dim)
        touched = np.zeros(x.shape, dtype=bool)
        touched[where] = True
        gx = g._data.copy()
        gsrc = np.zeros(values.shape, dtype=g._data.dtype)
        picked = g._data[where]
        if ctx.reduce == "prod":
            # the product of the others at each position: the product of its nonzero factors,
            # divided by the element's own value, or (for a zero) kept when it is the only zero
            zeros = np.zeros(x.shape)
            nonzero_prod = np.ones(x.shape, dtype=x.dtype)
            np.add.at(zeros, where, values == 0)
            np.multiply.at(nonzero_prod, where, np.where(values == 0, 1, values))
            if ctx.include_self:
                zeros += touched & (x == 0)
                nonzero_prod *= np.where(touched & (x != 0), x, 1)

            def others(v, z, prod):
                with np.errstate(divide="ignore", invalid="ignore"):
                    return np.where(v != 0, np.where(z == 0, prod / np.where(v != 0, v, 1), 0),
                                    np.where(z == 1, prod, 0))

            gsrc = picked * others(values, zeros[where], nonzero_prod[where])
            gx = np.where(touched, g._data * others(x, zeros, nonzero_prod), g._data) \
                if ctx.include_self else np.where(touched, 0, g._data)
        else:
            # amax / amin: the gradient is shared evenly among every value equal to the result
            hits_src = values == out[where]
            count = np.zeros(x.shape)
            np.add.at(count, where, hits_src)
            hits_self = (x == out) & touched
            count += hits_self  # (counted without include_self too, as torch counts it)
            count = np.where(count == 0, 1, count)
            gsrc = np.where(hits_src, picked / count[where], 0)
            hits_self &= ctx.include_self
            gx = np.where(touched, np.where(hits_self, g._data / count, 0), g._data)
        full = np.zeros(ctx.src_shape, dtype=g._data.dtype)
        full[_index_region(ctx.index)] = gsrc
        return _tensor(gx.astype(g._data.dtype)), _tensor(full)


def _recorded_backward(ctx, g):
    """The gradient as Tensor ops, for a second derivative: for amax and amin the incoming
    gradient times constant shares (the ties' masks do not move under a small change), for
    prod times the product of the others, recomputed from the saved inputs (refused where a
    factor is zero, whose share is a product that skips it)."""
    from disthook.nn import functional as F
    from disthook.ops.scan import no_second_order

    x, values, out = ctx.arrays
    where = _along_dim(ctx.index, ctx.dim)
    touched = np.zeros(x.shape, dtype=bool)
    touched[where] = True
    index = _tensor(ctx.index)
    if ctx.reduce == "prod":
        if (values == 0).any() or ctx.include_self and (touched & (x == 0)).any():
            no_second_order(g, "scatter_reduce('prod') with a zero factor")
        a, src = ctx.saved_tensors
        result = ScatterReduce.apply(a, src, index=ctx.index, dim=ctx.dim, reduce="prod",
                                     include_self=ctx.include_self)
        region = src[_index_region(ctx.index)]
        gsrc = g.gather(ctx.dim, index) * result.gather(ctx.dim, index) / region
        gx = (g * result / a).where(_tensor(touched), g) if ctx.include_self else \
            g.where(_tensor(~touched), 0.0)
    else:
        hits_src = values == out[where]
        count = np.zeros(x.shape)
        np.add.at(count, where, hits_src)
        hits_self = (x == out) & touched  # (counted without include_self too, as torch)
        count = np.where(count + hits_self == 0, 1, count + hits_self)
        share = np.where(touched, (hits_self & ctx.include_self) / count, 1)
        dtype = g._data.dtype
        gx = (g * _tensor(share.astype(dtype))).where(_tensor(share != 0), 0.0)
        gsrc = (g.gather(ctx.dim, index) * _tensor((hits_src / count[where]).astype(dtype))) \
            .where(_tensor(hits_src), 0.0)
    pad = []
    for have, want in zip(reversed(ctx.index.shape), reversed(ctx.src_shape)):
        pad += [0, want - have]
    return gx, (F.pad(gsrc, pad) if any(pad) else gsrc)


def scatter_reduce(self, dim, index, src, reduce, include_self):
    """``self.scatter_reduce(dim, index, src, reduce, include_self=...)``."""
    if reduce not in ("sum", "prod", "mean", "amax", "amin"):
        raise RuntimeError(f"reduce argument must be either sum, prod, mean, amax or amin, got "
                           f"{reduce}")
    if reduce in ("sum", "mean"):
        base = self if include_self else self.scatter(dim, index, 0)
        total = base.scatter_add(dim, index, src)
        if reduce == "sum":
            return total
        ones = src.new_ones(src.shape)
        count = self.new_full(self.shape, 1 if include_self else 0).scatter_add(dim, index, ones)
        mean = total / count.where(count > 0, count.new_ones(()))
        if _dtype.kind(self._data.dtype) != "f":
            mean = mean.floor().to(self.dtype)
        return mean
    return ScatterReduce.apply(self, src, index=index._data, dim=dim, reduce=reduce,
                               include_self=include_self)
