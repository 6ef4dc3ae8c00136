"""Loss ops that torch records as one node of their own (``MseLossBackward0``,
``NllLossBackward0``, ``BinaryCrossEntropyBackward0``, ...).

Forward works on numpy and checks its input the way torch's kernel does; backward is
written in disthook ops, so it differentiates again (``create_graph=True``). Cross entropy
over class indices is one fused node (log-softmax and NLL together), named as torch names
the last node of its pair, ``NllLossBackward0``; its backward computes
``softmax - onehot`` straight in numpy unless a graph of the backward is being recorded.
"""
from __future__ import annotations

import numpy as np

from disthook import _dtype
from disthook.autograd import grad_mode
from disthook.ops._bf16 import HALVES
from disthook.ops.base import Op
from disthook.ops.elementwise import Div
from disthook.ops.shape import ScatterAlong

REDUCTIONS = ("none", "mean", "sum")
BCE_EPS = 1e-12  # torch's floor for x * (1 - x) in the BCE gradient
LOG_FLOOR = -100.0  # torch clamps BCE's logs here, so a 0 or 1 prediction gives a finite loss


def _reduce(values: np.ndarray, reduction: str) -> np.ndarray:
    if reduction == "mean":
        return np.asarray(values.mean(), dtype=values.dtype)
    if reduction == "sum":
        return np.asarray(values.sum(), dtype=values.dtype)
    return values


def _reduced_grad(ctx, g):
    """The incoming gradient spread over the elements: ``g / numel`` for a mean."""
    return g / ctx.numel if ctx.reduction == "mean" else g


def _pair_grads(ctx, grad):
    """(d input, d target) of a loss of ``input - target``."""
    need = ctx.needs_input_grad
    return (grad if need[0] else None), (-grad if need[1] else None)


def _constant(array: np.ndarray):
    from disthook.tensor import Tensor

    return Tensor._make(array, None, 0)


class DivByCount(Div):
    """A loss divided by its element count inside torch's C++ (``DivBackward1``)."""

    node_name = "DivBackward1"


# ---- regression losses ----------------------------------------------------------------------

class MseLoss(Op):
    """``(input - target) ** 2``, reduced; both operands have the same shape and dtype."""

    @staticmethod
    def forward(ctx, input, target, reduction="mean"):
        ctx.save_for_backward(input, target)
        ctx.reduction, ctx.numel = reduction, input._data.size
        diff = input._data - target._data
        return _reduce(diff * diff, reduction)

    @staticmethod
    def backward(ctx, g):
        input, target = ctx.saved_tensors
        return _pair_grads(ctx, (input - target) * (_reduced_grad(ctx, g) * 2.0))


class SmoothL1Loss(Op):
    """``0.5 d**2 / beta`` where ``|d| < beta``, else ``|d| - 0.5 beta``; ``d = input - target``."""

    @staticmethod
    def forward(ctx, input, target, reduction="mean", beta=1.0):
        ctx.save_for_backward(input, target)
        ctx.reduction, ctx.numel, ctx.beta = reduction, input._data.size, beta
        diff = input._data - target._data
        abs_diff = np.abs(diff)
        loss = np.where(abs_diff < beta, 0.5 * diff * diff / beta, abs_diff - 0.5 * beta)
        return _reduce(loss.astype(diff.dtype, copy=False), reduction)

    @staticmethod
    def backward(ctx, g):
        input, target = ctx.saved_tensors
        slope = ((input - target) / ctx.beta).clamp(-1.0, 1.0)
        return _pair_grads(ctx, slope * _reduced_grad(ctx, g))


class HuberLoss(Op):
    """``0.5 d**2`` where ``|d| <= delta``, else ``delta (|d| - 0.5 delta)``: SmoothL1 * delta."""

    @staticmethod
    def forward(ctx, input, target, reduction="mean", delta=1.0):
        ctx.save_for_backward(input, target)
        ctx.reduction, ctx.numel, ctx.delta = reduction, input._data.size, delta
        diff = input._data - target._data
        abs_diff = np.abs(diff)
        loss = np.where(abs_diff <= delta, 0.5 * diff * diff, delta * (abs_diff - 0.5 * delta))
        return _reduce(loss.astype(diff.dtype, copy=False), reduction)

    @staticmethod
    def backward(ctx, g):
        input, target = ctx.saved_tensors
        slope = (input - target).clamp(-ctx.delta, ctx.delta)
        return _pair_grads(ctx, slope * _reduced_grad(ctx, g))


