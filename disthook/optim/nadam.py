"""NAdam (Nesterov Adam, optionally decoupled weight decay): torch's single-tensor algorithm.
``mu_product`` is kept as a 0-d tensor in the state, as torch does."""
from __future__ import annotations

from disthook.optim.optimizer import (
    Optimizer,
    _check_hyperparameters,
    moment_state,
    real_pairs,
    weight_decayed,
)
from disthook.optim.sgd import _check_flags


class NAdam(Optimizer):
    sparse_refusal = "NAdam does not support sparse gradients"

    def __init__(self, params, lr: float = 2e-3, betas: tuple = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0, momentum_decay: float = 4e-3,
                 decoupled_weight_decay: bool = False, *, foreach: bool | None = None,
                 maximize: bool = False, capturable: bool = False,
                 differentiable: bool = False) -> None:
        _check_hyperparameters(lr, eps, weight_decay, betas, momentum_decay=momentum_decay)
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay,
                    "momentum_decay": momentum_decay,
                    "decoupled_weight_decay": decoupled_weight_decay, "maximize": maximize,
                    "foreach": foreach, "capturable": capturable,
                    "differentiable": differentiable}
        super().__init__(params, defaults)
        _check_flags(differentiable, foreach, None)

    def _update(self, p, group: dict) -> None:
        lr, eps, weight_decay = group["lr"], group["eps"], group["weight_decay"]
        beta1, beta2 = group["betas"]
        state = moment_state(self.state[p], p, "mu_product")
        exp_avg, exp_avg_sq, mu_product = (state["exp_avg"], state["exp_avg_sq"],
                                           state["mu_product"])
        grad = -p.grad if group["maximize"] else p.grad
        p, grad, exp_avg, exp_avg_sq = real_pairs(p, p, grad, exp_avg, exp_avg_sq)

        state["step"].add_(1)
        step = state["step"].item()
        bias_correction2 = 1 - beta2 ** step
        grad = weight_decayed(p, grad, lr, weight_decay, group["decoupled_weight_decay"])
        mu = beta1 * (1.0 - 0.5 * (0.96 ** (step * group["momentum_decay"])))
        mu_next = beta1 * (1.0 - 0.5 * (0.96 ** ((step + 1) * group["momentum_decay"])))
        mu_product.mul_(mu)
        exp_avg.add_(grad - exp_avg, alpha=1 - beta1)  # lerp_(grad, 1 - beta1)
        exp_avg_sq.mul_(beta2).add_(grad * grad, alpha=1 - beta2)
        denom = exp_avg_sq.div(bias_correction2).sqrt().add_(eps)
        product = mu_product.item()
        product_next = product * mu_next
        p.add_(grad / denom, alpha=-lr * (1.0 - mu) / (1.0 - product))
        p.add_(exp_avg / denom, alpha=(-lr * mu_next) / (1.0 - product_next))
