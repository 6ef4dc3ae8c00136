"""Ops torch records as one node: the soft-margin, multi-class margin and multi-label margin
losses, ``pdist`` and ``cdist``.

Soft margin differentiates again. Torch gives the multi-margin losses, ``pdist`` and
``cdist`` (but for its matrix-product form, composed in ``disthook._functions``) a
gradient it cannot differentiate; so do we: their gradient is computed in numpy by a node
whose own backward raises torch's error, never a silent zero.
"""
from __future__ import annotations

import numpy as np

from disthook import _dtype
from disthook.ops.base import Op
from disthook.ops.loss import _reduce


class SoftMarginLoss(Op):
    """``log(1 + exp(-target * input))``, reduced."""

    saved_names = ("self", "target")

    @staticmethod
    def forward(ctx, x, t, reduction="mean"):
        ctx.save_for_backward(x, t)
        ctx.reduction, ctx.numel = reduction, x._data.size
        values = np.logaddexp(0, -t._data * x._data).astype(x._data.dtype, copy=False)
        return _reduce(values, reduction)

    @staticmethod
    def backward(ctx, g):
        x, t = ctx.saved_tensors
        if ctx.reduction == "mean":
            g = g / ctx.numel
        return -t * (-t * x).sigmoid() * g, None


class _NumpyGrad(Op):
    """A gradient computed in numpy: ``g`` (the incoming gradient, reduced) times a saved
    array. Torch has no derivative of this gradient; asking for one is its error."""

    aten = ""

    @classmethod
    def forward(cls, ctx, g, input, grad, reduced):
        # (``input`` is taken so that the gradient depends on it, as torch's does: asking
        # for its derivative reaches ``backward`` and torch's error)
        scale = g._data if reduced else g._data.reshape(g._data.shape + (1,) * (
            grad.ndim - g._data.ndim))
        return (grad * scale).astype(grad.dtype, copy=False)

    @classmethod
    def backward(cls, ctx, h):
        raise RuntimeError(f"derivative for aten::{cls.aten} is not implemented")


class MultiMarginLossGrad(_NumpyGrad):
    node_name = "MultiMarginLossBackwardBackward0"
    aten = "multi_margin_loss_backward"


class MultilabelMarginLossGrad(_NumpyGrad):
    node_name = "MultilabelMarginLossBackwardBackward0"
    aten = "multilabel_margin_loss_backward"


def _finish(ctx, values: np.ndarray, grad: np.ndarray, reduction: str) -> np.ndarray:
    """Reduce per-sample ``values``; keep the matching per-sample ``grad`` for backward."""
    if reduction == "mean":
        grad = grad / max(values.size, 1)
    ctx.grad, ctx.reduced = grad, reduction != "none"
    return _reduce(values, reduction)


class MultiMarginLoss(Op):
    """Per sample: ``sum over i != y of max(0, margin - x[y] + x[i]) ** p / C``, times
    ``weight[y]``; ``x`` is ``(N, C)`` or ``(C,)``."""

    @staticmethod
    def forward(ctx, x, target, p=1, margin=1.0, weight=None, reduction="mean"):
        ctx.save_for_backward(x)
        xd = x._data
        rows = xd.reshape(-1, xd.shape[-1])
        n, c = rows.shape
        y = target.reshape(-1)
        picked = rows[np.arange(n), y][:, None]
        z = margin - picked + rows
        active = z > 0
        active[np.arange(n), y] = False
        w = np.ones(n, dtype=xd.dtype) if weight is None else weight[y].astype(xd.dtype)
        values = (np.where(active, z ** p, 0).sum(1) * w / c).astype(xd.dtype)
        dz = np.where(active, p * z ** (p - 1) if p != 1 else 1.0, 0) * (w / c)[:, None]
        grad = dz.copy()
        grad[np.arange(n), y] -= dz.sum(1)
        values = values.reshape(xd.shape[:-1])
        return _finish(ctx, values, grad.reshape(xd.shape).astype(xd.dtype), reduction)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return MultiMarginLossGrad.apply(g, x, grad=ctx.grad, reduced=ctx.reduced)


class MultilabelMarginLoss(Op):
    """Per sample: ``sum over target classes j and other classes i of
    max(0, 1 - (x[j] - x[i])) / C``; a sample's targets are the indices before its first -1."""

    node_name = "MultilabelMarginLossBackward0"

    @staticmethod
    def forward(ctx, x, target, reduction="mean"):
        ctx.save_for_backward(x)
        xd = x._data
        rows = xd.reshape(-1, xd.shape[-1])
        t = target.reshape(rows.shape)
        n, c = rows.shape
        # a label counts while no -1 came before it in its row
        valid = np.cumprod(t >= 0, axis=1).astype(bool)
        is_target = np.zeros((n, c), dtype=bool)
        r, k = np.nonzero(valid)
        is_target[r, t[r, k]] = True
        # z[n, j, i] = 1 - x[j] + x[i] for target j and non-target i
        z = 1 - rows[:, :, None] + rows[:, None, :]
        pair = is_target[:, :, None] & ~is_target[:, None, :]
        active = pair & (z > 0)
        values = (np.where(active, z, 0).sum((1, 2)) / c).astype(xd.dtype)
        grad = (active.sum(1) - active.sum(2)) / c  # + for x[i], - for x[j]
        values = values.reshape(xd.shape[:-1])
        return _finish(ctx, values, grad.reshape(xd.shape).astype(xd.dtype), reduction)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return MultilabelMarginLossGrad.apply(g, x, grad=ctx.grad, reduced=ctx.reduced)


