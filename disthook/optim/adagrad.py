"""Adagrad: torch's single-tensor algorithm. As in torch, the state exists from construction
(``initial_accumulator_value`` fills the sums)."""
from __future__ import annotations

import numpy as np

from disthook.optim import optimizer
from disthook.optim.optimizer import Optimizer, _check_hyperparameters, new_step
from disthook.optim.sgd import _check_flags


class Adagrad(Optimizer):
    def __init__(self, params, lr: float = 1e-2, lr_decay: float = 0, weight_decay: float = 0,
                 initial_accumulator_value: float = 0, eps: float = 1e-10,
                 foreach: bool | None = None, *, maximize: bool = False,
                 differentiable: bool = False, fused: bool | None = None) -> None:
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= lr_decay:
            raise ValueError(f"Invalid lr_decay value: {lr_decay}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if not 0.0 <= initial_accumulator_value:
            raise ValueError("Invalid initial_accumulator_value value: "
                             f"{initial_accumulator_value}")
        _check_hyperparameters(lr, eps)
        defaults = {"lr": lr, "lr_decay": lr_decay, "eps": eps, "weight_decay": weight_decay,
                    "initial_accumulator_value": initial_accumulator_value,
                    "foreach": foreach, "maximize": maximize,
                    "differentiable": differentiable, "fused": fused}
        super().__init__(params, defaults)
        _check_flags(differentiable, foreach, fused)
        for group in self.param_groups:
            for p in group["params"]:
                state = self.state[p]
                state["step"] = new_step()
                state["sum"] = optimizer.filled_like(p, initial_accumulator_value)

    def _update(self, p, group: dict) -> None:
        state = self.state[p]
        grad = -p.grad if group["maximize"] else p.grad
        state["step"].add_(1)
        step = state["step"].item()
        if group["weight_decay"] != 0:
            if p.grad.is_sparse:
                raise RuntimeError("weight_decay option is not compatible with sparse gradients")
            grad = grad.add(p, alpha=group["weight_decay"])
        clr = group["lr"] / (1 + (step - 1) * group["lr_decay"])
        p, grad, sums = optimizer.real_pairs(p, p, grad, state["sum"])
        arrays = optimizer.flat_arrays(p, grad, sums)
        if arrays is not None:
            adagrad_arrays(*arrays, eps=group["eps"], clr=clr)
            optimizer.bump_versions((sums, 1), (p, 1))
            return
        sums.add_(grad * grad)
        std = sums.sqrt().add_(group["eps"])
        p.add_(grad / std, alpha=-clr)


def adagrad_arrays(param, grad, sums, *, eps: float, clr: float) -> None:
    """The Tensor path's operations above on flat numpy arrays, a chunk at a time, in place:
    the same bits."""
    dt = param.dtype.type
    (std, t), slices = optimizer.chunked(param, 2)
    for s in slices:
        g, total, k = grad[s], sums[s], s.stop - s.start
        a, x = std[:k], t[:k]
        np.multiply(g, g, out=x)  # sum += grad²
        np.add(total, x, out=total)
        np.sqrt(total, out=a)  # std = sqrt(sum) + eps
        np.add(a, dt(eps), out=a)
        np.divide(g, a, out=x)  # param -= clr * grad / std
        np.multiply(x, dt(-clr), out=x)
        np.add(param[s], x, out=param[s])
