"""Reductions: sum, mean, var/std (and with the mean), max/min/amax/amin, prod, vector norm, logsumexp, the
softmax family, and cumsum."""
from __future__ import annotations

import warnings
from sys import modules as _loaded
from types import MappingProxyType

import numpy as np

from disthook import _dtype
from disthook.ops._bf16 import HALVES, half_in_float32, half_up
from disthook.ops.base import OUTPUT, Op, _wrap, plain, plain_float, plain_tensor, shown_dims


def norm_dims(dim, ndim: int, *, allow_none: bool = True) -> tuple | None:
    """Validate ``dim`` (int, tuple or None) against ``ndim``; IndexError names the range."""
    if dim is None:
        return None if allow_none else tuple(range(ndim))
    if type(dim) is int and -ndim <= dim < ndim:  # (the common case, first: 2-3 us less)
        return (dim % ndim,)
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
    for i, d in enumerate(out):
        if d in out[:i]:
            raise RuntimeError(f"dim {d} appears multiple times in the list of dims")
    return tuple(out) if ndim else None


def expand_back(g, in_shape: tuple, dims, keepdim: bool):
    """Broadcast a reduced gradient back over the reduced dims."""
    if plain(g):  # no graph of it: the methods' views on the array, one view of g at the end
        x = g._data
        if dims is not None and not keepdim:
            for d in sorted(dims):
                x = np.expand_dims(x, d)
        elif dims is None and x.ndim != len(in_shape) and x.ndim:
            x = x.reshape((1,) * len(in_shape))
        shape = tuple(in_shape)
        if x.shape != shape:
            x = _loaded["disthook.ops.shape"].expanded(x, shape)
        elif x is g._data:
            return g  # (the method's expand to its own shape)
        return _wrap(x, None, 0, (g,), True)
    if dims is not None and not keepdim:
        for d in sorted(dims):
            g = g.unsqueeze(d)
    elif dims is None and g.ndim != len(in_shape) and g.ndim:
        g = g.reshape((1,) * len(in_shape))
    return g.expand(in_shape)  # (a 0-d gradient expands as it is, as torch's formula does)


def _dims(n) -> tuple:
    return tuple(n.dims) if isinstance(n.dims, (tuple, list)) else (n.dims,)


# what torch's SumBackward1 and MeanBackward1 keep besides their tensors
_REDUCED_DIMS = MappingProxyType({"dim": _dims, "keepdim": lambda n: n.keepdim,
                 "self_sym_sizes": lambda n: tuple(n.shape)})


class Sum(Op):
    complex_ok = True
    node_name = "SumBackward1"
    saved_values = _REDUCED_DIMS

    @staticmethod
    def forward(ctx, a, dim=None, keepdim=False, dtype=None):
        ctx.shape, ctx.dims, ctx.keepdim = a._data.shape, dim, keepdim
        x = a._data
        out_dtype = dtype if dtype is not None else (
            np.int64 if x.dtype.kind in "bi" or x.dtype.kind == "u" else x.dtype)
        # (the ufunc's own reduce: np.sum's wrapper costs 5-10 us a call, and a warning from
        # numpy's wrapper module (inf - inf) escapes quiet_float_warnings, which torch never
        # prints)
        return np.add.reduce(x, axis=dim, dtype=out_dtype, keepdims=keepdim)

    @staticmethod
    def backward(ctx, g):
        return expand_back(g, ctx.shape, ctx.dims, ctx.keepdim)


class SumAll(Sum):
    node_name = "SumBackward0"
    saved_values = MappingProxyType({"self_sym_sizes": lambda n: tuple(n.shape)})


class Mean(Op):
    complex_ok = True
    node_name = "MeanBackward1"
    saved_values = _REDUCED_DIMS

    @staticmethod
    def forward(ctx, a, dim=None, keepdim=False):
        x = a._data
        if _dtype.kind(x.dtype) not in "fc":
            raise RuntimeError(
                "mean(): could not infer output dtype. Input dtype must be either a floating "
                f"point or complex dtype. Got: {_kind_name(x.dtype)}"
            )
        ctx.shape, ctx.dims, ctx.keepdim = x.shape, dim, keepdim
        out = mean_array(x, dim, keepdim)
        ctx.count = x.size // max(1, out.size) if x.size else 0
        return out.astype(x.dtype, copy=False)

    @staticmethod
    def backward(ctx, g):
        if ctx.dims is None and ctx.count and plain_float(g):
            # no graph of it (a loss's mean): the one value the methods' broadcast and
            # division give every element, computed once
            x = g._data
            return plain_tensor(np.full(ctx.shape, x.reshape(()) / np.array(ctx.count, x.dtype),
                                        x.dtype))
        return expand_back(g, ctx.shape, ctx.dims, ctx.keepdim) / ctx.count


