"""Adafactor (torch 2.5's ``torch.optim.Adafactor``): a matrix's second moment kept as a row
and a column factor, a vector's whole; the step size relative to the parameter's own scale
and the update clipped by its root mean square. torch's single-tensor algorithm, step for
step."""
from __future__ import annotations

from disthook.optim.optimizer import Optimizer, new_step
from disthook.optim.sgd import _check_flags
from disthook.tensor import zeros_like


class Adafactor(Optimizer):
    sparse_refusal = "Adafactor does not support sparse gradients"

    def __init__(self, params, lr: float = 1e-2, beta2_decay: float = -0.8,
                 eps: tuple = (None, 1e-3), d: float = 1.0, weight_decay: float = 0.0, *,
                 foreach: bool | None = None, maximize: bool = False) -> None:
        if not 0.0 <= lr:
            raise ValueError(f"Learning rate should be >= 0 but is: {lr}")
        if not 0.0 >= beta2_decay:
            raise ValueError(f"beta2_decay should be <= 0 but is: {beta2_decay}")
        if eps[0] is not None and not 0.0 <= eps[0]:
            raise ValueError(f"epsilon1 should be >= 0 but is: {eps[0]}")
        if not 0.0 <= eps[1]:
            raise ValueError(f"epsilon2 should be >= 0 but is: {eps[1]}")
        if not 1.0 <= d:
            raise ValueError(f"Clipping threshold d should be >= 1 but is: {d}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"weight_decay should be >= 0 but is: {weight_decay}")
        defaults = {"lr": lr, "beta2_decay": beta2_decay, "eps": eps, "d": d,
                    "weight_decay": weight_decay, "foreach": foreach, "maximize": maximize}
        super().__init__(params, defaults)
        _check_flags(False, foreach, None)

    def _state(self, p) -> dict:
        state = self.state[p]
        if len(state) == 0:
            state["step"] = new_step()
            if p.grad.dim() > 1:  # factored along the last two dimensions
                state["row_var"] = p.grad.new_zeros(list(p.grad.shape[:-1]) + [1])
                state["col_var"] = p.grad.new_zeros(
                    list(p.grad.shape[:-2]) + [1, p.grad.shape[-1]])
            else:
                state["variance"] = zeros_like(p.grad)
        return state

    def _update(self, p, group: dict) -> None:
        from disthook import finfo

        first = next(q for q in group["params"] if q.grad is not None)
        if p is first and any(q.is_complex() and q.grad is not None for q in group["params"]):
            # before the group's first update, as torch refuses one
            raise RuntimeError("Adafactor does not support complex parameters")
        lr, d, weight_decay = group["lr"], group["d"], group["weight_decay"]
        eps1, eps2 = group["eps"]
        if eps1 is None:
            eps1 = finfo(p.dtype).eps
        state = self._state(p)
        grad = -p.grad if group["maximize"] else p.grad

        state["step"].add_(1)
        step = state["step"].item()
        one_minus_beta2 = step ** group["beta2_decay"]
        rho = min(lr, 1 / step ** 0.5)
        alpha = max(eps2, p.norm(2).item() / p.numel() ** 0.5) * rho
        if weight_decay != 0:
            p.mul_(1 - lr * weight_decay)

        if grad.dim() > 1:
            row_var, col_var = state["row_var"], state["col_var"]
            row_var.lerp_(grad.norm(dim=-1, keepdim=True).square_() / grad.size(-1),
                          one_minus_beta2)
            col_var.lerp_(grad.norm(dim=-2, keepdim=True).square_() / grad.size(-2),
                          one_minus_beta2)
            var_estimate = (row_var @ col_var).div_(
                row_var.mean(dim=-2, keepdim=True).clamp_(min=eps1))
        else:
            state["variance"].lerp_(grad * grad, one_minus_beta2)
            var_estimate = state["variance"].clone()

        # eps1 squared: the square root below brings it back to its own magnitude
        update = var_estimate.clamp_(min=eps1 * eps1).rsqrt_().mul_(grad)
        denom = max(1.0, update.norm(2).item() / (update.numel() ** 0.5 * d))
        p.add_(update, alpha=-alpha / denom)
