"""Losses of ``nn.functional`` beyond regression, BCE and cross entropy: divergence, ranking
and margin losses, Poisson and Gaussian likelihoods, triplets, and cross entropy of a linear
projection. Each checks what torch checks, then runs one op or the composition torch uses."""
from __future__ import annotations

import math
import warnings

import numpy as np

import disthook.nn.functional as F
from disthook.amp import cpu_policy
from disthook.autograd import grad_mode
from disthook.ops import ctc as M_ctc
from disthook.ops import margin as M
from disthook.tensor import Tensor

__all__ = [
    "cosine_embedding_loss", "ctc_loss", "gaussian_nll_loss", "hinge_embedding_loss", "kl_div",
    "linear_cross_entropy", "margin_ranking_loss", "multi_margin_loss",
    "multilabel_margin_loss", "multilabel_soft_margin_loss", "pairwise_distance", "pdist",
    "poisson_nll_loss", "soft_margin_loss", "triplet_margin_loss",
    "triplet_margin_with_distance_loss",
]


def _reduce(loss: Tensor, reduction: str) -> Tensor:
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    return loss


def _zero_where(mask: Tensor, values: Tensor) -> Tensor:
    """``values`` where ``mask`` holds, zero elsewhere."""
    return values.new_zeros(()).where(~mask, values)


# ---- divergence -----------------------------------------------------------------------------

