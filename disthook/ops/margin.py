"""Ops torch records as one node: the soft-margin, multi-class margin and multi-label margin
losses, and ``pdist``.

Soft margin differentiates again. Torch gives the multi-margin losses and ``pdist`` a
gradient it cannot differentiate; so do we: their gradient is computed in numpy by a node
whose own backward raises torch's error, never a silent zero.
"""
from __future__ import annotations

import numpy as np

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


class Pdist(Op):
    """The ``p``-norm distance between every pair of rows ``i < j`` of an ``(N, M)`` input,
    in row-major pair order."""

    @staticmethod
    def forward(ctx, x, p=2.0):
        ctx.save_for_backward(x)
        xd = x._data
        i, j = np.triu_indices(xd.shape[0], k=1)
        diff = xd[i] - xd[j]
        a = np.abs(diff)
        if p == 0:
            dist = (a != 0).sum(1).astype(xd.dtype)
        elif np.isinf(p):
            dist = a.max(1, initial=0)
        else:
            dist = (a ** p).sum(1) ** (1 / p)
        if ctx.needs_input_grad:
            ctx.grad = _pdist_grad(xd, i, j, diff, dist, p)
        return dist.astype(xd.dtype, copy=False)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return PdistRows.apply(g, x, grad=ctx.grad)


def _pdist_grad(x, i, j, diff, dist, p) -> tuple:
    """d dist[k] / d x[i[k]] per pair (the gradient for x[j[k]] is its negative)."""
    a = np.abs(diff)
    safe = np.where(dist == 0, 1, dist)[:, None]
    if p == 0:
        d = np.zeros_like(diff)
    elif p == 1:
        d = np.sign(diff)
    elif np.isinf(p):
        d = np.sign(diff) * (a == dist[:, None])
    elif p < 1:
        d = np.where(a == 0, 0, np.sign(diff) * (a / safe) ** (p - 1))
    else:
        d = np.sign(diff) * (a / safe) ** (p - 1)
    d = np.where(dist[:, None] == 0, 0, d)
    return (d.astype(x.dtype), i, j, x.shape)


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
        raise RuntimeError("the derivative for '_pdist_backward' is not implemented.")
