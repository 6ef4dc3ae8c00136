"""Connectionist temporal classification loss (Graves et al., 2006) as one node.

Forward runs the alpha recursion in log space over the target with blanks interleaved;
backward runs the beta recursion and gives the gradient torch gives: the one for the
log-probabilities as the output of a log-softmax (``exp(lp) - occupancy``), which through
that log-softmax is the exact gradient of the logits. Torch has no derivative of this
gradient; asking for one is its error.
"""
from __future__ import annotations

import numpy as np

from disthook.ops.base import Op

NEG_INF = -np.inf


def _extended(target: np.ndarray, blank: int) -> np.ndarray:
    ext = np.full(2 * len(target) + 1, blank, dtype=np.int64)
    ext[1::2] = target
    return ext


def _skip_allowed(ext: np.ndarray, blank: int) -> np.ndarray:
    """Where the recursion may jump two states (a label different from the one before the
    blank in between)."""
    allowed = np.zeros(len(ext), dtype=bool)
    allowed[2:] = (ext[2:] != blank) & (ext[2:] != ext[:-2])
    return allowed


def _lse(*terms):
    stacked = np.stack(terms)
    top = stacked.max(0)
    safe = np.where(np.isfinite(top), top, 0)
    with np.errstate(divide="ignore"):
        return safe + np.log(np.exp(stacked - safe).sum(0))


def _shift(a: np.ndarray, k: int) -> np.ndarray:
    out = np.full_like(a, NEG_INF)
    out[k:] = a[:len(a) - k]
    return out


def _alpha(lp: np.ndarray, ext: np.ndarray, skip: np.ndarray) -> np.ndarray:
    frames, states = lp.shape[0], len(ext)
    alpha = np.full((frames, states), NEG_INF)
    alpha[0, 0] = lp[0, ext[0]]
    if states > 1:
        alpha[0, 1] = lp[0, ext[1]]
    for t in range(1, frames):
        prev = alpha[t - 1]
        two = np.where(skip, _shift(prev, 2), NEG_INF)
        alpha[t] = _lse(prev, _shift(prev, 1), two) + lp[t, ext]
    return alpha


def _beta(lp: np.ndarray, ext: np.ndarray, skip: np.ndarray) -> np.ndarray:
    frames, states = lp.shape[0], len(ext)
    beta = np.full((frames, states), NEG_INF)
    beta[-1, -1] = lp[-1, ext[-1]]
    if states > 1:
        beta[-1, -2] = lp[-1, ext[-2]]
    skip_next = np.zeros(states, dtype=bool)  # from s one may jump to s + 2
    skip_next[:-2] = skip[2:]
    for t in range(frames - 2, -1, -1):
        nxt = beta[t + 1]
        ahead1 = np.full(states, NEG_INF)
        ahead1[:-1] = nxt[1:]
        ahead2 = np.full(states, NEG_INF)
        ahead2[:-2] = nxt[2:]
        beta[t] = _lse(nxt, ahead1, np.where(skip_next, ahead2, NEG_INF)) + lp[t, ext]
    return beta


class CtcLoss(Op):
    """Per-sample negative log likelihoods of ``(T, N, C)`` log-probabilities; targets as
    ``(N, S)`` padded rows. Zeroes infinite losses (and their gradients) if asked."""

    @staticmethod
    def forward(ctx, log_probs, targets, input_lengths, target_lengths, blank, zero_infinity):
        ctx.save_for_backward(log_probs)
        lp_all = log_probs._data.astype(np.float64)
        _, batch, classes = lp_all.shape
        nll = np.zeros(batch)
        grad = np.zeros_like(lp_all)
        for n in range(batch):
            length = int(input_lengths[n])
            target = targets[n, :int(target_lengths[n])]
            ext = _extended(target, blank)
            skip = _skip_allowed(ext, blank)
            lp = lp_all[:length, n]
            if length == 0:
                nll[n] = np.inf if len(target) else 0.0
                continue
            alpha = _alpha(lp, ext, skip)
            tail = alpha[-1, -2:] if len(ext) > 1 else alpha[-1, -1:]
            nll[n] = -_lse(*tail)
            if not np.isfinite(nll[n]):
                if zero_infinity:
                    nll[n] = 0.0
                else:  # no alignment: torch's gradient is NaN
                    grad[:length, n] = np.nan
                continue
            beta = _beta(lp, ext, skip)
            # occupancy of each class at each frame: sum over states carrying it
            ab = alpha + beta  # both include lp[t]: the "- lp" below takes one out
            occ = np.full((length, classes), NEG_INF)
            for c in np.unique(ext):
                occ[:, c] = _lse(*ab[:, ext == c].T) if (ext == c).sum() > 1 \
                    else ab[:, ext == c][:, 0]
            grad[:length, n] = np.exp(lp) - np.exp(occ + nll[n] - lp)
        ctx.grad = grad.astype(log_probs._data.dtype)
        return nll.astype(log_probs._data.dtype)

    @staticmethod
    def backward(ctx, g):
        (log_probs,) = ctx.saved_tensors
        return CtcLossGrad.apply(g, log_probs, grad=ctx.grad)


class CtcLossGrad(Op):
    """``g[n] * grad[:, n, :]``; torch has no derivative of it."""

    node_name = "CtcLossBackwardBackward0"

    @staticmethod
    def forward(ctx, g, log_probs, grad):
        # (the gradient depends on ``log_probs``, as torch's: its derivative is the error)
        return grad * g._data[None, :, None]

    @staticmethod
    def backward(ctx, h):
        raise RuntimeError("derivative for aten::_ctc_loss_backward is not implemented")