# ---- binary cross entropy ---------------------------------------------------------------------

class BinaryCrossEntropy(Op):
    """``-w (t log x + (1 - t) log(1 - x))`` with the logs clamped at -100, as torch does."""

    @staticmethod
    def forward(ctx, input, target, weight=None, reduction="mean"):
        x, t = input._data, target._data
        if not ((x >= 0) & (x <= 1)).all():  # NaN fails too
            raise RuntimeError("all elements of input should be between 0 and 1")
        ctx.save_for_backward(input, target)
        ctx.weight, ctx.reduction, ctx.numel = weight, reduction, x.size
        with np.errstate(divide="ignore"):
            log_x = np.maximum(np.log(x), LOG_FLOOR)
            log_1mx = np.maximum(np.log1p(-x), LOG_FLOOR)
        loss = -(t * log_x + (1 - t) * log_1mx)
        if weight is not None:
            loss = loss * weight
        return _reduce(loss.astype(x.dtype, copy=False), reduction)

    @staticmethod
    def backward(ctx, g):
        x, t = ctx.saved_tensors
        g = _reduced_grad(ctx, g)
        if ctx.weight is not None:
            g = g * _constant(ctx.weight)
        need = ctx.needs_input_grad
        gx = gt = None
        if need[0]:
            gx = g * (x - t) / ((1 - x) * x).clamp_min(BCE_EPS)
        if need[1]:
            gt = g * ((-x).log1p().clamp_min(LOG_FLOOR) - x.log().clamp_min(LOG_FLOOR))
        return gx, gt


class BinaryCrossEntropyWithLogits(Op):
    """``w ((1 - t) x - (1 + (p - 1) t) log_sigmoid(x))``, stable for large ``|x|``."""

    @staticmethod
    def forward(ctx, input, target, weight=None, pos_weight=None, reduction="mean"):
        x, t = input._data, target._data
        ctx.save_for_backward(input, target)
        ctx.weight, ctx.pos_weight = weight, pos_weight
        ctx.reduction, ctx.numel = reduction, x.size
        # -log_sigmoid(x) = log(1 + exp(-|x|)) + max(-x, 0): exp of a non-positive number only
        neg_log_sigmoid = np.log1p(np.exp(-np.abs(x))) + np.maximum(-x, 0)
        log_weight = 1 if pos_weight is None else 1 + (pos_weight - 1) * t
        loss = (1 - t) * x + log_weight * neg_log_sigmoid
        if weight is not None:
            loss = loss * weight
        return _reduce(loss.astype(np.result_type(x, t), copy=False), reduction)

    @staticmethod
    def backward(ctx, g):
        x, t = ctx.saved_tensors
        g = _reduced_grad(ctx, g)
        if ctx.weight is not None:
            g = g * _constant(ctx.weight)
        pos_weight = None if ctx.pos_weight is None else _constant(ctx.pos_weight)
        need = ctx.needs_input_grad
        gx = gt = None
        if need[0]:
            if pos_weight is None:
                gx = g * (x.sigmoid() - t)
            else:
                pt = pos_weight * t
                gx = g * ((pt + 1 - t) * x.sigmoid() - pt)
        if need[1]:
            if pos_weight is None:
                gt = -g * x
            else:
                log_sigmoid = -((-x).relu() + (-x.abs()).exp().log1p())
                gt = -g * (x + (pos_weight - 1) * log_sigmoid)
        return gx, gt


# ---- negative log likelihood and cross entropy over class indices ----------------------------

