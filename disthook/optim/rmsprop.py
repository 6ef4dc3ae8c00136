"""RMSprop (optionally centered, with momentum): torch's single-tensor algorithm."""
from __future__ import annotations

import numpy as np

from disthook.optim import optimizer
from disthook.optim.optimizer import Optimizer, _check_hyperparameters, new_step
from disthook.optim.sgd import _check_flags
from disthook.tensor import zeros_like


class RMSprop(Optimizer):
    sparse_refusal = "RMSprop does not support sparse gradients"

    def __init__(self, params, lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8,
                 weight_decay: float = 0, momentum: float = 0, centered: bool = False,
                 capturable: bool = False, foreach: bool | None = None,
                 maximize: bool = False, differentiable: bool = False) -> None:
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= momentum:
            raise ValueError(f"Invalid momentum value: {momentum}")
        _check_hyperparameters(lr, eps, weight_decay, alpha=alpha)
        defaults = {"lr": lr, "momentum": momentum, "alpha": alpha, "eps": eps,
                    "centered": centered, "weight_decay": weight_decay,
                    "capturable": capturable, "foreach": foreach, "maximize": maximize,
                    "differentiable": differentiable}
        super().__init__(params, defaults)
        _check_flags(differentiable, foreach, None)

    def _update(self, p, group: dict) -> None:
        alpha, momentum = group["alpha"], group["momentum"]
        state = self.state[p]
        if len(state) == 0:
            state["step"] = new_step()
            state["square_avg"] = zeros_like(p)
            if momentum > 0:
                state["momentum_buffer"] = zeros_like(p)
            if group["centered"]:
                state["grad_avg"] = zeros_like(p)
        grad = -p.grad if group["maximize"] else p.grad
        square_avg = state["square_avg"]

        state["step"].add_(1)
        if group["weight_decay"] != 0:
            grad = grad.add(p, alpha=group["weight_decay"])
        grad_avg = state["grad_avg"] if group["centered"] else None
        buf = state["momentum_buffer"] if momentum > 0 else None
        p, grad, square_avg, grad_avg, buf = optimizer.real_pairs(p, p, grad, square_avg,
                                                                  grad_avg, buf)
        more = [t for t in (grad_avg, buf) if t is not None]
        arrays = optimizer.flat_arrays(p, grad, square_avg, *more)
        if arrays is not None:
            param, g, sq = arrays[:3]
            rest = iter(arrays[3:])
            rmsprop_arrays(param, g, sq, None if grad_avg is None else next(rest),
                           None if buf is None else next(rest), alpha=alpha, eps=group["eps"],
                           momentum=momentum, lr=group["lr"])
            # square_avg and the momentum buffer are written twice (mul_, add_), grad_avg once
            optimizer.bump_versions((square_avg, 2), (p, 1),
                                    *[(t, 1 if t is grad_avg else 2) for t in more])
            return
        square_avg.mul_(alpha).add_(grad * grad, alpha=1 - alpha)
        if grad_avg is not None:
            grad_avg.add_(grad - grad_avg, alpha=1 - alpha)  # lerp_(grad, 1 - alpha)
            avg = square_avg.add(grad_avg * grad_avg, alpha=-1).sqrt_()
        else:
            avg = square_avg.sqrt()
        avg = avg.add_(group["eps"])
        if buf is not None:
            buf.mul_(momentum).add_(grad / avg)
            p.add_(buf, alpha=-group["lr"])
        else:
            p.add_(grad / avg, alpha=-group["lr"])


def rmsprop_arrays(param, grad, square_avg, grad_avg, buf, *, alpha: float, eps: float,
                   momentum: float, lr: float) -> None:
    """The Tensor path's operations above on flat numpy arrays, a chunk at a time, in place
    (``grad_avg`` when centered, ``buf`` with momentum, else None): the same bits."""
    dt = param.dtype.type
    (avg, t), slices = optimizer.chunked(param, 2)
    for s in slices:
        g, sq, k = grad[s], square_avg[s], s.stop - s.start
        a, x = avg[:k], t[:k]
        np.multiply(sq, dt(alpha), out=sq)  # square_avg = alpha * square_avg + (1 - alpha) g²
        np.multiply(g, g, out=x)
        np.multiply(x, dt(1 - alpha), out=x)
        np.add(sq, x, out=sq)
        if grad_avg is not None:
            ga = grad_avg[s]
            np.subtract(g, ga, out=x)  # grad_avg += (1 - alpha) * (grad - grad_avg)
            np.multiply(x, dt(1 - alpha), out=x)
            np.add(ga, x, out=ga)
            np.multiply(ga, ga, out=x)  # avg = sqrt(square_avg - grad_avg²)
            np.multiply(x, dt(-1), out=x)
            np.add(sq, x, out=a)
            np.sqrt(a, out=a)
        else:
            np.sqrt(sq, out=a)
        np.add(a, dt(eps), out=a)
        np.divide(g, a, out=x)  # grad / avg
        if buf is not None:
            b = buf[s]
            np.multiply(b, dt(momentum), out=b)
            np.add(b, x, out=b)
            np.multiply(b, dt(-lr), out=x)
        else:
            np.multiply(x, dt(-lr), out=x)
        np.add(param[s], x, out=param[s])
