"""Adadelta: torch's single-tensor algorithm, step for step."""
from __future__ import annotations

from disthook import view_as_complex
from disthook.optim.optimizer import Optimizer, _check_hyperparameters, new_step, real_pairs
from disthook.optim.sgd import _check_flags
from disthook.tensor import zeros_like


class Adadelta(Optimizer):
    sparse_refusal = "Adadelta does not support sparse gradients"

    def __init__(self, params, lr: float = 1.0, rho: float = 0.9, eps: float = 1e-6,
                 weight_decay: float = 0, foreach: bool | None = None, *,
                 capturable: bool = False, maximize: bool = False,
                 differentiable: bool = False) -> None:
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= rho <= 1.0:
            raise ValueError(f"Invalid rho value: {rho}")
        _check_hyperparameters(lr, eps, weight_decay)
        defaults = {"lr": lr, "rho": rho, "eps": eps, "weight_decay": weight_decay,
                    "maximize": maximize, "capturable": capturable, "foreach": foreach,
                    "differentiable": differentiable}
        super().__init__(params, defaults)
        _check_flags(differentiable, foreach, None)

    def _update(self, p, group: dict) -> None:
        lr, rho, eps, weight_decay = group["lr"], group["rho"], group["eps"], group["weight_decay"]
        state = self.state[p]
        if len(state) == 0:
            state["step"] = new_step()
            state["square_avg"] = zeros_like(p)
            state["acc_delta"] = zeros_like(p)
        square_avg, acc_delta = state["square_avg"], state["acc_delta"]
        grad = -p.grad if group["maximize"] else p.grad

        state["step"].add_(1)
        if weight_decay != 0:
            grad = grad.add(p, alpha=weight_decay)
        # torch views all but the parameter as real pairs, and adds the complex delta to it
        grad, square_avg, acc_delta = real_pairs(p, grad, square_avg, acc_delta)
        square_avg.mul_(rho).add_(grad * grad, alpha=1 - rho)
        std = square_avg.add(eps).sqrt_()
        delta = acc_delta.add(eps).sqrt_().div_(std).mul_(grad)
        acc_delta.mul_(rho).add_(delta * delta, alpha=1 - rho)
        if p.is_complex():
            delta = view_as_complex(delta)
        p.add_(delta, alpha=-lr)