def _nll_check(x: np.ndarray, t: np.ndarray, weight, nd: bool) -> None:
    """The checks of torch's nll_loss / nll_loss2d kernels, in their order."""
    if nd:
        if t.ndim != 3:
            raise RuntimeError("only batches of spatial targets supported (3D tensors) but got "
                               f"targets of dimension: {t.ndim}")
        if weight is not None and weight.size != x.shape[1]:
            raise RuntimeError("weight tensor should be defined either for all or no classes")
        if (x.shape[0], *x.shape[2:]) != t.shape:
            raise RuntimeError(f"size mismatch (got input: {list(x.shape)} , target: "
                               f"{list(t.shape)}")
    else:
        if t.ndim > 1:
            raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")
        if x.ndim == 1 and t.ndim == 1 and t.shape[0] != 1:
            raise ValueError("For 1D input, 1D target must have size 1, but got target size: "
                             f"{t.shape[0]}")
        n_classes = x.shape[-1]
        if weight is not None and (weight.ndim != 1 or weight.size != n_classes):
            raise RuntimeError(
                f"weight tensor should be defined either for all {n_classes} classes or no "
                f"classes but got weight tensor of shape: {list(weight.shape)}")
    if _dtype.kind(x.dtype) != "f":
        raise NotImplementedError(f'"nll_loss_out_frame" not implemented for \'{_type_name(x)}\'')
    if t.dtype not in (np.int64, np.uint8):
        raise RuntimeError(f"expected target dtype to be Long or Byte, but got {_type_name(t)}")
    if weight is not None and weight.dtype != x.dtype:
        raise RuntimeError(
            f"expected scalar type {_type_name(x)} but found {_type_name(weight)}")


def _type_name(array: np.ndarray) -> str:
    """torch's ScalarType name of an array's dtype: ``Float``, ``Long``."""
    return _dtype.scalar_type_name(_dtype.from_numpy_dtype(array.dtype))


def _class_index(ctx, t: np.ndarray, shape: tuple, ignore_index: int) -> tuple:
    """Check the class indices ``t`` for input of ``shape`` (classes on dim 1, or 0 for 1-D
    input); returns (valid, classes, index): the not-ignored mask, the classes with 0 where
    ignored, and those as an index along the class dim. Backward's fields go on ``ctx``."""
    class_dim = 1 if len(shape) > 1 else 0
    valid = t != ignore_index
    classes = np.where(valid, t, 0)
    bad = t[valid & ((classes < 0) | (classes >= shape[class_dim]))]
    if bad.size:
        raise IndexError(f"Target {bad.flat[0]} is out of bounds.")
    index = np.expand_dims(classes, class_dim)
    ctx.class_dim, ctx.index, ctx.in_shape = class_dim, index, shape
    return valid, classes, index


def _nll_reduce(ctx, picked: np.ndarray, valid, classes, weight, reduction: str,
                nd: bool = False) -> np.ndarray:
    """``-w[t] * picked``, reduced (a mean divides by the sum of ``w[t]``); stores on ``ctx``
    each picked value's coefficient in the output (0 where the target is ignored)."""
    dtype = picked.dtype
    if dtype in HALVES and reduction != "none":
        return _nll_reduce_half(ctx, picked, valid, classes, weight, reduction, nd)
    w = valid.astype(dtype) if weight is None else np.where(valid, weight[classes], 0)
    w = w.astype(dtype, copy=False)
    losses = -picked * w
    if reduction == "none":
        ctx.coef = w
        return losses
    if reduction == "sum":
        ctx.coef = w
        return np.asarray(losses.sum(), dtype=dtype)
    total = w.sum(dtype=dtype)
    with np.errstate(divide="ignore", invalid="ignore"):  # all ignored: nan, as in torch
        ctx.coef = np.where(valid, w / total, 0).astype(dtype, copy=False)
        return np.asarray(losses.sum(dtype=dtype) / total, dtype=dtype)


CASCADE_LEVELS = 8  # torch's CPU nll_loss: partial sums on 8 levels, in the input's dtype