@cpu_policy.covered(cpu_policy.FP32)
def kl_div(input: Tensor, target: Tensor, size_average=None, reduce=None,
           reduction: str = "mean", log_target: bool = False) -> Tensor:
    """``target * (log(target) - input)`` (``input`` holds log-probabilities; with
    ``log_target`` so does ``target``); 'batchmean' divides the sum by the batch size."""
    if size_average is not None or reduce is not None:
        reduction = F._legacy_reduction(size_average, reduce, reduction)
    elif reduction == "mean":
        warnings.warn("reduction: 'mean' divides the total loss by both the batch size and the "
                      "support size.'batchmean' divides only by the batch size, and aligns with "
                      "the KL div math definition.'mean' will be changed to behave the same as "
                      "'batchmean' in the next major release.", UserWarning, stacklevel=2)
    if reduction not in ("none", "mean", "sum", "batchmean"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    if log_target:
        loss = target.exp() * (target - input)
    else:
        # target * log(target) is 0 where target is 0 (xlogy), and its gradient finite there
        safe = target.new_ones(()).where(target == 0, target)
        loss = target * safe.log() - target * input
    if reduction == "batchmean":
        return loss.sum() / input.shape[0] if input.ndim != 0 else loss.sum()
    return _reduce(loss, reduction)


# ---- ranking and margin losses ------------------------------------------------------------------

@cpu_policy.covered(cpu_policy.FP32)
def margin_ranking_loss(input1: Tensor, input2: Tensor, target: Tensor, margin: float = 0,
                        size_average=None, reduce=None, reduction: str = "mean") -> Tensor:
    """``max(0, -target * (input1 - input2) + margin)``."""
    reduction = F._reduction_arg(size_average, reduce, reduction)
    if input1.ndim != input2.ndim or input1.ndim != target.ndim:
        raise RuntimeError(
            f"margin_ranking_loss : All input tensors should have same dimension but got sizes: "
            f"input1: {input1.shape}, input2: {input2.shape}, target: {target.shape} ")
    return _reduce((-target * (input1 - input2) + margin).clamp_min(0), reduction)


@cpu_policy.covered(cpu_policy.FP32)
def hinge_embedding_loss(input: Tensor, target: Tensor, margin: float = 1.0,
                         size_average=None, reduce=None, reduction: str = "mean") -> Tensor:
    """``input`` where ``target`` is 1, ``max(0, margin - input)`` where it is -1."""
    reduction = F._reduction_arg(size_average, reduce, reduction)
    margin_part = _zero_where(target != 1, (margin - input).clamp_min(0))
    self_part = _zero_where(target != -1, input)
    return _reduce(margin_part + self_part, reduction)


@cpu_policy.covered(cpu_policy.FP32)
def soft_margin_loss(input: Tensor, target: Tensor, size_average=None, reduce=None,
                     reduction: str = "mean") -> Tensor:
    """``log(1 + exp(-target * input))``, one node as in torch."""
    reduction = F._reduction_arg(size_average, reduce, reduction)
    input, target = F._broadcast_pair(input, target)
    if target.dtype != input.dtype:
        target = target.to(input.dtype)
    return M.SoftMarginLoss.apply(input, target.detach(), reduction=reduction)


@cpu_policy.covered(cpu_policy.FP32)
def cosine_embedding_loss(input1: Tensor, input2: Tensor, target: Tensor, margin: float = 0,
                          size_average=None, reduce=None, reduction: str = "mean") -> Tensor:
    """``1 - cos(input1, input2)`` where ``target`` is 1, ``max(0, cos - margin)`` where it
    is -1; the cosine along the last dim."""
    reduction = F._reduction_arg(size_average, reduce, reduction)
    if input1.ndim != input2.ndim:
        raise RuntimeError(f"cosine_embedding_loss : All input tensors should have same "
                           f"dimension but got sizes: input1: {input1.shape}, input2: "
                           f"{input2.shape}, target: {target.shape} ")
    if input1.ndim not in (1, 2) or target.ndim != input1.ndim - 1:
        raise RuntimeError(f"{input1.ndim}D target tensor expects {input1.ndim - 1}D input "
                           f"tensors, but found inputs with sizes {list(input1.shape)}, "
                           f"{list(input2.shape)} and {list(target.shape)}.")
    dim = input1.ndim - 1
    eps = 1e-12
    prod = (input1 * input2).sum(dim)
    mag1 = (input1 * input1).sum(dim) + eps
    mag2 = (input2 * input2).sum(dim) + eps
    cos = prod / (mag1 * mag2).sqrt()
    pos = _zero_where(target == 1, 1 - cos)
    neg = _zero_where(target == -1, (cos - margin).clamp_min(0))
    return _reduce(pos + neg, reduction)


def _class_targets(input: Tensor, target: Tensor, fn: str) -> np.ndarray:
    if input.ndim not in (1, 2) and not (input.ndim == 0):
        raise RuntimeError(f"Expected non-empty vector or matrix with optional 0-dim batch "
                           f"size, but got: {list(input.shape)}")
    if target._data.dtype.kind not in "iu":
        raise RuntimeError(f"{fn}: expected target of integer type, but got {target.dtype}")
    return target._data.astype(np.int64)


@cpu_policy.covered(cpu_policy.FP32)
def multi_margin_loss(input: Tensor, target: Tensor, p: int = 1, margin: float = 1.0,
                      weight: Tensor | None = None, size_average=None, reduce=None,
                      reduction: str = "mean") -> Tensor:
    """Multi-class hinge loss: per sample, ``sum over i != y of max(0, margin - x[y] +
    x[i]) ** p / C``, times ``weight[y]``."""
    reduction = F._reduction_arg(size_average, reduce, reduction)
    if p not in (1, 2):
        raise ValueError("only p == 1 and p == 2 supported")
    if weight is not None and weight.ndim != 1:
        raise ValueError("weight must be one-dimensional")
    x = input if input.ndim else input.reshape(1)
    t = _class_targets(x, target, "multi_margin_loss")
    c = x.shape[-1]
    if t.size != (x.shape[0] if x.ndim == 2 else 1) or (x.ndim == 2 and t.ndim != 1):
        raise RuntimeError(f"inconsistent target size, expected {x.shape[0] if x.ndim == 2 else 1}"
                           f" but got {list(target.shape)}")
    if t.size and (t.min() < 0 or t.max() >= c):
        raise RuntimeError("target out of range")
    w = None if weight is None else weight._data
    out = M.MultiMarginLoss.apply(x, target=t, p=p, margin=margin, weight=w,
                                  reduction=reduction)
    return out.reshape(()) if input.ndim == 0 and reduction == "none" else out


@cpu_policy.covered(cpu_policy.FP32)
def multilabel_margin_loss(input: Tensor, target: Tensor, size_average=None, reduce=None,
                           reduction: str = "mean") -> Tensor:
    """Multi-label hinge loss: for each listed target class ``j`` (the indices of
    ``target`` before its first -1) and each other class ``i``, ``max(0, 1 - (x[j] -
    x[i])) / C``."""
    reduction = F._reduction_arg(size_average, reduce, reduction)
    x = input if input.ndim else input.reshape(1)
    t = _class_targets(x, target, "multilabel_margin_loss")
    if tuple(t.shape) != tuple(x.shape):
        raise RuntimeError(f"inconsistent target size: {list(target.shape)} for input of size: "
                           f"{list(input.shape)}")
    if t.size and (t.max() >= x.shape[-1] or t.min() < -1):
        raise RuntimeError("target out of range")
    return M.MultilabelMarginLoss.apply(x, target=t, reduction=reduction)


def multilabel_soft_margin_loss(input: Tensor, target: Tensor, weight: Tensor | None = None,
                                size_average=None, reduce=None,
                                reduction: str = "mean") -> Tensor:
    """Per-class binary cross entropy of logits, averaged over the classes (last dim)."""
    reduction = F._reduction_arg(size_average, reduce, reduction)
    loss = -(target * F.logsigmoid(input) + (1 - target) * F.logsigmoid(-input))
    if weight is not None:
        loss = loss * weight
    class_dim = input.ndim - 1
    loss = loss.sum(dim=class_dim) / input.shape[class_dim]
    return _reduce(loss, reduction)


# ---- likelihoods ------------------------------------------------------------------------------

@cpu_policy.covered(cpu_policy.FP32)
def poisson_nll_loss(input: Tensor, target: Tensor, log_input: bool = True, full: bool = False,
                     size_average=None, eps: float = 1e-8, reduce=None,
                     reduction: str = "mean") -> Tensor:
    """Negative log likelihood of ``target`` under a Poisson of rate ``input`` (or
    ``exp(input)`` with ``log_input``); ``full`` adds Stirling's term for targets > 1."""
    reduction = F._reduction_arg(size_average, reduce, reduction)
    if log_input:
        loss = input.exp() - target * input
    else:
        loss = input - target * (input + eps).log()
    if full:
        safe = target.new_ones(()).where(target <= 1, target)
        stirling = safe * safe.log() - safe + 0.5 * (2 * math.pi * safe).log()
        loss = loss + _zero_where(target > 1, stirling)
    return _reduce(loss, reduction)


def gaussian_nll_loss(input: Tensor, target: Tensor, var, full: bool = False,
                      eps: float = 1e-6, reduction: str = "mean") -> Tensor:
    """``0.5 * (log(var) + (input - target) ** 2 / var)``; ``var`` has the input's shape,
    or one fewer trailing dim, or a trailing dim of 1 (one variance for all features), or
    is a float. ``var`` is clamped to ``eps`` outside the graph, as in torch."""
    if isinstance(var, (int, float)):
        if var < 0:
            raise ValueError("var has negative entry/entries")
        var = input.new_full((), float(var))
    if var.shape != input.shape:
        if tuple(input.shape[:-1]) == tuple(var.shape):
            var = var.unsqueeze(-1)
        elif tuple(input.shape[:-1]) == tuple(var.shape[:-1]) and var.shape[-1] == 1:
            pass
        elif var.ndim != 0:
            raise ValueError("var is of incorrect size")
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    if bool((var < 0).any()):
        raise ValueError("var has negative entry/entries")
    var = var.clone()
    with grad_mode.no_grad():
        var.clamp_(min=eps)
    loss = 0.5 * (var.log() + (input - target) ** 2 / var)
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _reduce(loss, reduction)


# ---- distances and triplets -------------------------------------------------------------------

def pairwise_distance(x1: Tensor, x2: Tensor, p: float = 2.0, eps: float = 1e-6,
                      keepdim: bool = False) -> Tensor:
    """``||x1 - x2 + eps||_p`` along the last dim."""
    dim = max(x1.ndim, x2.ndim) - 1
    if dim < 0:
        return (x1 - x2 + eps).abs()
    return (x1 - x2 + eps).norm(p, dim=-1, keepdim=keepdim)


def pdist(input: Tensor, p: float = 2.0) -> Tensor:
    """The ``p``-norm distance between each pair of rows ``i < j`` of an ``(N, M)`` input."""
    if input.ndim != 2:
        raise RuntimeError(f"pdist only supports 2D tensors, got: {input.ndim}D")
    if p < 0:
        raise RuntimeError("pdist only supports non-negative p values")
    M.check_distance_dtypes("pdist", input)
    return M.Pdist.apply(input, p=float(p))


@cpu_policy.covered(cpu_policy.FP32)
def triplet_margin_loss(anchor: Tensor, positive: Tensor, negative: Tensor,
                        margin: float = 1.0, p: float = 2, eps: float = 1e-6,
                        swap: bool = False, size_average=None, reduce=None,
                        reduction: str = "mean") -> Tensor:
    """``max(0, margin + d(anchor, positive) - d(anchor, negative))``, ``d`` the p-norm
    distance; ``swap`` uses the smaller of d(a, n) and d(p, n)."""
    reduction = F._reduction_arg(size_average, reduce, reduction)
    _check_triplet(anchor, positive, negative)
    if margin <= 0:
        raise ValueError(f"TripletMarginLoss: expected margin to be greater than 0, got "
                         f"{margin} instead")
    d_pos = pairwise_distance(anchor, positive, p, eps)
    d_neg = pairwise_distance(anchor, negative, p, eps)
    if swap:
        d_neg = d_neg.minimum(pairwise_distance(positive, negative, p, eps))
    return _reduce((margin + d_pos - d_neg).clamp_min(0), reduction)


def _check_triplet(anchor: Tensor, positive: Tensor, negative: Tensor) -> None:
    a, p, n = anchor.ndim, positive.ndim, negative.ndim
    if not a == p == n:
        raise RuntimeError(f"The anchor, positive, and negative tensors are expected to have "
                           f"the same number of dimensions, but got: anchor {a}D, positive "
                           f"{p}D, and negative {n}D inputs")


def triplet_margin_with_distance_loss(anchor: Tensor, positive: Tensor, negative: Tensor, *,
                                      distance_function=None, margin: float = 1.0,
                                      swap: bool = False, reduction: str = "mean") -> Tensor:
    """The triplet loss with any distance (``pairwise_distance`` by default)."""
    if margin <= 0:
        raise ValueError(f"TripletMarginWithDistanceLoss: expected margin to be greater than "
                         f"0, got {margin} instead")
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    _check_triplet(anchor, positive, negative)
    dist = distance_function if distance_function is not None else pairwise_distance
    d_pos = dist(anchor, positive)
    d_neg = dist(anchor, negative)
    if swap:
        d_neg = d_neg.minimum(dist(positive, negative))
    return _reduce((margin + d_pos - d_neg).clamp_min(0), reduction)


# ---- cross entropy of a linear projection ---------------------------------------------------------

def linear_cross_entropy(input: Tensor, linear_weight: Tensor, target: Tensor, *,
                         linear_bias: Tensor | None = None, weight: Tensor | None = None,
                         reduction: str = "mean", ignore_index: int | None = None,
                         label_smoothing: float = 0.0, options=None) -> Tensor:
    """``cross_entropy(linear(input, linear_weight, linear_bias), target)``; ``options``
    (torch's chunking of the projection) changes memory, not the result, and is accepted."""
    if input.ndim not in (1, 2):
        raise RuntimeError(f"expected input with dimensionality 1 or 2, got {input.ndim}")
    if linear_weight.ndim < 2:
        raise RuntimeError(f"expected linear_weight with dimensionality at least 2, got "
                           f"{linear_weight.ndim}")
    if input.shape[-1] != linear_weight.shape[-1]:
        raise RuntimeError(f"expected equal input and linear_weight last dimensions "
                           f"(in_features), got {input.shape[-1]} and "
                           f"{linear_weight.shape[-1]}, respectively")
    classes, out_features = linear_weight.shape[0], tuple(linear_weight.shape[1:-1])
    if linear_bias is not None and tuple(linear_bias.shape) != (classes, *out_features):
        raise RuntimeError(f"expected linear_bias shape {(classes, *out_features)}, got "
                           f"{tuple(linear_bias.shape)}")
    if out_features and input.ndim == 1:
        raise RuntimeError(f"K-dimensional loss defined by linear_weight shape "
                           f"{tuple(linear_weight.shape)} requires batched input, (N, "
                           f"{input.shape[-1]}), got unbatched input with shape "
                           f"{tuple(input.shape)}")
    # (K-dimensional: the classes and the out_features positions of one flat projection)
    flat = linear_weight.reshape(-1, linear_weight.shape[-1])
    bias = linear_bias.reshape(-1) if linear_bias is not None else None
    logits = F.linear(input, flat, bias).reshape(*input.shape[:-1], classes, *out_features)
    return F.cross_entropy(logits, target, weight=weight,
                           ignore_index=-100 if ignore_index is None else ignore_index,
                           reduction=reduction, label_smoothing=label_smoothing)


# ---- connectionist temporal classification --------------------------------------------------------

def _lengths(value, name: str) -> np.ndarray:
    data = value._data if isinstance(value, Tensor) else np.asarray(value)
    if data.dtype.kind not in "iu":
        raise RuntimeError(f"{name} must be integral")
    return data.astype(np.int64).reshape(-1)


def ctc_loss(log_probs: Tensor, targets: Tensor, input_lengths, target_lengths,
             blank: int = 0, reduction: str = "mean", zero_infinity: bool = False) -> Tensor:
    """The CTC loss of ``(T, N, C)`` (or unbatched ``(T, C)``) log-probabilities against
    targets given as ``(N, S)`` padded rows or one concatenated 1-D tensor; 'mean' divides
    each loss by its target length, then averages over the batch."""
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    unbatched = log_probs.ndim == 2
    lp = log_probs.unsqueeze(1) if unbatched else log_probs
    if lp.ndim != 3:
        raise RuntimeError(f"ctc_loss expects log_probs of 2 or 3 dimensions, got {log_probs.ndim}")
    frames, batch, classes = lp.shape
    in_lengths = _lengths(input_lengths, "input_lengths")
    tg_lengths = _lengths(target_lengths, "target_lengths")
    t = targets._data.astype(np.int64)
    if unbatched:
        t = t.reshape(1, -1)
    elif t.ndim == 1:  # the targets of the batch concatenated: pad them into rows
        offsets = np.concatenate([[0], np.cumsum(tg_lengths)])
        if offsets[-1] > t.shape[0]:
            raise RuntimeError(f"target_lengths sum to {offsets[-1]} but targets hold only "
                               f"{t.shape[0]} labels")
        rows = np.zeros((batch, max(int(tg_lengths.max(initial=0)), 1)), dtype=np.int64)
        for n in range(batch):
            rows[n, :tg_lengths[n]] = t[offsets[n]:offsets[n + 1]]
        t = rows
    if len(in_lengths) != batch:
        raise RuntimeError(f"input_lengths must be of size batch_size, but got "
                           f"{len(in_lengths)} for batch size {batch}")
    if len(tg_lengths) != batch:
        raise RuntimeError(f"target_lengths must be of size batch_size, but got "
                           f"{len(tg_lengths)} for batch size {batch}")
    if not 0 <= blank < classes:
        raise RuntimeError("blank must be in label range")
    for n in range(batch):
        if in_lengths[n] > frames or in_lengths[n] < 0:
            raise RuntimeError(f"Expected input_lengths to have value at most {frames}, but got "
                               f"value {in_lengths[n]} (while checking arguments for ctc_loss_cpu)")
        if tg_lengths[n] > t.shape[1]:
            raise RuntimeError(f"Expected tensor to have size at least {tg_lengths[n]} at "
                               f"dimension 1, but got size {t.shape[1]} for argument #2 "
                               "'targets' (while checking arguments for ctc_loss_cpu)")
    losses = M_ctc.CtcLoss.apply(lp, targets=t, input_lengths=in_lengths,
                                 target_lengths=tg_lengths, blank=blank,
                                 zero_infinity=zero_infinity)
    if unbatched:
        losses = losses.squeeze(0)
    if reduction == "mean":
        divisor = np.maximum(tg_lengths, 1).astype(losses._data.dtype)
        divisor = divisor[0] if unbatched else divisor
        return (losses / losses.new_tensor(divisor)).mean()
    return losses.sum() if reduction == "sum" else losses
