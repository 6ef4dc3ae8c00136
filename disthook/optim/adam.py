"""Adam (optionally AMSGrad, decoupled weight decay) as torch's single-tensor algorithm:
the same operations in the same order, so parameters agree with torch's to rounding."""
from __future__ import annotations

import numpy as np

from disthook.optim.optimizer import (
    Optimizer,
    bump_versions,
    chunked,
    flat_arrays,
    moment_state,
    real_pairs,
    weight_decayed,
)
from disthook.optim.sgd import _check_flags
from disthook.tensor import zeros_like


class Adam(Optimizer):
    sparse_refusal = "Adam does not support sparse gradients, please consider SparseAdam instead"

    def __init__(self, params, lr: float = 1e-3, betas: tuple = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0, amsgrad: bool = False, *, foreach: bool | None = None,
                 maximize: bool = False, capturable: bool = False, differentiable: bool = False,
                 fused: bool | None = None, decoupled_weight_decay: bool = False) -> None:
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if not (isinstance(betas[0], float) and isinstance(betas[1], float)):
            raise ValueError("betas must be either both floats or both Tensors")
        defaults = {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay,
                    "amsgrad": amsgrad, "maximize": maximize, "foreach": foreach,
                    "capturable": capturable, "differentiable": differentiable, "fused": fused,
                    "decoupled_weight_decay": decoupled_weight_decay}
        super().__init__(params, defaults)
        _check_flags(differentiable, foreach, fused)

    def _state(self, p, amsgrad: bool) -> dict:
        state = self.state[p]
        if len(state) == 0:
            moment_state(state, p)
            if amsgrad:
                state["max_exp_avg_sq"] = zeros_like(p)
        return state

    def _update(self, p, group: dict) -> None:
        lr, eps, weight_decay = group["lr"], group["eps"], group["weight_decay"]
        beta1, beta2 = group["betas"]
        state = self._state(p, group["amsgrad"])
        exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
        max_exp_avg_sq = state["max_exp_avg_sq"] if group["amsgrad"] else None
        grad = -p.grad if group["maximize"] else p.grad

        state["step"].add_(1)
        grad = weight_decayed(p, grad, lr, weight_decay, group["decoupled_weight_decay"])
        p, grad, exp_avg, exp_avg_sq, max_exp_avg_sq = real_pairs(
            p, p, grad, exp_avg, exp_avg_sq, max_exp_avg_sq)

        step = state["step"].item()
        bias_correction1 = 1 - beta1 ** step
        bias_correction2 = 1 - beta2 ** step
        step_size = lr / bias_correction1
        bias_correction2_sqrt = bias_correction2 ** 0.5

        more = () if max_exp_avg_sq is None else (max_exp_avg_sq,)
        arrays = flat_arrays(p, grad, exp_avg, exp_avg_sq, *more)
        if arrays is not None:
            adam_arrays(*arrays, beta1=beta1, beta2=beta2, eps=eps, step_size=step_size,
                        bias_correction2_sqrt=bias_correction2_sqrt)
            bump_versions((exp_avg, 1), (exp_avg_sq, 2), (p, 1),
                          *[(t, 1) for t in more])
            return

        # exp_avg.lerp_(grad, 1 - beta1) and exp_avg_sq.mul_(beta2).addcmul_(grad, grad, ...)
        exp_avg.add_(grad - exp_avg, alpha=1 - beta1)
        exp_avg_sq.mul_(beta2).add_(grad * grad, alpha=1 - beta2)
        if max_exp_avg_sq is not None:
            max_exp_avg_sq.copy_(max_exp_avg_sq.maximum(exp_avg_sq))
            denom = (max_exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
        else:
            denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
        p.add_(exp_avg / denom, alpha=-step_size)


def adam_arrays(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq=None, *, beta1: float,
                beta2: float, eps: float, step_size: float,
                bias_correction2_sqrt: float) -> None:
    """The Tensor path's operations above on flat numpy arrays, a chunk at a time, in place:
    the same bits (scalars taken in the arrays' dtype, as the Tensor ops take them)."""
    dt = param.dtype.type
    blend, decay, decay_sq = dt(1 - beta1), dt(beta2), dt(1 - beta2)
    correction, epsilon, scale = dt(bias_correction2_sqrt), dt(eps), dt(-step_size)
    (scratch,), slices = chunked(param)
    for s in slices:
        g, m, v, t = grad[s], exp_avg[s], exp_avg_sq[s], scratch[:s.stop - s.start]
        np.subtract(g, m, out=t)  # exp_avg += (1 - beta1) * (grad - exp_avg)
        np.multiply(t, blend, out=t)
        np.add(m, t, out=m)
        np.multiply(v, decay, out=v)  # exp_avg_sq = beta2 * exp_avg_sq + (1 - beta2) * grad²
        np.multiply(g, g, out=t)
        np.multiply(t, decay_sq, out=t)
        np.add(v, t, out=v)
        if max_exp_avg_sq is not None:
            v = np.maximum(max_exp_avg_sq[s], v, out=max_exp_avg_sq[s])
        np.sqrt(v, out=t)  # denom = sqrt(v) / bias_correction2_sqrt + eps
        np.divide(t, correction, out=t)
        np.add(t, epsilon, out=t)
        np.divide(m, t, out=t)  # param -= step_size * exp_avg / denom
        np.multiply(t, scale, out=t)
        np.add(param[s], t, out=param[s])
