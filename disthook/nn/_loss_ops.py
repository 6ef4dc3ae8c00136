"""Loss ops that torch records as one node of their own (``MseLossBackward0``)."""
from __future__ import annotations

import numpy as np

from disthook.ops.base import Op

REDUCTIONS = ("none", "mean", "sum")


def _reduce(values: np.ndarray, reduction: str) -> np.ndarray:
    if reduction == "mean":
        return np.asarray(values.mean(), dtype=values.dtype)
    if reduction == "sum":
        return np.asarray(values.sum(), dtype=values.dtype)
    return values


class MseLoss(Op):
    """``(input - target) ** 2``, reduced; both operands have the same shape and dtype."""

    @staticmethod
    def forward(ctx, input, target, reduction="mean"):
        ctx.save_for_backward(input, target)
        ctx.reduction = reduction
        diff = input._data - target._data
        return _reduce(diff * diff, reduction)

    @staticmethod
    def backward(ctx, g):
        input, target = ctx.saved_tensors
        norm = 2.0 / input.numel() if ctx.reduction == "mean" else 2.0
        grad = (input - target) * (g * norm)
        need = ctx.needs_input_grad
        return (grad if need[0] else None), (-grad if need[1] else None)