def _nll_reduce_half(ctx, picked, valid, classes, weight, reduction: str, nd: bool):
    """``_nll_reduce`` for float16 / bfloat16 ``picked`` as torch's CPU kernel sums: a
    cascade of partial sums kept in the half dtype (every addition rounded), each level
    flushed into the next every 2**power samples; a mean divides by the count (the summed
    weights where weighted or ``nd``), in the half dtype too."""
    dtype = picked.dtype

    def rnd(v):
        return np.asarray(v, np.float32).astype(dtype).astype(np.float32)

    keep = np.asarray(valid).reshape(-1)
    where = np.flatnonzero(keep)
    values = picked.reshape(-1).astype(np.float32)[where]
    w_all = np.where(valid, 1 if weight is None else np.asarray(weight)[classes], 0)
    ctx.coef = np.asarray(w_all, np.float32).astype(dtype)
    w = None if weight is None else rnd(np.asarray(weight, np.float32))[
        np.asarray(classes).reshape(-1)[where]]
    flushes = _cascade_flushes(where, keep.size)
    out = _cascade_sum(values if w is None else rnd(values * w), flushes, rnd, -1)
    if reduction == "sum":
        return np.asarray(out).astype(dtype)
    if weight is None and not nd:
        total = rnd(where.size)
    else:
        total = _cascade_sum(np.ones_like(values) if w is None else w, flushes, rnd, 1)
    # backward divides the gradient by it first, as torch, and leaves ignored targets at 0
    ctx.half_total, ctx.half_valid = float(total), valid
    with np.errstate(divide="ignore", invalid="ignore"):  # all ignored: nan, as in torch
        return np.asarray(out / total).astype(dtype)


