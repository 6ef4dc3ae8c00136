"""Tensor methods for scans, order statistics, counting and matrix products: cumprod,
cummax/cummin, logcumsumexp, median/nanmedian/kthvalue/mode, quantile, nansum/nanmean,
count_nonzero, aminmax, diff, trace, histc/bincount/histogram, cov/corrcoef, outer/inner/
kron/cross, the addmm family, det/inverse and friends (through ``disthook.linalg``).

``Tensor`` inherits ``ReduceMethods``; the methods reach the Tensor machinery through ``self``.
"""
from __future__ import annotations

import builtins
import math

import numpy as np

from disthook import _dtype
from disthook.amp import cpu_policy
from disthook.ops import _bf16
from disthook.ops import scan as C
from disthook.ops.base import floating_kernel, refuse_complex
from disthook.ops.linalg import refuse_bool
from disthook.ops.reduce import norm_dims


def _values_indices(values, indices, name):
    from disthook.tensor import _ValuesIndices

    return _ValuesIndices(values, indices, name)


class ReduceMethods:
    """Scan, order-statistic, counting and matrix-product methods of Tensor."""

    __slots__ = ()

    # ---- scans -----------------------------------------------------------------------------
    def cumprod(self, dim, *, dtype=None):
        x = self if dtype is None else self.to(dtype)
        return C.Cumprod.apply(x, dim=self._dim(dim))

    def _cum_extreme(self, op, dim, name):
        values, indices = op.apply(self, dim=self._dim(dim))
        return _values_indices(values, indices, name)

    def cummax(self, dim):
        return self._cum_extreme(C.CumExtreme, dim, "cummax")

    def cummin(self, dim):
        return self._cum_extreme(C.Cummin, dim, "cummin")

    def logcumsumexp(self, dim):
        return C.Logcumsumexp.apply(self._floating(), dim=self._dim(dim))

    def cumsum_(self, dim, *, dtype=None):
        return self.copy_(self.cumsum(dim, dtype=dtype)) if not self.requires_grad else \
            self._inplace_method("cumsum", dim)

    def cumprod_(self, dim, *, dtype=None):
        return self._inplace_method("cumprod", dim)

    def _inplace_method(self, name, *args):
        from disthook._tensor_math import inplace_of

        return inplace_of(name)(self, *args)

    def diff(self, n=1, dim=-1, prepend=None, append=None):
        d = self._dim(dim)
        x = self
        if prepend is not None or append is not None:
            from disthook.tensor import cat

            parts = [p for p in (prepend, self, append) if p is not None]
            x = cat([p if p.ndim else p.expand(self.shape[:d] + (1,) + self.shape[d + 1:])
                     for p in parts], d)
        for _ in range(n):
            length = x.shape[d]
            if length == 0:
                break
            if x.dtype == _dtype.bool:
                x = x.narrow(d, 1, length - 1) ^ x.narrow(d, 0, length - 1)
            else:
                x = x.narrow(d, 1, length - 1) - x.narrow(d, 0, length - 1)
        return x

    # ---- order statistics --------------------------------------------------------------------
    def _pick(self, op, name, dim, keepdim, **params):
        if dim is None:
            flat = self.reshape(-1)
            if flat.numel() == 0:
                return flat.new_full((), math.nan)
            return op.apply(flat, dim=0, keepdim=False, **params)[0]
        values, indices = op.apply(self, dim=self._dim(dim), keepdim=keepdim, **params)
        return _values_indices(values, indices, name)

    def median(self, dim=None, keepdim=False):
        floating_kernel(self, "median_cpu" if dim is None else "median_out", "b")
        if dim is None and self.numel():  # one node, ties sharing the gradient (torch's)
            return C.MedianAll.apply(self)
        return self._pick(C.Median, "median", dim, keepdim)

    def nanmedian(self, dim=None, keepdim=False):
        floating_kernel(self, "median_cpu" if dim is None else "median_out", "b")
        if dim is None and self.numel():
            return C.NanmedianAll.apply(self)
        return self._pick(C.Nanmedian, "nanmedian", dim, keepdim)

    def kthvalue(self, k, dim=-1, keepdim=False):
        floating_kernel(self, "kthvalue_cpu", "b")
        return self._pick(C.Kthvalue, "kthvalue", dim, keepdim, k=int(k))

    def mode(self, dim=-1, keepdim=False):
        return self._pick(C.Mode, "mode", dim, keepdim)

    def msort(self):
        return self.sort(0)[0]

    def quantile(self, q, dim=None, keepdim=False, *, interpolation="linear"):
        return _quantile(self, q, dim, keepdim, interpolation, ignore_nan=False)

    def nanquantile(self, q, dim=None, keepdim=False, *, interpolation="linear"):
        return _quantile(self, q, dim, keepdim, interpolation, ignore_nan=True)

    def aminmax(self, *, dim=None, keepdim=False):
        from disthook.tensor import _ValuesIndices

        lo = self.amin(() if dim is None else dim, keepdim)
        hi = self.amax(() if dim is None else dim, keepdim)
        out = _ValuesIndices(lo, hi, "aminmax")
        return out

    # ---- nan-aware and counting reductions -----------------------------------------------------
    def nansum(self, dim=None, keepdim=False, *, dtype=None):
        x = self if dtype is None else self.to(dtype)
        return C.Nansum.apply(x, dim=norm_dims(dim, self.ndim), keepdim=keepdim)

    def nanmean(self, dim=None, keepdim=False, *, dtype=None):
        if not self.is_floating_point():
            raise RuntimeError(f"nanmean(): expected input to have floating point dtype but "
                               f"got {_dtype.scalar_type_name(self.dtype)}")
        count = self.isnan().logical_not().sum(dim, keepdim)
        return self.nansum(dim, keepdim, dtype=dtype) / count

    def count_nonzero(self, dim=None):
        dims = norm_dims(dim, self.ndim)
        return self._make(np.asarray(np.count_nonzero(self._data, axis=dims), np.int64), None, 0)

    def trace(self):
        if self.ndim != 2:
            raise RuntimeError(f"trace: expected a matrix, but got tensor with dim {self.ndim}")
        if self._data.dtype == np.bool_:
            raise NotImplementedError("\"trace\" not implemented for 'Bool'")
        return self.diagonal().sum()

    def dist(self, other, p=2):
        return (self - other).norm(p)

    def histc(self, bins=100, min=0, max=0):
        if self._data.dtype.kind == "c":
            refuse_complex("histc", self)
        floating_kernel(self, "linspace_cpu", "b")
        floating_kernel(self, "histogram_cpu", "iu")
        x = self._data
        lo, hi = builtins.float(min), builtins.float(max)
        if lo == hi and x.size:
            lo, hi = builtins.float(x.min()), builtins.float(x.max())
        if lo == hi:
            lo, hi = lo - 1, hi + 1
        if lo > hi:
            raise RuntimeError("torch.histogram: max must be larger than min")
        inside = x[(x >= lo) & (x <= hi)]
        counts, _ = np.histogram(inside, bins=bins, range=(lo, hi))
        return self._make(counts.astype(x.dtype), None, 0)

    def histogram(self, bins=100, *, range=None, weight=None, density=False):
        from disthook.tensor import _ValuesIndices

        if self._data.dtype.kind == "c":
            refuse_complex("histogram", self)
        b = bins._data if hasattr(bins, "_data") else bins
        w = None if weight is None else weight._data
        hist, edges = np.histogram(self._data, bins=b, range=range, weights=w, density=density)
        out = _ValuesIndices(self._make(hist.astype(self._data.dtype), None, 0),
                             self._make(edges.astype(self._data.dtype), None, 0), "histogram")
        return out

    def bincount(self, weights=None, minlength=0):
        if self.ndim != 1:
            raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
        if self._data.dtype.kind not in "iu" or (self._data < 0).any():
            raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
        w = None if weights is None else weights._data
        out = np.bincount(self._data, weights=w, minlength=minlength)
        # (torch: float32 weights give float32, any other weights float64)
        dt = np.int64 if w is None else (np.float32 if w.dtype == np.float32 else np.float64)
        if weights is None:
            return self._make(out.astype(dt), None, 0)
        from disthook.ops.shape import Bincount  # (torch's node: backward its error)

        return Bincount.apply(weights, result=out.astype(dt))

    def cov(self, *, correction=1, fweights=None, aweights=None):
        x = (self if self.ndim == 2 else self.reshape(1, -1))._floating()
        w = None
        if fweights is not None:
            w = fweights.to(x.dtype)
        if aweights is not None:
            w = aweights.to(x.dtype) if w is None else w * aweights.to(x.dtype)
        if w is None:
            mean = x.mean(1, keepdim=True)
            norm = builtins.max(x.shape[1] - correction, 0)
            weighted = x - mean
        else:
            total = w.sum()
            mean = (x * w).sum(1, keepdim=True) / total
            norm = total - (correction if aweights is None
                            else correction * (w * aweights).sum() / total)
            norm = norm.clamp_min(0)
            weighted = (x - mean) * w
        out = weighted.matmul((x - mean).t().conj()) / norm  # (conj: a no-op when real)
        return out.squeeze() if self.ndim < 2 else out

    def corrcoef(self):
        c = self.cov()
        if c.ndim == 0:
            return c / c
        d = c.diagonal().sqrt()
        return (c / d.unsqueeze(1) / d.unsqueeze(0)).clamp(-1, 1)

    # ---- products -----------------------------------------------------------------------------
    def outer(self, vec2):
        for name, t in (("self", self), ("vec2", vec2)):
            if t.ndim != 1:
                raise RuntimeError(f"outer: Expected 1-D argument {name}, but got {t.ndim}-D")
        return self.unsqueeze(1) * vec2.unsqueeze(0)

    ger = outer

    def inner(self, other):
        if self.ndim == 0 or other.ndim == 0:
            return self * other
        from disthook import tensordot

        return tensordot(self, other, ([-1], [-1]))

    def vdot(self, other):
        return self.conj().dot(other)  # (the first conjugated: a no-op for a real tensor)

    def kron(self, other):
        n = builtins.max(self.ndim, other.ndim)
        a = self.reshape((1,) * (n - self.ndim) + tuple(self.shape))
        b = other.reshape((1,) * (n - other.ndim) + tuple(other.shape))
        a_shape, b_shape = [], []
        for sa, sb in zip(a.shape, b.shape):
            a_shape += [sa, 1]
            b_shape += [1, sb]
        out = a.reshape(a_shape) * b.reshape(b_shape)
        return out.reshape(tuple(sa * sb for sa, sb in zip(a.shape, b.shape)))

    def cross(self, other, dim=None):
        from disthook.tensor import stack

        shape = tuple(np.broadcast_shapes(self.shape, other.shape))
        a, b = self.expand(shape), other.expand(shape)
        if dim is None:
            dim = next((d for d, n in enumerate(shape) if n == 3), None)
            if dim is None:
                raise RuntimeError("no dimension of size 3 in input")
        d = a._dim(dim)
        if shape[d] != 3:
            raise RuntimeError(f"linalg.cross: inputs dimension {dim} must have length 3. Got "
                               f"{self.shape[d] if self.ndim > d else 0} and "
                               f"{other.shape[d] if other.ndim > d else 0}")
        if a._data.dtype == np.bool_:
            raise NotImplementedError("\"cross\" not implemented for 'Bool'")
        a0, a1, a2 = a.unbind(d)
        b0, b1, b2 = b.unbind(d)
        return stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], d)

    @cpu_policy.covered(cpu_policy.LOWER)
    def addmm(self, mat1, mat2, *, beta=1, alpha=1):
        from disthook.tensor import Tensor

        if (beta == 1 and alpha == 1 and isinstance(mat1, Tensor) and isinstance(mat2, Tensor)
                and mat1.ndim == 2 and mat2.ndim == 2 and mat1.shape[1] == mat2.shape[0]
                and self._data.dtype == mat1._data.dtype == mat2._data.dtype != _bf16.BF16
                and self._data.dtype.kind in "fc" and np.broadcast_shapes(
                    self._data.shape, (mat1.shape[0], mat2.shape[1]))
                == (mat1.shape[0], mat2.shape[1])):
            from disthook.ops.linalg import Addmm  # the op torch records (AddmmBackward0),
            return Addmm.apply(self, mat1, mat2)  # half's rounded once, as torch's kernel
        return _bf16.rounded_once(lambda s, x, y: _scaled_sum(s, x.mm(y), beta, alpha),
                                  self, mat1, mat2)

    def addmv(self, mat, vec, *, beta=1, alpha=1):
        return _bf16.rounded_once(lambda s, x, y: _scaled_sum(s, x.mv(y), beta, alpha),
                                  self, mat, vec)

    def addr(self, vec1, vec2, *, beta=1, alpha=1):
        return _bf16.rounded_once(lambda s, x, y: _scaled_sum(s, x.outer(y), beta, alpha),
                                  self, vec1, vec2)

    @cpu_policy.covered(cpu_policy.LOWER)
    def addbmm(self, batch1, batch2, *, beta=1, alpha=1):
        # torch's kernel sums the batch's products as addmm's: in their dtype, no bool
        _refuse_bool_batches("addmm_impl_cpu_", self, batch1)
        return _bf16.rounded_once(
            lambda s, x, y: _scaled_sum(s, x.bmm(y).sum(0, dtype=x.dtype), beta, alpha),
            self, batch1, batch2)

    @cpu_policy.covered(cpu_policy.LOWER)
    def baddbmm(self, batch1, batch2, *, beta=1, alpha=1):
        _refuse_bool_batches("baddbmm", self, batch1)
        return _bf16.rounded_once(lambda s, x, y: _scaled_sum(s, x.bmm(y), beta, alpha),
                                  self, batch1, batch2)

    def matrix_power(self, n):
        from disthook import linalg

        return linalg.matrix_power(self, n)

    def matrix_exp(self):
        from disthook import linalg

        return linalg.matrix_exp(self)

    def det(self):
        from disthook import linalg

        return linalg.det(self)

    def logdet(self):
        from disthook import linalg

        sign, logabs = linalg.slogdet(self)  # NaN where det < 0; -inf (slogdet's) where 0
        return logabs.where(sign != -1, logabs.new_full((), math.nan))

    def slogdet(self):
        from disthook import linalg

        return linalg.slogdet(self)

    def inverse(self):
        from disthook import linalg

        return linalg.inv(self)

    def pinverse(self, rcond=1e-15):
        from disthook import linalg

        return linalg.pinv(self, rtol=rcond)

    def cholesky(self, upper=False):
        from disthook import linalg

        lower = linalg.cholesky(self)
        return lower.mT if upper else lower

    def qr(self, some=True):
        from disthook import linalg

        return linalg.qr(self, "reduced" if some else "complete")

    def svd(self, some=True, compute_uv=True):
        from disthook import linalg

        u, s, vh = linalg.svd(self, full_matrices=not some)
        return _values_indices(u, s, "svd") + (vh.mT,)


    def cholesky_inverse(self, upper=False):
        low = self.mT if upper else self
        return low.matmul(low.mT).inverse()

    def cholesky_solve(self, input2, upper=False):
        from disthook import linalg

        return linalg._cholesky_solve(self, input2, upper)  # (torch.linalg has none)

    def triangular_solve(self, A, upper=True, transpose=False, unitriangular=False):
        from disthook import linalg

        T = A.mT if transpose else A
        x = linalg.solve_triangular(T, self, upper=upper != transpose,
                                    unitriangular=unitriangular)
        return linalg._Result(("solution", "cloned_coefficient"), (x, A.clone()))

    def lu(self, pivot=True, get_infos=False):
        from disthook import lu

        return lu(self, pivot, get_infos)

    def lu_solve(self, LU_data, LU_pivots):
        from disthook import linalg

        return linalg.lu_solve(LU_data, LU_pivots, self)

    def geqrf(self):
        from disthook import geqrf

        return geqrf(self)

    def orgqr(self, input2):
        from disthook import orgqr

        return orgqr(self, input2)

    def ormqr(self, input2, input3, left=True, transpose=False):
        from disthook import ormqr

        return ormqr(self, input2, input3, left, transpose)

    # removed from torch in 1.9: torch raises, saying what replaced each
    def solve(self, *args, **kwargs):
        raise RuntimeError(_REMOVED.format("solve", "torch.linalg.solve(A, B) (its arguments are "
                                                    "in the other order)"))

    def lstsq(self, *args, **kwargs):
        raise RuntimeError(_REMOVED.format("lstsq", "torch.linalg.lstsq(A, B) (its arguments "
                                                    "are in the other order)"))

    def symeig(self, *args, **kwargs):
        raise RuntimeError(_REMOVED.format("symeig", "torch.linalg.eigh or torch.linalg."
                                                     "eigvalsh"))

    def eig(self, *args, **kwargs):
        raise RuntimeError(_REMOVED.format("eig", "torch.linalg.eig, whose results are complex"
                                                  " (not supported by disthook); for symmetric "
                                                  "matrices torch.linalg.eigh"))


