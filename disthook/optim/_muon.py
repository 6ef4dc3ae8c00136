"""Muon (torch 2.9's ``torch.optim.Muon``): momentum on a 2-D parameter's gradient, the
(Nesterov) update made nearly orthogonal by a few quintic Newton-Schulz steps in bfloat16,
then a decoupled weight decay and a step scaled for the matrix's shape. torch's
single-tensor algorithm, step for step."""
from __future__ import annotations

import math

from disthook.optim.optimizer import Optimizer
from disthook.tensor import zeros_like

NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)  # Keller Jordan's quintic: steep slope at zero


def _orthogonalized(update, coefficients: tuple, ns_steps: int, eps: float):
    """``update`` pushed towards the nearest semi-orthogonal matrix (its singular values to
    about one) by ``ns_steps`` quintic iterations, computed in bfloat16 as torch does."""
    from disthook import addmm

    if ns_steps >= 100:
        raise ValueError("Number of steps must be less than 100 for computational efficiency")
    if update.dim() != 2:
        raise ValueError("Input tensor gradient must be a 2D matrix")
    if len(coefficients) != 3:
        raise ValueError("Coefficients must be a tuple of exactly 3 values")
    a, b, c = coefficients
    wide = update.size(0) <= update.size(1)  # iterate on the wide side: the Gram is smaller
    x = update.bfloat16() if wide else update.bfloat16().T
    x.div_(x.norm().clamp(min=eps))  # spectral norm at most one
    for _ in range(ns_steps):
        gram = x @ x.T
        x = addmm(x, addmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
    return x if wide else x.T


def _adjusted_lr(lr: float, adjust_lr_fn: str | None, shape) -> float:
    rows, cols = shape[:2]
    if adjust_lr_fn is None or adjust_lr_fn == "original":
        return lr * math.sqrt(max(1, rows / cols))
    if adjust_lr_fn == "match_rms_adamw":  # Moonshot's: AdamW's step size carries over
        return lr * 0.2 * math.sqrt(max(rows, cols))
    return lr


class Muon(Optimizer):
    sparse_refusal = "Muon does not support sparse gradients"

    def __init__(self, params, lr: float = 1e-3, weight_decay: float = 0.1,
                 momentum: float = 0.95, nesterov: bool = True,
                 ns_coefficients: tuple = NS_COEFFICIENTS, eps: float = 1e-7,
                 ns_steps: int = 5, adjust_lr_fn: str | None = None) -> None:
        if not 0.0 <= lr:
            raise ValueError(f"Learning rate should be >= 0 but is: {lr}")
        if not 0.0 <= momentum:
            raise ValueError(f"momentum should be >= 0 but is: {momentum}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"weight decay should be >= 0 but is: {weight_decay}")
        if adjust_lr_fn not in (None, "original", "match_rms_adamw"):
            raise ValueError(f"Adjust learning rate function {adjust_lr_fn} is not supported")
        defaults = {"lr": lr, "weight_decay": weight_decay, "momentum": momentum,
                    "nesterov": nesterov, "ns_coefficients": ns_coefficients, "eps": eps,
                    "ns_steps": ns_steps, "adjust_lr_fn": adjust_lr_fn}
        super().__init__(params, defaults)
        for group in self.param_groups:
            for p in group["params"]:
                if p.dim() != 2:
                    raise ValueError("Muon only supports 2D parameters whereas we found a "
                                     f"parameter with size: {p.size()} (give it to AdamW)")

    def _update(self, p, group: dict) -> None:
        if p.is_complex():
            raise RuntimeError("Muon does not support complex parameters")
        grad, momentum, lr = p.grad, group["momentum"], group["lr"]
        state = self.state[p]
        if "momentum_buffer" not in state:
            state["momentum_buffer"] = zeros_like(grad)
        buf = state["momentum_buffer"]
        buf.lerp_(grad, 1 - momentum)
        update = grad.lerp(buf, momentum) if group["nesterov"] else buf
        update = _orthogonalized(update, group["ns_coefficients"], group["ns_steps"],
                                 group["eps"])
        p.mul_(1 - lr * group["weight_decay"])
        p.add_(update, alpha=-_adjusted_lr(lr, group["adjust_lr_fn"], p.shape))
