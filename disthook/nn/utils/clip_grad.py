"""Gradient clipping: rescale all gradients together by their total norm, or clamp each
element. Both change ``.grad`` in place, under ``no_grad``.

Parameters of a deployed model (``RemoteParameter``) may be among them: their gradients are
measured and changed on the workers that hold them (the type offers ``_grad_norms``,
``_scale_grads`` and ``_clamp_grads`` for a list of its parameters), so the total norm and
the clipping are exactly one process's and no gradient crosses the wire."""
from __future__ import annotations

import types
import warnings

from disthook.autograd import grad_mode
from disthook.tensor import Tensor, stack, tensor

NORM_EPS = 1e-6  # added to the total norm before dividing, as torch does


def _as_list(parameters) -> list:
    if isinstance(parameters, Tensor) or _remote_kind(parameters) is not None:
        return [parameters]
    is_generator = isinstance(parameters, types.GeneratorType)
    parameters = list(parameters)
    if is_generator and not parameters:
        warnings.warn("`parameters` is an empty generator, no gradient clipping will occur.",
                      UserWarning, stacklevel=4)
    return parameters


def refuse_sparse(tensors, kernel: str) -> None:
    """torch's NotImplementedError where a gradient is sparse (nn.Embedding(sparse=True)):
    its norm and its clamp have no sparse kernel there."""
    if any(t is not None and t.is_sparse for t in tensors):
        raise NotImplementedError(
            f"Could not run 'aten::{kernel}' with arguments from the 'SparseCPU' backend: "
            "a sparse gradient (from nn.Embedding or nn.EmbeddingBag with sparse=True) cannot "
            "be clipped, as in torch; build the layer with sparse=False to clip its gradient")


def clip_grad_norm_(parameters, max_norm: float, norm_type: float = 2.0,
                    error_if_nonfinite: bool = False, foreach: bool | None = None) -> Tensor:
    """Scale the gradients so that their joint ``norm_type``-norm is at most ``max_norm``;
    returns that norm (before clipping) as a 0-d tensor."""
    with grad_mode.no_grad():
        params = _as_list(parameters)
        local, remote = _split(params)
        grads = [p.grad for p in local if p.grad is not None]
        refuse_sparse(grads, "linalg_vector_norm")
        norm_type = float(norm_type)
        norm_of = {id(p): p.grad.norm(norm_type) for p in local if p.grad is not None}
        for kind, of_kind in remote.items():  # measured on their workers, in one go each
            norm_of.update(zip(map(id, of_kind), kind._grad_norms(of_kind, norm_type)))
        # in the parameters' order, as one process sums them
        norms = [norm_of[id(p)] for p in params if norm_of.get(id(p)) is not None]
        if not norms:
            return tensor(0.0)
        total_norm = stack(norms).norm(norm_type)
        if error_if_nonfinite and not total_norm.isfinite().item():
            raise RuntimeError(
                f"The total norm of order {norm_type} for gradients from `parameters` is "
                "non-finite, so it cannot be clipped. To disable this error and scale the "
                "gradients by the non-finite norm anyway, set `error_if_nonfinite=False`")
        clip_coef = (float(max_norm) / (total_norm + NORM_EPS)).clamp(max=1.0)
        for g in grads:
            g.mul_(clip_coef)
        for kind, of_kind in remote.items():
            kind._scale_grads(of_kind, clip_coef)
        return total_norm


def get_total_norm(tensors, norm_type: float = 2.0, error_if_nonfinite: bool = False,
                   foreach: bool | None = None) -> Tensor:
    """The ``norm_type``-norm of the norms of ``tensors`` (the first half of
    ``clip_grad_norm_``, over tensors themselves, usually gradients)."""
    tensors = [tensors] if isinstance(tensors, Tensor) else list(tensors)
    norm_type = float(norm_type)
    with grad_mode.no_grad():
        if not tensors:
            return tensor(0.0)
        refuse_sparse(tensors, "linalg_vector_norm")
        total_norm = stack([t.norm(norm_type) for t in tensors]).norm(norm_type)
    if error_if_nonfinite and not total_norm.isfinite().item():
        raise RuntimeError(
            f"The total norm of order {norm_type} for gradients from `parameters` is "
            "non-finite, so it cannot be clipped. To disable this error and scale the "
            "gradients by the non-finite norm anyway, set `error_if_nonfinite=False`")
    return total_norm


def clip_grads_with_norm_(parameters, max_norm: float, total_norm: Tensor,
                          foreach: bool | None = None) -> None:
    """Scale the gradients by ``max_norm / (total_norm + 1e-6)``, at most 1 (the second half
    of ``clip_grad_norm_``, with the norm given)."""
    with grad_mode.no_grad():
        local, remote = _split(_as_list(parameters))
        clip_coef = (float(max_norm) / (total_norm + NORM_EPS)).clamp(max=1.0)
        for p in local:
            if p.grad is not None:
                p.grad.mul_(clip_coef)
        for kind, of_kind in remote.items():
            kind._scale_grads(of_kind, clip_coef)


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
        local, remote = _split(_as_list(parameters))
        refuse_sparse([p.grad for p in local], "clamp_min_")
        for p in local:
            if p.grad is not None:
                p.grad.clamp_(min=-clip_value, max=clip_value)
        for kind, of_kind in remote.items():
            kind._clamp_grads(of_kind, clip_value)


def _remote_kind(p):
    """The type of a parameter that lives elsewhere (it measures and changes its gradients
    where it lives), or None."""
    kind = type(p)
    return kind if hasattr(kind, "_grad_norms") and hasattr(kind, "_scale_grads") else None


def _split(params: list) -> tuple[list, dict]:
    """(local tensors, {remote type: its parameters}), in order; anything else refused."""
    local, remote = [], {}
    for p in params:
        kind = _remote_kind(p)
        if kind is not None:
            remote.setdefault(kind, []).append(p)
        elif isinstance(p, Tensor):
            local.append(p)
        else:
            raise TypeError(f"expected parameters (Tensors), got {type(p).__name__}")
    return local, remote