_REMOVED = "torch.{} was removed in torch 1.9 (deprecated since then); use {} instead."


def _scaled_sum(self, product, beta, alpha):
    """beta * self + alpha * product; beta == 0 ignores self (nan and inf included), as torch."""
    prod = product if alpha == 1 else product * alpha
    if beta == 0:
        return prod + self.new_zeros(()).expand(self.shape) * 0
    return (self if beta == 1 else self * beta) + prod


def _quantile(x, q, dim, keepdim, interpolation, ignore_nan):
    from disthook.tensor import Tensor, stack, tensor

    # torch's checks, in its order, each naming quantile() (nanquantile's too)
    scalar_q = not isinstance(q, Tensor)
    if scalar_q and not 0 <= q <= 1:
        raise RuntimeError(f"quantile() q must be in the range [0, 1] but got {q}")
    if interpolation not in ("linear", "lower", "higher", "midpoint", "nearest"):
        raise RuntimeError("quantile() interpolation must be one of linear, lower, higher, "
                           f"midpoint or nearest, but got {interpolation}")
    if x.numel() == 0:
        raise RuntimeError("quantile() input tensor must be non-empty")
    if x._data.dtype not in (np.float32, np.float64):  # (no half, bfloat16 or integers)
        raise RuntimeError("quantile() input tensor must be either float or double dtype")
    qs = tensor(q, dtype=x.dtype) if scalar_q else q
    if qs.ndim > 1:
        raise RuntimeError("quantile() q must be a scalar or 1D tensor")
    if qs._data.dtype != x._data.dtype:
        raise RuntimeError("quantile() q tensor must be same dtype as the input tensor")
    if bool(((qs._data < 0) | (qs._data > 1)).any()):
        raise RuntimeError("quantile() q values must be in the range [0, 1]")
    src = x.reshape(-1) if dim is None else x.movedim(x._dim(dim), -1)
    values = src.sort(-1)[0]  # nans sort last
    n = values.shape[-1]
    valid = values.isnan().logical_not().sum(-1, keepdim=True).to(x.dtype) if ignore_nan else \
        values.new_full(values.shape[:-1] + (1,), n)
    outs = []
    for qv in qs.reshape(-1).tolist():
        pos = (valid - 1).clamp_min(0) * qv
        lo, hi = pos.floor(), pos.ceil()
        if interpolation == "lower":
            hi = lo
        elif interpolation == "higher":
            lo = hi
        elif interpolation == "nearest":
            lo = hi = pos.round()
        v_lo = values.gather(-1, lo.long())
        v_hi = values.gather(-1, hi.long())
        if interpolation == "midpoint":
            weight = (hi > lo).to(x.dtype) * 0.5
        else:
            weight = pos - lo
        out = v_lo + weight * (v_hi - v_lo)
        if not ignore_nan:
            out = out.where(values.isnan().any(-1, keepdim=True).logical_not(),
                            out.new_full((), math.nan))
        else:
            out = out.where(valid > 0, out.new_full((), math.nan))
        out = out.squeeze(-1)
        if keepdim:
            if dim is None:
                out = out.reshape((1,) * x.ndim)
            else:
                out = out.unsqueeze(x._dim(dim))
        outs.append(out)
    if scalar_q:
        return outs[0]
    return stack(outs, 0).reshape(tuple(qs.shape) + tuple(outs[0].shape))


def _refuse_bool_batches(kernel: str, out, batch1) -> None:
    """torch's error for bool batches of ``addbmm``/``baddbmm`` (its ``kernel``)."""
    data = getattr(batch1, "_data", None)
    if data is not None and data.dtype == np.bool_ and data.ndim == 3:
        refuse_bool(kernel, data, out._data.size, data.shape[-1])