def _cascade_flushes(positions: np.ndarray, n: int) -> np.ndarray:
    """How many levels torch's cascade flushes after adding the sample at each of
    ``positions`` (of ``n``): one more for each group of ``power`` low bits that is zero."""
    power = max(4, int(np.ceil(np.log2(n))) // CASCADE_LEVELS if n > 1 else 0)
    mask = (1 << power) - 1
    levels = np.zeros(positions.size, dtype=np.int64)
    still = np.ones(positions.size, dtype=bool)
    for j in range(CASCADE_LEVELS - 1):
        still &= ((positions >> (j * power)) & mask) == 0
        levels += still
    return levels


def _cascade_sum(items: np.ndarray, flushes: np.ndarray, rnd, sign: int) -> np.float32:
    """The cascade's result: level 0 adds ``sign * items`` one by one (rounded each time);
    each level's partial sum goes into the next where ``flushes`` says, and what is left on
    the levels is added up, lowest first."""
    left = []
    for level in range(CASCADE_LEVELS):
        ends = flushes > level if level < CASCADE_LEVELS - 1 else np.zeros(items.size, bool)
        segment = np.concatenate([[0], np.cumsum(ends)[:-1]]).astype(np.int64)
        count = int(ends.sum()) + 1
        start = np.searchsorted(segment, np.arange(count))
        column = np.arange(items.size) - start[segment]
        block = np.zeros((count, int(column.max(initial=0)) + 1), dtype=np.float32)
        block[segment, column] = items
        sums = np.zeros(count, dtype=np.float32)
        for c in range(block.shape[1]):  # in order, rounded at each step, as one by one
            sums = rnd(sums + sign * block[:, c]) if block[:, c].any() else sums
        left.append(sums[-1])
        items, flushes, sign = sums[:-1], flushes[ends], 1
    total = np.float32(0)
    for partial in left:
        total = rnd(total + partial)
    return total


def _picked_grad(ctx, g):
    """``g`` times each target's coefficient, shaped to broadcast over the class dim."""
    total = getattr(ctx, "half_total", None)
    if total is not None:  # a half dtype's mean: g / total first, then times w[t], as torch
        ignored = _constant(~np.asarray(ctx.half_valid))
        return (g / total * _constant(ctx.coef)).masked_fill(ignored, 0).unsqueeze(ctx.class_dim)
    return (g * _constant(ctx.coef)).unsqueeze(ctx.class_dim)


class NllLoss(Op):
    """``-w[t] * input[t]`` per sample, reduced (weighted mean: divided by the sum of ``w[t]``)."""

    handles_bfloat16 = True  # as float16: torch's sums in the half dtype (_nll_reduce_half)

    nd = False  # NllLoss2D: the (N, C, H, W) kernel, with its own checks and node name

    @classmethod
    def forward(cls, ctx, input, target, weight=None, reduction="mean", ignore_index=-100):
        x, t = input._data, target  # the target is an int64 array, not a graph input
        _nll_check(x, t, weight, cls.nd)
        if x.ndim == 1:
            t = t.reshape(())  # a one-element target for one sample
        valid, classes, index = _class_index(ctx, t, x.shape, ignore_index)
        dim = 1 if x.ndim > 1 else 0
        picked = np.take_along_axis(x, index, dim).squeeze(dim)
        return _nll_reduce(ctx, picked, valid, classes, weight, reduction, cls.nd)

    @staticmethod
    def backward(ctx, g):
        coef = _picked_grad(ctx, g)
        return -ScatterAlong.apply(coef, index=ctx.index, dim=ctx.class_dim, shape=ctx.in_shape)


class NllLoss2D(NllLoss):
    nd = True
    node_name = "NllLoss2DBackward0"


class CrossEntropy(Op):
    """``nll_loss(log_softmax(input), target)`` in one node; its gradient is
    ``(softmax(input) - onehot(target)) * coef``."""

    node_name = "NllLossBackward0"
    nd = False
    handles_bfloat16 = True  # as float16: torch's log_softmax then nll_loss (below)

    @classmethod
    def forward(cls, ctx, input, target, weight=None, reduction="mean", ignore_index=-100):
        x, t = input._data, target  # the target is an int64 array, not a graph input
        _nll_check(x, t, weight, cls.nd)
        if x.ndim == 1:
            t = t.reshape(())
        valid, classes, index = _class_index(ctx, t, x.shape, ignore_index)
        dim = 1 if x.ndim > 1 else 0
        ctx.dtype = x.dtype
        if x.dtype in HALVES:  # torch's two kernels, each with its half-dtype result
            from disthook.ops.reduce import log_softmax_array

            log_probs = log_softmax_array(x, dim)
            picked = np.take_along_axis(log_probs, index, dim).squeeze(dim)
            out = _nll_reduce(ctx, picked, valid, classes, weight, reduction, cls.nd)
            if ctx.needs_input_grad:
                ctx.save_for_backward(input)
                ctx.probs = np.exp(log_probs.astype(np.float32))
            return out
        # log_softmax at the targets only: x[t] - max - log(sum(exp(x - max)))
        shifted = x - np.max(x, axis=dim, keepdims=True, initial=-np.inf)
        picked = np.take_along_axis(shifted, index, dim)
        exp = np.exp(shifted, out=shifted)
        total = np.sum(exp, axis=dim, keepdims=True)
        picked = picked - np.log(total)
        out = _nll_reduce(ctx, picked.squeeze(dim), valid, classes, weight, reduction)
        if ctx.needs_input_grad:  # a graph is recorded
            ctx.save_for_backward(input)
            ctx.probs = np.divide(exp, total, out=exp)
        return out

    @staticmethod
    def backward(ctx, g):
        coef = _picked_grad(ctx, g)
        dim, index = ctx.class_dim, ctx.index
        if grad_mode.is_grad_enabled():
            # create_graph: the softmax recomputed as an op, so the gradient differentiates
            (x,) = ctx.saved_tensors
            onehot = ScatterAlong.apply(coef, index=index, dim=dim, shape=ctx.in_shape)
            return x.softmax(dim) * coef - onehot
        # softmax from forward: like torch (which keeps log_softmax's output), a later in-place
        # change of the input does not matter here
        c = coef._data.astype(np.float32) if ctx.dtype in HALVES else coef._data
        grad = ctx.probs * c  # (a half dtype: in float32, rounded once, as torch's kernel)
        at_target = np.take_along_axis(grad, index, dim) - c
        np.put_along_axis(grad, index, at_target, dim)
        return _constant(grad.astype(ctx.dtype, copy=False))


class CrossEntropy2D(CrossEntropy):
    nd = True
    node_name = "NllLoss2DBackward0"
