"""Automatic differentiation: ``backward``, ``grad``, grad mode and custom Functions."""
from __future__ import annotations

from collections.abc import Sequence

from disthook.autograd import graph  # noqa: F401
from disthook.autograd.engine import execute
from disthook.autograd.function import Function, InplaceFunction, once_differentiable  # noqa
from disthook.autograd.grad_mode import (  # noqa: F401
    enable_grad, inference_mode, is_grad_enabled, no_grad, set_grad_enabled,
)

__all__ = ["backward", "grad", "Function", "Variable", "no_grad", "enable_grad",
           "set_grad_enabled", "is_grad_enabled", "inference_mode"]


def Variable(data, requires_grad: bool = False, volatile: bool = False):  # noqa: N802
    """Old API: returns the tensor itself (requires_grad set when asked)."""
    from disthook.tensor import Tensor, tensor

    t = data if isinstance(data, Tensor) else tensor(data)
    if requires_grad:
        t.requires_grad_(True)
    return t


def _as_tuple(x, what: str) -> tuple:
    from disthook.tensor import Tensor

    if x is None:
        return ()
    if isinstance(x, Tensor):
        return (x,)
    if isinstance(x, Sequence):
        return tuple(x)
    raise TypeError(f"{what} must be a Tensor or a sequence of Tensors, got {type(x).__name__}")


def _make_grads(outputs: tuple, grads: tuple, is_grads_batched: bool = False) -> list:
    """The seed gradients: ones for scalar outputs, the given tensors checked by shape."""
    from disthook.tensor import Tensor, ones_like, tensor

    if len(grads) != len(outputs):
        raise RuntimeError(f"grad can be implicitly created only for scalar outputs"
                           if not grads else
                           f"got {len(grads)} gradients for {len(outputs)} outputs")
    seeds = []
    for i, (out, g) in enumerate(zip(outputs, grads)):
        if g is None:
            if out._data.size != 1:
                raise RuntimeError("grad can be implicitly created only for scalar outputs")
            if out._data.dtype.kind != "f":
                raise RuntimeError(
                    "grad can be implicitly created only for real scalar outputs but got "
                    f"{out.dtype}")
            seeds.append(ones_like(out))
            continue
        if not isinstance(g, Tensor):
            g = tensor(g, dtype=out.dtype)
        if g.shape != out.shape:
            raise RuntimeError(
                f"Mismatch in shape: grad_output[{i}] has a shape of {g.shape} and output[{i}] "
                f"has a shape of {out.shape}.")
        seeds.append(g)
    return seeds


def _check_roots(outputs: tuple) -> None:
    for i, out in enumerate(outputs):
        if not out._requires_grad:
            raise RuntimeError(
                f"element {i} of tensors does not require grad and does not have a grad_fn")


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False,
             grad_variables=None, inputs=None) -> None:
    """Accumulate into ``.grad`` of the leaves (or of ``inputs``) the gradients of ``tensors``."""
    outputs = _as_tuple(tensors, "tensors")
    grads = _as_tuple(grad_tensors if grad_tensors is not None else grad_variables,
                      "grad_tensors")
    if not grads:
        grads = (None,) * len(outputs)
    if inputs is not None:
        inputs = _as_tuple(inputs, "inputs")
        if not inputs:
            raise RuntimeError("'inputs' argument to backward() cannot be empty.")
        for t in inputs:
            if not t._requires_grad:
                raise RuntimeError("One of the differentiated Tensors does not require grad")
    _check_roots(outputs)
    seeds = _make_grads(outputs, grads)
    if retain_graph is None:
        retain_graph = create_graph
    execute(outputs, seeds, retain_graph=retain_graph, create_graph=create_graph,
            inputs=inputs, accumulate=True)


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
         only_inputs=True, allow_unused=None, is_grads_batched=False,
         materialize_grads=False) -> tuple:
    """The gradients of ``outputs`` w.r.t. ``inputs``, without touching any ``.grad``."""
    from disthook.tensor import zeros_like

    outs = _as_tuple(outputs, "outputs")
    ins = _as_tuple(inputs, "inputs")
    if not ins:
        raise RuntimeError("grad requires non-empty inputs.")
    if is_grads_batched:
        raise NotImplementedError("is_grads_batched=True is not supported by disthook")
    if allow_unused is None:
        allow_unused = materialize_grads
    if materialize_grads and allow_unused is False:
        raise ValueError("Expected allow_unused to be True or not passed when "
                         "materialize_grads=True, but got: allow_unused=False.")
    for t in ins:
        if not t._requires_grad:
            raise RuntimeError("One of the differentiated Tensors does not require grad")
    gouts = _as_tuple(grad_outputs, "grad_outputs") or (None,) * len(outs)
    _check_roots(outs)
    seeds = _make_grads(outs, gouts)
    if retain_graph is None:
        retain_graph = create_graph
    result = execute(outs, seeds, retain_graph=retain_graph, create_graph=create_graph,
                     inputs=ins, accumulate=False)
    final = []
    for t, g in zip(ins, result):
        if g is None:
            if not allow_unused:
                raise RuntimeError(
                    "One of the differentiated Tensors appears to not have been used in the "
                    "graph. Set allow_unused=True if this is the desired behavior.")
            if materialize_grads:
                g = zeros_like(t)
        final.append(g)
    return tuple(final)
