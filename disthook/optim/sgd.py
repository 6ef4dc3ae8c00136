"""SGD with momentum, dampening, Nesterov momentum, weight decay and ``maximize``: torch's
single-tensor algorithm, step for step."""
from __future__ import annotations

import numpy as np

from disthook.optim.optimizer import Optimizer, bump_versions, chunked, flat_arrays


class SGD(Optimizer):
    def __init__(self, params, lr: float = 1e-3, momentum: float = 0, dampening: float = 0,
                 weight_decay: float = 0, nesterov: bool = False, *, maximize: bool = False,
                 foreach: bool | None = None, differentiable: bool = False,
                 fused: bool | None = None) -> None:
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if momentum < 0.0:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        defaults = {"lr": lr, "momentum": momentum, "dampening": dampening,
                    "weight_decay": weight_decay, "nesterov": nesterov, "maximize": maximize,
                    "foreach": foreach, "differentiable": differentiable, "fused": fused}
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, defaults)
        _check_flags(differentiable, foreach, fused)

    def _update(self, p, group: dict) -> None:
        momentum, lr, dampening = group["momentum"], group["lr"], group["dampening"]
        grad = -p.grad if group["maximize"] else p.grad
        if group["weight_decay"] != 0:
            if p.grad.is_sparse:  # torch's step adds the dense parameter to the sparse gradient
                raise RuntimeError("add(sparse, dense) is not supported. Use add(dense, sparse) "
                                   "instead.")
            grad = grad.add(p, alpha=group["weight_decay"])
        buf = None
        if momentum != 0:
            state = self.state[p]
            buf = state.get("momentum_buffer")
            if buf is None:  # the first step: the buffer is the gradient
                buf = grad.detach().clone()
                state["momentum_buffer"] = buf
                grad = grad.add(buf, alpha=momentum) if group["nesterov"] else buf
                p.add_(grad, alpha=-lr)
                return
        arrays = flat_arrays(p, grad, *(() if buf is None else (buf,)))
        if arrays is not None:
            sgd_arrays(*arrays, momentum=momentum, dampening=dampening,
                       nesterov=group["nesterov"], lr=lr)
            bump_versions((p, 1), *(() if buf is None else ((buf, 2),)))
            return
        if buf is not None:
            buf.mul_(momentum).add_(grad, alpha=1 - dampening)
            grad = grad.add(buf, alpha=momentum) if group["nesterov"] else buf
        p.add_(grad, alpha=-lr)


def sgd_arrays(param, grad, buf=None, *, momentum: float, dampening: float, nesterov: bool,
               lr: float) -> None:
    """The Tensor path's operations above on flat numpy arrays, a chunk at a time, in place
    (``buf``: the momentum buffer after the first step): the same bits."""
    dt = param.dtype.type
    (scratch,), slices = chunked(param)
    for s in slices:
        g, t = grad[s], scratch[:s.stop - s.start]
        if buf is not None:
            b = buf[s]
            np.multiply(b, dt(momentum), out=b)  # buf = momentum * buf + (1 - dampening) * g
            if 1 - dampening == 1:
                np.add(b, g, out=b)
            else:
                np.multiply(g, dt(1 - dampening), out=t)
                np.add(b, t, out=b)
            if nesterov:  # g + momentum * buf
                np.multiply(b, dt(momentum), out=t)
                g = np.add(g, t, out=t)
            else:
                g = b
        np.multiply(g, dt(-lr), out=t)  # param -= lr * g
        np.add(param[s], t, out=param[s])


def _check_flags(differentiable: bool, foreach, fused) -> None:
    """``foreach`` and ``fused`` select torch kernels that compute the same update; disthook
    runs one implementation for all. Differentiating through the step is not supported."""
    if fused and differentiable:
        raise RuntimeError("`fused` does not support `differentiable`")
    if fused and foreach:
        raise RuntimeError("`fused` and `foreach` cannot be `True` together.")
    if differentiable:
        raise NotImplementedError("disthook optimizers do not support differentiable=True")
