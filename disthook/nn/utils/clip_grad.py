"""Gradient clipping: rescale all gradients together by their total norm, or clamp each
element. Both change ``.grad`` in place, under ``no_grad``."""
from __future__ import annotations

import types
import warnings

from disthook.autograd import grad_mode
from disthook.tensor import Tensor, stack, tensor

NORM_EPS = 1e-6  # added to the total norm before dividing, as torch does


def _as_list(parameters) -> list:
    if isinstance(parameters, Tensor):
        return [parameters]
    is_generator = isinstance(parameters, types.GeneratorType)
    parameters = list(parameters)
    if is_generator and not parameters:
        warnings.warn("`parameters` is an empty generator, no gradient clipping will occur.",
                      UserWarning, stacklevel=4)
    return parameters


def clip_grad_norm_(parameters, max_norm: float, norm_type: float = 2.0,
                    error_if_nonfinite: bool = False, foreach: bool | None = None) -> Tensor:
    """Scale the gradients so that their joint ``norm_type``-norm is at most ``max_norm``;
    returns that norm (before clipping) as a 0-d tensor."""
    with grad_mode.no_grad():
        grads = [p.grad for p in _as_list(parameters) if p.grad is not None]
        norm_type = float(norm_type)
        if not grads:
            return tensor(0.0)
        total_norm = stack([g.norm(norm_type) for g in grads]).norm(norm_type)
        if error_if_nonfinite and not total_norm.isfinite().item():
            raise RuntimeError(
                f"The total norm of order {norm_type} for gradients from `parameters` is "
                "non-finite, so it cannot be clipped. To disable this error and scale the "
                "gradients by the non-finite norm anyway, set `error_if_nonfinite=False`")
        clip_coef = (float(max_norm) / (total_norm + NORM_EPS)).clamp(max=1.0)
        for g in grads:
            g.mul_(clip_coef)
        return total_norm


def clip_grad_norm(parameters, max_norm: float, norm_type: float = 2.0,
                   error_if_nonfinite: bool = False, foreach: bool | None = None) -> Tensor:
    """Deprecated alias of ``clip_grad_norm_``."""
    warnings.warn("`torch.nn.utils.clip_grad_norm` is now deprecated in favor of "
                  "`torch.nn.utils.clip_grad_norm_`.", FutureWarning, stacklevel=2)
    return clip_grad_norm_(parameters, max_norm, norm_type, error_if_nonfinite, foreach)


def clip_grad_value_(parameters, clip_value: float, foreach: bool | None = None) -> None:
    """Clamp every gradient element into ``[-clip_value, clip_value]``."""
    clip_value = float(clip_value)
    with grad_mode.no_grad():
        for p in _as_list(parameters):
            if p.grad is not None:
                p.grad.clamp_(min=-clip_value, max=clip_value)