def mean_array(x: np.ndarray, axis, keepdims: bool = False):
    """``x.mean(axis)`` (float16 summed in float32, as numpy's) as the ufuncs themselves: a
    warning they give (inf - inf, an empty mean's 0 / 0) comes from disthook's code, which
    ``quiet_float_warnings`` drops, not from numpy's wrapper module or its "Mean of empty
    slice": torch's mean gives nan without a word."""
    axes = range(x.ndim) if axis is None else (axis,) if isinstance(axis, int) else axis
    count = 1
    for d in axes:
        count *= x.shape[d]
    total = np.add.reduce(x, axis=axis, dtype=np.float32 if x.dtype == np.float16 else None,
                          keepdims=keepdims)
    # numpy divides by its count as an intp (in float64 for float32), rounds to the sum's
    # dtype, then to x's
    mean = np.true_divide(total, np.intp(count)).astype(total.dtype, copy=False)
    return mean.astype(x.dtype, copy=False) if x.dtype.kind in "fc" else mean


class MeanAll(Mean):
    node_name = "MeanBackward0"
    saved_values = MappingProxyType({})


def _kind_name(dt) -> str:
    return {"i": "Long", "b": "Bool", "u": "Byte"}.get(dt.kind, str(dt))


def _check_floating_for_var(a) -> None:
    if _dtype.kind(a._data.dtype) != "f":
        raise RuntimeError("std and var only support floating point and complex dtypes")


