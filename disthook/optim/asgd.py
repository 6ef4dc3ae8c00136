"""ASGD (averaged SGD): SGD with a decaying step, keeping in ``ax`` the running average of the
parameter from step ``t0`` on; torch's single-tensor algorithm."""
from __future__ import annotations

from disthook.optim.optimizer import Optimizer, _check_hyperparameters, new_step, real_pairs
from disthook.optim.sgd import _check_flags
from disthook.tensor import zeros_like


class ASGD(Optimizer):
    sparse_refusal = "ASGD does not support sparse gradients"

    def __init__(self, params, lr: float = 1e-2, lambd: float = 1e-4, alpha: float = 0.75,
                 t0: float = 1e6, weight_decay: float = 0, foreach: bool | None = None,
                 maximize: bool = False, differentiable: bool = False,
                 capturable: bool = False) -> None:
        _check_hyperparameters(lr, weight_decay=weight_decay)
        defaults = {"lr": lr, "lambd": lambd, "alpha": alpha, "t0": t0,
                    "weight_decay": weight_decay, "foreach": foreach, "maximize": maximize,
                    "differentiable": differentiable, "capturable": capturable}
        super().__init__(params, defaults)
        _check_flags(differentiable, foreach, None)

    def _update(self, p, group: dict) -> None:
        lr, lambd = group["lr"], group["lambd"]
        state = self.state[p]
        if len(state) == 0:
            state["step"] = new_step()
            state["eta"] = new_step(lr)
            state["mu"] = new_step(1.0)
            state["ax"] = zeros_like(p)
        grad = -p.grad if group["maximize"] else p.grad
        grad, p, ax = real_pairs(p, grad, p, state["ax"])
        state["step"].add_(1)
        step = state["step"].item()
        if group["weight_decay"] != 0:
            grad = grad.add(p, alpha=group["weight_decay"])
        eta = state["eta"].item()
        p.mul_(1 - lambd * eta)
        p.add_(grad, alpha=-eta)
        mu = state["mu"].item()
        if mu != 1:
            ax.add_((p - ax) * mu)
        else:
            ax.copy_(p)
        state["eta"].copy_(new_step(lr / ((1 + lambd * lr * step) ** group["alpha"])))
        state["mu"].copy_(new_step(1 / max(1, step - group["t0"])))
