"""RAdam (rectified Adam, optionally decoupled weight decay): torch's single-tensor
algorithm; the adaptive term is used once the variance is tractable (rho_t > 5)."""
from __future__ import annotations

from disthook.optim.optimizer import (
    Optimizer,
    _check_hyperparameters,
    moment_state,
    real_pairs,
    weight_decayed,
)
from disthook.optim.sgd import _check_flags


class RAdam(Optimizer):
    sparse_refusal = "RAdam does not support sparse gradients"

    def __init__(self, params, lr: float = 1e-3, betas: tuple = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0,
                 decoupled_weight_decay: bool = False, *, foreach: bool | None = None,
                 maximize: bool = False, capturable: bool = False,
                 differentiable: bool = False) -> None:
        _check_hyperparameters(lr, eps, weight_decay, betas)
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay,
                    "maximize": maximize, "foreach": foreach, "capturable": capturable,
                    "decoupled_weight_decay": decoupled_weight_decay,
                    "differentiable": differentiable}
        super().__init__(params, defaults)
        _check_flags(differentiable, foreach, None)

    def _update(self, p, group: dict) -> None:
        lr, eps, weight_decay = group["lr"], group["eps"], group["weight_decay"]
        beta1, beta2 = group["betas"]
        state = moment_state(self.state[p], p)
        exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
        grad = -p.grad if group["maximize"] else p.grad
        p, grad, exp_avg, exp_avg_sq = real_pairs(p, p, grad, exp_avg, exp_avg_sq)

        state["step"].add_(1)
        step = state["step"].item()
        grad = weight_decayed(p, grad, lr, weight_decay, group["decoupled_weight_decay"])
        exp_avg.add_(grad - exp_avg, alpha=1 - beta1)  # lerp_(grad, 1 - beta1)
        exp_avg_sq.mul_(beta2).add_(grad * grad, alpha=1 - beta2)
        bias_correction1 = 1 - beta1 ** step
        bias_correction2 = 1 - beta2 ** step
        corrected = exp_avg / bias_correction1
        rho_inf = 2 / (1 - beta2) - 1
        rho_t = rho_inf - 2 * step * (beta2 ** step) / bias_correction2
        if rho_t > 5.0:
            rect = ((rho_t - 4) * (rho_t - 2) * rho_inf
                    / ((rho_inf - 4) * (rho_inf - 2) * rho_t)) ** 0.5
            adaptive_lr = (bias_correction2 ** 0.5) / exp_avg_sq.sqrt().add_(eps)
            p.add_(corrected * lr * adaptive_lr * rect, alpha=-1.0)
        else:
            p.add_(corrected * lr, alpha=-1.0)