def _spread(fn, ctx, x, dims, correction, keepdim, name: str):
    """``np.var`` / ``np.std`` over ``dims`` with torch's degrees of freedom,
    ``max(0, n - correction)`` (kept as ``ctx.dof`` for backward): none left (a single
    sample's unbiased std) is torch's warning and a NaN or inf, never a negative count."""
    n = x.size if dims is None else int(np.prod([x.shape[d] for d in dims]))
    ctx.dof = dof = max(0, n - correction)
    if dof == 0:
        warnings.warn(f"{name}(): degrees of freedom is <= 0. Correction should be strictly "
                      "less than the reduction factor (input numel divided by output numel).",
                      UserWarning, stacklevel=4)
    with np.errstate(divide="ignore", invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy's own words for the same
        # float16 in float32, as torch's CPU kernel accumulates (its squares pass 65504)
        work = x.astype(np.float32) if x.dtype == np.float16 else x
        return fn(work, axis=dims, ddof=n - dof, keepdims=keepdim).astype(x.dtype)


def _over_dof(ctx) -> np.float64:
    """``1 / dof``: inf where no degree of freedom is left, as torch's backward divides."""
    with np.errstate(divide="ignore"):
        return np.float64(1.0) / np.float64(ctx.dof)


class Var(Op):
    node_name = "VarBackward0"

    @staticmethod
    def forward(ctx, a, dim=None, correction=1, keepdim=False):
        _check_floating_for_var(a)
        ctx.save_for_backward(a)
        x = a._data
        ctx.dims, ctx.correction, ctx.keepdim = dim, correction, keepdim
        return _spread(np.var, ctx, x, dim, correction, keepdim, "var")

    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved_tensors
        centered = a - a.mean(dim=ctx.dims, keepdim=True)
        g = expand_back(g, a.shape, ctx.dims, ctx.keepdim)
        with np.errstate(invalid="ignore"):  # 0 * inf: NaN, as torch's, without a warning
            return g * centered * (2.0 * _over_dof(ctx))


class Std(Op):
    node_name = "StdBackward0"

    @staticmethod
    def forward(ctx, a, dim=None, correction=1, keepdim=False):
        _check_floating_for_var(a)
        ctx.save_for_backward(a, OUTPUT)
        x = a._data
        ctx.dims, ctx.correction, ctx.keepdim = dim, correction, keepdim
        return _spread(np.std, ctx, x, dim, correction, keepdim, "std")

    @staticmethod
    def backward(ctx, g):
        a, out = ctx.saved_tensors
        centered = a - a.mean(dim=ctx.dims, keepdim=True)
        safe_out = out.masked_fill(out == 0, np.inf)  # a zero std has a zero gradient
        g = expand_back(g / safe_out, a.shape, ctx.dims, ctx.keepdim)
        with np.errstate(invalid="ignore"):
            return g * centered * _over_dof(ctx)


class VarMean(Op):
    """``var_mean``: (variance, mean) in one node; both gradients flow to the input."""

    @staticmethod
    def forward(ctx, a, dim=None, correction=1, keepdim=False):
        var = Var.forward(ctx, a, dim=dim, correction=correction, keepdim=keepdim)
        return var, mean_array(a._data, dim, keepdim)

    materialize_grads = False  # an output the program did not use adds nothing (below)

    @staticmethod
    def backward(ctx, g_var, g_mean):
        (a,) = ctx.saved_tensors
        spread = None if g_var is None else Var.backward(ctx, g_var)
        return _spread_and_mean_grad(ctx, a, spread, g_mean)


class StdMean(Op):
    """``std_mean``: (standard deviation, mean) in one node."""

    @staticmethod
    def forward(ctx, a, dim=None, correction=1, keepdim=False):
        _check_floating_for_var(a)
        x = a._data
        ctx.dims, ctx.correction, ctx.keepdim = dim, correction, keepdim
        std = _spread(np.std, ctx, x, dim, correction, keepdim, "std_mean")
        ctx.save_for_backward(a, OUTPUT)  # the std, the first output
        return std, mean_array(x, dim, keepdim)

    materialize_grads = False

    @staticmethod
    def backward(ctx, g_std, g_mean):
        a = ctx.saved_tensors[0]
        spread = None if g_std is None else Std.backward(ctx, g_std)
        return _spread_and_mean_grad(ctx, a, spread, g_mean)


def _spread_and_mean_grad(ctx, a, g_spread, g_mean):
    """var_mean's / std_mean's gradient: the spread's part plus the mean's, each only where
    its output got a gradient, as torch: a zero gradient for the unused one would give nan
    times inf where the input holds inf (the mean alone of ``std_mean`` of such a row)."""
    if g_mean is None:
        return g_spread
    count = a.numel() // max(1, g_mean.numel()) if a.numel() else 1
    g = expand_back(g_mean, a.shape, ctx.dims, ctx.keepdim) / count
    return g if g_spread is None else g_spread + g


class Amax(Op):
    """max/min over dims with the gradient shared evenly among tied extremes."""

    node_name = "AmaxBackward0"
    fn = staticmethod(np.max)
    torch_name = "amax"  # for error messages

    @classmethod
    def forward(cls, ctx, a, dim=None, keepdim=False):
        x = a._data
        if dim is None and x.size == 0:
            raise RuntimeError(
                f"{cls.torch_name}(): Expected reduction dim to be specified for input."
                "numel() == 0. Specify the reduction dim with the 'dim' argument.")
        for d in dim or ():
            if x.shape[d] == 0:
                raise IndexError(
                    f"{cls.torch_name}(): Expected reduction dim {d} to have non-zero size.")
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
    torch_name = "amin"


class MaxAll(Amax):
    node_name = "MaxBackward1"
    torch_name = "max"


class MinAll(Amin):
    node_name = "MinBackward1"
    torch_name = "min"


class MaxDim(Op):
    """``max(dim)``: (values, indices); the gradient goes to the index taken."""

    node_name = "MaxBackward0"
    arg = staticmethod(np.argmax)
    torch_name = "max"

    @classmethod
    def forward(cls, ctx, a, dim=0, keepdim=False):
        x = a._data
        if x.ndim and x.shape[dim] == 0:
            raise IndexError(
                f"{cls.torch_name}(): Expected reduction dim {dim} to have non-zero size.")
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
    torch_name = "min"


class Prod(Op):
    node_name = "ProdBackward1"
    complex_ok = True  # the gradient is conjugated, as torch's: g * conj(product of others)

    @staticmethod
    def forward(ctx, a, dim=None, keepdim=False):
        ctx.save_for_backward(a, OUTPUT)
        ctx.dim, ctx.keepdim = dim, keepdim
        x = a._data
        dtype = np.int64 if x.dtype.kind in "biu" else x.dtype  # integers widen, as in sum
        return np.multiply.reduce(x, axis=dim, dtype=dtype, keepdims=keepdim)  # (as Sum)

    @staticmethod
    def backward(ctx, g):
        a, out = ctx.saved_tensors
        g = expand_back(g, a.shape, ctx.dim, ctx.keepdim)
        if a._data.dtype.kind == "c":
            a, out = a.conj(), out.conj()
        if not (a._data == 0).any():
            return g * expand_back(out, a.shape, ctx.dim, ctx.keepdim) / a
        if np.isfinite(a._data).all():
            return g * _prod_of_others(a, ctx.dim)
        return g * plain_tensor(_products_before_and_after(a, g, ctx.dim))


def _products_before_and_after(a, g, dim) -> np.ndarray:
    """With zeros and an inf or nan in ``a``: for each element, the product of the elements
    before it times that of those after it, as torch (so 0 * inf is nan only where torch's
    is); all zeros, as torch, for a whole-tensor prod with two zeros outside grad mode."""
    from disthook.autograd import grad_mode
    from disthook.ops.scan import no_second_order

    no_second_order(g, "prod of an input with zeros and infinities", a.requires_grad)
    x = a._data.reshape(-1) if dim is None else a._data
    axis = 0 if dim is None else dim[0]
    if dim is None and (x == 0).sum() > 1 and not grad_mode._state.enabled:
        return np.zeros_like(a._data)
    ones = np.ones_like(np.take(x, [0], axis=axis))
    before = np.multiply.accumulate(
        np.concatenate([ones, np.delete(x, -1, axis=axis)], axis=axis), axis=axis)
    after = np.flip(np.multiply.accumulate(
        np.concatenate([ones, np.flip(np.delete(x, 0, axis=axis), axis)], axis=axis),
        axis=axis), axis)
    with np.errstate(invalid="ignore"):
        return (before * after).reshape(a._data.shape)


def _prod_of_others(a, dim):
    """For each element, the product of the others along ``dim`` (all when None): exact
    when ``a`` holds zeros, and differentiable again (double backward of prod)."""
    def total(t):
        return t.sum() if dim is None else t.sum(dim=dim, keepdim=True)

    zeros = a == 0
    nonzero = a.masked_fill(zeros, 1)
    nonzero_prod = nonzero.prod() if dim is None else nonzero.prod(dim[0], keepdim=True)
    # the zeros among the others multiply in: 1 if none, the one zero itself (its value 0,
    # its gradient 1) if one, 0 if more
    zeros_left = total(zeros) - zeros.long()  # (a count less a bool: torch refuses bool -)
    zero_kept = a * zeros
    lone_zero = (total(zero_kept) - zero_kept).where(zeros_left == 1, 0.0)
    zero_factor = lone_zero.where(zeros_left != 0, 1.0)
    return nonzero_prod / nonzero * zero_factor


class ProdAll(Prod):
    node_name = "ProdBackward0"


def vector_norm(x, ord: float, dim, keepdim: bool, dtype):
    """The ``ord``-norm of ``x`` over ``dim`` (all when None), in ``dtype`` when given: torch's
    checks of the dtype, and a complex tensor's norm is that of its absolute values (real)."""
    if x.is_complex():
        if dtype is not None and not dtype.is_complex:
            raise RuntimeError("linalg.vector_norm: dtype should be complex for complex inputs, "
                               f"but got {_dtype.scalar_type_name(dtype)}")
        x = (x if dtype is None else x.to(dtype)).abs()
    elif dtype is None and not x.is_floating_point():
        raise RuntimeError("linalg.vector_norm: Expected a floating point or complex tensor as "
                           f"input. Got {_dtype.scalar_type_name(x.dtype)}")
    elif dtype is not None:
        x = x.to(dtype)
    return LinalgVectorNorm.apply(x, ord=ord, dim=norm_dims(dim, x.ndim), keepdim=keepdim)


class LinalgVectorNorm(Op):
    """``norm(p, dim)``: the p-norm of the elements over ``dims`` (all when None)."""

    @staticmethod
    def forward(ctx, a, ord=2.0, dim=None, keepdim=False):
        ctx.save_for_backward(a, OUTPUT)
        ctx.ord, ctx.dims, ctx.keepdim = ord, dim, keepdim
        x = np.abs(a._data)
        if x.dtype == np.float16:  # torch sums half's powers in float32 and rounds once:
            x = x.astype(np.float32)  # the norm of [300, 400] is 500, not inf (300² > 65504)
        if ord == np.inf:
            out = np.max(x, axis=dim, keepdims=keepdim)
        elif ord == -np.inf:
            out = np.min(x, axis=dim, keepdims=keepdim)
        elif ord == 0:
            out = np.add.reduce(x != 0, axis=dim, keepdims=keepdim)
        elif ord == 1:  # (the ufunc's reduce, as Sum)
            out = np.add.reduce(x, axis=dim, keepdims=keepdim)
        elif ord == 2:
            out = np.sqrt(np.add.reduce(x * x, axis=dim, keepdims=keepdim))
        else:
            out = np.add.reduce(x ** ord, axis=dim, keepdims=keepdim) ** (1.0 / ord)
        return np.asarray(out, dtype=a._data.dtype)

    @staticmethod
    def backward(ctx, g):
        a, out = ctx.saved_tensors
        p = ctx.ord
        g = expand_back(g, a.shape, ctx.dims, ctx.keepdim)
        if p == 0:  # a count: no gradient (None, so .grad stays None as torch's)
            return None
        if p == 1:
            return g * a.sign()
        norm = expand_back(out, a.shape, ctx.dims, ctx.keepdim)
        if abs(p) == np.inf:
            # the extremes share the gradient evenly, as torch does
            mask = (a.abs() == norm).to(g.dtype)
            return g * a.sign() * mask / mask.sum(dim=ctx.dims, keepdim=True)
        safe_norm = norm.masked_fill(norm == 0, 1)  # a zero norm has a zero gradient
        if p == 2:
            return g * a / safe_norm
        return g * a.sign() * a.abs() ** (p - 1) / safe_norm ** (p - 1)


class LogSumExp(Op):
    node_name = "LogsumexpBackward0"
    handles_bfloat16 = True  # as float16: torch's ops one by one, each rounded (below)

    @staticmethod
    def forward(ctx, a, dim=None, keepdim=False):
        ctx.save_for_backward(a, OUTPUT)
        ctx.dim, ctx.keepdim = dim, keepdim
        x = a._data
        # a half dtype: torch composes amax, sub, exp, sum, log, add, each op computed in
        # float32 and rounded to the half dtype (the sum accumulates in float32)
        rnd = _rounding(x.dtype)
        x = half_up(x)
        m = x.max(axis=dim, keepdims=True, initial=-np.inf)
        m = np.where(np.isfinite(m), m, 0)
        with np.errstate(divide="ignore"):  # an empty or all -inf reduction gives -inf
            total = rnd(np.sum(rnd(np.exp(rnd(x - m))), axis=dim, keepdims=True))
            out = rnd(rnd(np.log(total)) + m).astype(a._data.dtype, copy=False)
        return out if keepdim else np.squeeze(out, axis=dim)

    @staticmethod
    def backward(ctx, g):
        a, out = ctx.saved_tensors
        out = expand_back(out, a.shape, ctx.dim, ctx.keepdim)
        return expand_back(g, a.shape, ctx.dim, ctx.keepdim) * (a - out).exp()


class Softmax(Op):
    saved_names = ("result",)
    saved_values = MappingProxyType({"dim": shown_dims})
    handles_bfloat16 = True  # as float16: torch's kernels' roundings (below)

    @staticmethod
    def forward(ctx, a, dim, given=None):
        ctx.save_for_backward(OUTPUT)
        ctx.dim, ctx.given = dim, given  # (``given``: the dim as the program wrote it)
        # a half dtype, computed in float32: over the last dim torch's kernel rounds once, at
        # the end; over another dim it keeps the exponentials in the half dtype, rounded, and
        # divides them by their float32 sum
        x = a._data
        rnd = _as_it_is if dim >= x.ndim - 1 else _rounding(x.dtype)
        x = half_up(x)
        e = np.exp(x - x.max(axis=dim, keepdims=True, initial=-np.inf))
        return (rnd(e) / e.sum(axis=dim, keepdims=True)).astype(a._data.dtype, copy=False)

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        if plain_float(g, y) and g._data.dtype == y._data.dtype:
            # no graph of it: the methods' passes on the arrays, wrapped once
            gy = g._data * y._data
            return plain_tensor(y._data * (g._data - _sum_kept(gy, ctx.dim)))
        return half_in_float32(
            lambda g, y: y * (g - (g * y).sum(dim=ctx.dim, keepdim=True)), g, y)


def _sum_kept(x: np.ndarray, dim) -> np.ndarray:
    """``Tensor.sum(dim, keepdim=True)``'s array, of a float array ``x``."""
    return x.sum(axis=norm_dims(dim, x.ndim), keepdims=True, dtype=x.dtype)


def log_softmax_array(x: np.ndarray, dim: int) -> np.ndarray:
    """log_softmax of a float array along ``dim``. A half dtype is computed in float32: over
    the last dim torch's kernel keeps the sum and its log in the half dtype, rounded; over
    another dim it rounds once, at the end (measured bit for bit, torch 2.13)."""
    rnd = _rounding(x.dtype) if dim >= x.ndim - 1 else _as_it_is
    wide = half_up(x)
    shifted = wide - wide.max(axis=dim, keepdims=True, initial=-np.inf)
    log_sum = rnd(np.log(rnd(np.exp(shifted).sum(axis=dim, keepdims=True))))
    return (shifted - log_sum).astype(x.dtype, copy=False)


class LogSoftmax(Op):
    saved_names = ("result",)
    saved_values = MappingProxyType({"dim": shown_dims})
    handles_bfloat16 = True  # as float16: torch's kernels' roundings (below)

    @staticmethod
    def forward(ctx, a, dim, given=None):
        ctx.save_for_backward(OUTPUT)
        ctx.dim, ctx.given = dim, given  # (``given``: the dim as the program wrote it)
        return log_softmax_array(a._data, dim)

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        if plain_float(g, y) and g._data.dtype == y._data.dtype:
            # no graph of it: the methods' passes on the arrays, wrapped once
            e = np.exp(y._data)
            e *= _sum_kept(g._data, ctx.dim)
            return plain_tensor(g._data - e)
        return half_in_float32(lambda g, y: g - y.exp() * g.sum(dim=ctx.dim, keepdim=True),
                               g, y)


def _as_it_is(x: np.ndarray) -> np.ndarray:
    return x


def _rounding(dtype):
    """For a half dtype, a function rounding a float32 array to it (kept in float32: the
    next step computes in float32 again); for any other dtype, none."""
    if dtype not in HALVES:
        return _as_it_is
    return lambda x: x.astype(dtype).astype(np.float32)


def flip_cumsum(g, dim: int):
    """Suffix sums along ``dim``: out[k] = sum of g[j] for j >= k, summed from the end as
    torch does (never total - prefix, which loses small terms beside large ones and gives
    nan beside an inf)."""
    if g.ndim == 0 or g.shape[dim] <= 1:
        return g
    return g.flip(dim).cumsum(dim).flip(dim)


class Cumsum(Op):
    complex_ok = True  # linear: the same rule for complex

    @staticmethod
    def forward(ctx, a, dim):
        ctx.dim = dim
        x = a._data
        dtype = np.int64 if x.dtype.kind in "biu" else x.dtype
        # (the ufunc's own accumulate: np.cumsum's warning (inf - inf) would come from numpy's
        # module, which quiet_float_warnings does not cover)
        return np.add.accumulate(x.reshape(-1) if x.ndim == 0 else x, axis=dim,
                                 dtype=dtype).reshape(
            x.shape)

    @staticmethod
    def backward(ctx, g):
        # the gradient of a prefix sum is the suffix sum
        return flip_cumsum(g, ctx.dim)
