"""Adamax (Adam with the infinity norm): torch's single-tensor algorithm."""
from __future__ import annotations

from disthook.optim.optimizer import Optimizer, _check_hyperparameters, new_step, real_pairs
from disthook.optim.sgd import _check_flags
from disthook.tensor import zeros_like


class Adamax(Optimizer):
    sparse_refusal = "Adamax does not support sparse gradients"

    def __init__(self, params, lr: float = 2e-3, betas: tuple = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0, foreach: bool | None = None, *,
                 maximize: bool = False, differentiable: bool = False,
                 capturable: bool = False) -> None:
        _check_hyperparameters(lr, eps, weight_decay, betas=betas)
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay,
                    "foreach": foreach, "maximize": maximize, "differentiable": differentiable,
                    "capturable": capturable}
        super().__init__(params, defaults)
        _check_flags(differentiable, foreach, None)

    def _update(self, p, group: dict) -> None:
        beta1, beta2 = group["betas"]
        state = self.state[p]
        if len(state) == 0:
            state["step"] = new_step()
            state["exp_avg"] = zeros_like(p)
            state["exp_inf"] = zeros_like(p)
        grad = -p.grad if group["maximize"] else p.grad
        state["step"].add_(1)
        step = state["step"].item()
        if group["weight_decay"] != 0:
            grad = grad.add(p, alpha=group["weight_decay"])
        p, grad, exp_avg, exp_inf = real_pairs(p, p, grad, state["exp_avg"], state["exp_inf"])
        exp_avg.add_(grad - exp_avg, alpha=1 - beta1)  # a running mean of the gradient
        exp_inf.copy_(exp_inf.mul_(beta2).maximum(grad.abs().add_(group["eps"])))
        p.add_(exp_avg / exp_inf, alpha=-group["lr"] / (1 - beta1 ** step))