def check_distance_dtypes(name: str, x1, x2=None, by_product: bool = False) -> None:
    """torch's dtype checks of ``cdist`` (``x1``, ``x2``) and ``pdist`` (``x1``): floating
    inputs only; then, but for cdist's matrix-product form (``by_product``: it computes
    half and bfloat16, and its operands must have one dtype as ``mm``'s), no half or
    bfloat16 kernel (named by ``x1``'s) and one dtype for both."""
    s = _dtype.scalar_type_name
    for label, t in (("X1", x1), ("X2", x2)):
        if t is not None and not t.is_floating_point():
            raise RuntimeError(f"{name} only supports floating-point dtypes"
                               + (f", {label} got: {s(t.dtype)}" if x2 is not None else ""))
    if by_product:
        from disthook.ops.linalg import check_same_dtype

        check_same_dtype(x1, x2, "mm")
        return
    if x1.dtype in (_dtype.float16, _dtype.bfloat16):
        raise NotImplementedError(f"\"{name}\" not implemented for '{s(x1.dtype)}'; convert "
                                  "the input with .float() first")
    if x2 is not None and x2.dtype != x1.dtype:
        raise RuntimeError(f"expected scalar type {s(x1.dtype)} but found {s(x2.dtype)}")


class Pdist(Op):
    """The ``p``-norm distance between every pair of rows ``i < j`` of an ``(N, M)`` input,
    in row-major pair order."""

    @staticmethod
    def forward(ctx, x, p=2.0):
        ctx.save_for_backward(x)
        xd = x._data
        i, j = np.triu_indices(xd.shape[0], k=1)
        diff = xd[i] - xd[j]
        dist = _pnorm(np.abs(diff), p)
        if ctx.needs_input_grad:
            ctx.grad = _pdist_grad(xd, i, j, diff, dist, p)
        return dist.astype(xd.dtype, copy=False)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return PdistRows.apply(g, x, grad=ctx.grad)


def _pdist_grad(x, i, j, diff, dist, p) -> tuple:
    """d dist[k] / d x[i[k]] per pair (the gradient for x[j[k]] is its negative)."""
    return (_distance_grad(diff, dist, p).astype(x.dtype), i, j, x.shape)


def _distance_grad(diff, dist, p):
    """d dist / d diff for ``dist`` the ``p``-norm of ``diff`` over its last axis, with
    torch's rules: zero where the distance is zero (and, below p=1, where the difference
    is), and for p=inf the whole gradient to every coordinate at the maximum."""
    a = np.abs(diff)
    dist = dist[..., None]
    safe = np.where(dist == 0, 1, dist)
    if p == 0:
        d = np.zeros_like(diff)
    elif p == 1:
        d = np.sign(diff)
    elif np.isinf(p):
        d = np.sign(diff) * (a == dist)
    elif p < 1:
        with np.errstate(divide="ignore"):
            d = np.where(a == 0, 0, np.sign(diff) * (a / safe) ** (p - 1))
    else:
        d = np.sign(diff) * (a / safe) ** (p - 1)
    return np.where(dist == 0, 0, d)


def _pnorm(a, p):
    """The ``p``-norm over the last axis of ``a``, non-negative."""
    if p == 0:
        return (a != 0).sum(-1).astype(a.dtype)
    if np.isinf(p):
        return a.max(-1, initial=0)
    return (a ** p).sum(-1) ** (1 / p)


class Cdist(Op):
    """The ``p``-norm distance between each row of ``x1`` (..., P, M) and each row of ``x2``
    (..., R, M), batch dimensions broadcast: (..., P, R). Torch's form that is not a
    matrix product: its gradient has no derivative."""

    @staticmethod
    def forward(ctx, x1, x2, p=2.0):
        ctx.save_for_backward(x1, x2)
        diff = x1._data[..., :, None, :] - x2._data[..., None, :, :]
        dist = _pnorm(np.abs(diff), p)
        if ctx.needs_input_grad:
            ctx.grad = _distance_grad(diff, dist, p).astype(diff.dtype, copy=False)
        return dist.astype(diff.dtype, copy=False)

    @staticmethod
    def backward(ctx, g):
        x1, x2 = ctx.saved_tensors
        return CdistRows.apply(g, x1, x2, grad=ctx.grad)


class CdistRows(Op):
    """Gradient of ``cdist`` for both inputs, from the saved d dist / d diff."""

    node_name = "CdistBackwardBackward0"

    @staticmethod
    def forward(ctx, g, x1, x2, grad):
        contrib = grad * g._data[..., None]
        g1, g2 = contrib.sum(-2), 0.0 - contrib.sum(-3)
        return (_sum_batch(g1, x1._data.shape), _sum_batch(g2, x2._data.shape))

    @staticmethod
    def backward(ctx, *h):
        raise NotImplementedError("the derivative for '_cdist_backward' is not implemented.")


def _sum_batch(g, shape):
    """Sum a gradient over the batch dimensions broadcasting added to its input's."""
    lead = g.ndim - len(shape)
    g = g.sum(tuple(range(lead))) if lead else g
    dims = tuple(k for k, n in enumerate(shape[:-2]) if n == 1 and g.shape[k] != 1)
    return g.sum(dims, keepdims=True) if dims else g


class PdistRows(Op):
    """Gradient of ``pdist``: each pair's gradient added to its two rows."""

    node_name = "PdistBackwardBackward0"

    @staticmethod
    def forward(ctx, g, input, grad):
        d, i, j, shape = grad
        contrib = d * g._data[:, None]
        out = np.zeros(shape, dtype=d.dtype)
        np.add.at(out, i, contrib)
        np.add.at(out, j, -contrib)
        return out

    @staticmethod
    def backward(ctx, h):
        raise NotImplementedError("the derivative for '_pdist_backward' is not implemented.")
