"""Rprop (resilient backpropagation): each element's step grows while its gradient keeps its
sign and shrinks when it flips; torch's single-tensor algorithm."""
from __future__ import annotations

from disthook.optim.optimizer import Optimizer, filled_like, new_step, real_pairs
from disthook.optim.sgd import _check_flags
from disthook.tensor import where, zeros_like


class Rprop(Optimizer):
    sparse_refusal = "Rprop does not support sparse gradients"

    def __init__(self, params, lr: float = 1e-2, etas: tuple = (0.5, 1.2),
                 step_sizes: tuple = (1e-6, 50), *, capturable: bool = False,
                 foreach: bool | None = None, maximize: bool = False,
                 differentiable: bool = False) -> None:
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 < etas[0] < 1.0 < etas[1]:
            raise ValueError(f"Invalid eta values: {etas[0]}, {etas[1]}")
        defaults = {"lr": lr, "etas": etas, "step_sizes": step_sizes, "foreach": foreach,
                    "maximize": maximize, "differentiable": differentiable,
                    "capturable": capturable}
        super().__init__(params, defaults)
        _check_flags(differentiable, foreach, None)

    def _update(self, p, group: dict) -> None:
        etaminus, etaplus = group["etas"]
        step_min, step_max = group["step_sizes"]
        state = self.state[p]
        if len(state) == 0:
            state["step"] = new_step()
            state["prev"] = zeros_like(p)
            state["step_size"] = filled_like(p, group["lr"])
        grad = -p.grad if group["maximize"] else p.grad
        state["step"].add_(1)
        grad, prev, p, step_size = real_pairs(p, grad, state["prev"], p, state["step_size"])
        # the factor in the gradient's dtype (a NaN's stays NaN), as torch writes it in place
        factor = (grad * prev).sign()
        flipped = factor < 0
        factor[factor > 0] = etaplus
        factor[flipped] = etaminus
        factor[factor == 0] = 1
        step_size.copy_((step_size * factor).clamp(step_min, step_max))
        grad = where(flipped, 0.0, grad)  # a flipped sign: no move, and forgotten
        p.add_(-(grad.sign() * step_size))
        prev.copy_(grad)
