"""Automatic differentiation: ``backward``, ``grad``, grad mode and custom Functions."""
from __future__ import annotations

import contextlib
import math
import threading
import warnings
from collections.abc import Mapping

import numpy as np

from disthook import _dtype
from disthook.autograd import anomaly_mode, graph  # noqa: F401
from disthook.autograd.anomaly_mode import detect_anomaly, set_detect_anomaly
from disthook.autograd.engine import _count_dependencies, execute, typename
from disthook.autograd.function import Function, InplaceFunction, once_differentiable  # noqa
from disthook.autograd.grad_mode import (
    enable_grad,
    inference_mode,
    no_grad,
    set_grad_enabled,
)
from disthook.autograd.grad_mode import grad_mode_shown as is_grad_enabled
from disthook.autograd.gradcheck import gradcheck, gradgradcheck  # noqa: F401
from disthook.autograd.graph import SavedTensor  # noqa: F401
from disthook.autograd.variable import Variable

__all__ = [
    "Function",
    "Variable",
    "backward",
    "detect_anomaly",
    "enable_grad",
    "grad",
    "gradcheck",
    "gradgradcheck",
    "inference_mode",
    "is_grad_enabled",
    "no_grad",
    "set_detect_anomaly",
    "set_grad_enabled",
]


def _as_tuple(x) -> tuple:
    """A Tensor or GradientEdge becomes a 1-tuple; any other iterable (list, generator, ...)
    a tuple."""
    from disthook.tensor import Tensor

    if isinstance(x, Tensor) or type(x) is graph.GradientEdge:
        return (x,)
    return tuple(x)


def _inputs_tuple(inputs, api: str) -> tuple:
    """``inputs=`` of backward()/grad(): a Tensor or GradientEdge, any iterable of them, or
    a dict."""
    from disthook.tensor import Tensor

    if isinstance(inputs, Tensor) or type(inputs) is graph.GradientEdge:
        return (inputs,)
    if type(inputs) is dict:
        return tuple(inputs.values())
    if isinstance(inputs, Mapping):
        raise TypeError(f"`inputs` argument to `{api}()` must be a dict, not "
                        f"{type(inputs).__name__}. Other Mapping types are not supported.")
    return tuple(inputs)


def _make_grads(outputs: tuple, grads: tuple) -> tuple:
    """The seed gradients: ones for scalar outputs that require grad, given ones checked.

    Pairs are zipped as torch does: a count mismatch is reported later, by the engine call.
    """
    from disthook._dtype import from_numpy_dtype
    from disthook.tensor import Size, Tensor

    seeds = []
    for i, (out, g) in enumerate(zip(outputs, grads)):
        if type(out) is graph.GradientEdge:
            # what flows into the edge: its node's forward output of that number
            shape, np_dtype = graph.edge_metadata(out)
            needs_grad = True
        elif isinstance(out, Tensor):
            shape, np_dtype = out._data.shape, out._data.dtype
            needs_grad = out._requires_grad
        else:
            raise AssertionError("Expected output to be a torch.Tensor")
        if isinstance(g, Tensor):
            if g._data.shape != shape:
                raise RuntimeError(
                    f"Mismatch in shape: grad_output[{_index(grads, g)}] has a shape of "
                    f"{g.shape} and output[{_index(outputs, out)}] has a shape of "
                    f"{Size(shape)}.")
            if (_dtype.kind(g._data.dtype) == "c") != (_dtype.kind(np_dtype) == "c"):
                raise RuntimeError(
                    "For complex Tensors, both grad_output and output are required to have "
                    f"the same dtype. Mismatch in dtype: grad_output[{_index(grads, g)}] has "
                    f"a dtype of {g.dtype} and output[{_index(outputs, out)}] has a dtype of "
                    f"{from_numpy_dtype(np_dtype)}.")
            if g._data.dtype != np_dtype:  # the output's dtype before any hook sees it, as
                g = g.to(np_dtype)  # torch's engine casts a root's gradient (a float32
                # seed of a float64 mean was divided in float32)
            seeds.append(g)
        elif g is None:
            if needs_grad:
                if math.prod(shape) != 1:
                    raise RuntimeError("grad can be implicitly created only for scalar outputs")
                if _dtype.kind(np_dtype) != "f":
                    raise RuntimeError(
                        "grad can be implicitly created only for real scalar outputs but got "
                        f"{from_numpy_dtype(np_dtype)}")
                g = Tensor._make(np.ones(shape, dtype=np_dtype), None, 0)
            seeds.append(g)
        else:
            raise TypeError(
                f"gradients can be either Tensors or None, but got {type(g).__name__}")
    return tuple(seeds)


def _grads_batched(outs: tuple, gouts: tuple, ins: tuple, retain_graph: bool,
                   create_graph: bool, allow_unused: bool) -> tuple:
    """``grad(..., is_grads_batched=True)``: dim 0 of each given gradient is a batch, and
    each input's gradient gets that dim (a Jacobian's rows in one call). torch maps one
    backward over the batch with vmap; here one backward runs per row, the graph kept for
    the next, and the rows are stacked (so a tensor hook fires once per row)."""
    from disthook.tensor import Size, Tensor, stack

    for out, g in zip(outs, gouts):
        if isinstance(g, Tensor) and type(out) is graph.GradientEdge:
            raise RuntimeError("Batched grads are not supported with GradientEdge")
        if isinstance(g, Tensor) and (g.dim() == 0 or g.shape[1:] != out.shape):
            raise RuntimeError(
                "If `is_grads_batched=True`, we interpret the first dimension of each "
                "grad_output as the batch dimension. The sizes of the remaining dimensions "
                "are expected to match the shape of corresponding output, but a mismatch "
                f"was detected: grad_output[{_index(gouts, g)}] has a shape of "
                f"{Size(g.shape[2:])} and output[{_index(outs, out)}] has a shape of "
                f"{out.shape}. If you only want some tensors in `grad_output` to be "
                "considered batched, consider using vmap.")
    sizes = [g.shape[0] for g in gouts if isinstance(g, Tensor)]
    if len(set(sizes)) > 1:
        raise ValueError("vmap: Expected all tensors to have the same size in the mapped "
                         f"dimension, got sizes {sizes} for the mapped dimension")
    rows = []
    for i in range(sizes[0] if sizes else 1):
        seeds = _make_grads(outs, tuple(g[i] if isinstance(g, Tensor) else g for g in gouts))
        last = i == (sizes[0] if sizes else 1) - 1
        rows.append(_run_backward(outs, seeds, retain_graph or not last, create_graph, ins,
                                  allow_unreachable=allow_unused, accumulate_grad=False))
    return tuple(None if row[0] is None else stack(list(row)) for row in zip(*rows))


def _index(items: tuple, x) -> int:
    # torch names the first position holding this object (list.index compares by identity
    # first, and Tensors are never compared by value here)
    for i, item in enumerate(items):
        if item is x:
            return i
    return 0


def _reach_inputs_elsewhere(outputs: tuple, inputs: tuple, create_graph: bool) -> None:
    """Inputs that live in another process (a deployed model's parameters) are reached
    through the nodes of this graph that stand for that process's part of it: each such
    node is asked to give the input an edge (``_reach_from``), so that the engine takes
    the gradient that process computes for it, as for any input."""
    elsewhere = [t for t in inputs if getattr(t, "_reach_from", None) is not None]
    if not elsewhere:
        return
    roots = [n for n in (o.node if type(o) is graph.GradientEdge else o._grad_fn
                         for o in outputs) if n is not None]
    nodes = {*roots, *_count_dependencies(roots)}  # every node the outputs reach
    for t in elsewhere:
        t._reach_from(nodes, create_graph)


# a thread on which differentiating is refused, and why (see refuse_differentiation)
_refusal = threading.local()


@contextlib.contextmanager
def refuse_differentiation(why: str):
    """Within the block, on this thread, ``backward()`` and ``autograd.grad`` raise
    ``RuntimeError(why)`` (``why`` None: they run again, as in a closure the block calls): an
    optimizer's step over a deployed model's parameters, which each worker steps over its
    own stage's, where a step that differentiates would see only that stage's graph."""
    before = getattr(_refusal, "why", None)
    _refusal.why = why
    try:
        yield
    finally:
        _refusal.why = before


def _check_refusal() -> None:
    refused = getattr(_refusal, "why", None)
    if refused is not None:
        raise RuntimeError(refused)


def _run_backward(outputs: tuple, seeds: tuple, retain_graph: bool, create_graph: bool,
                  inputs: tuple, allow_unreachable: bool, accumulate_grad: bool) -> tuple:
    """Check the roots and inputs as torch's engine entry point does, then run the engine."""
    from disthook.tensor import Tensor


    if len(outputs) != len(seeds):
        raise RuntimeError(f"got {len(outputs)} tensors and {len(seeds)} gradients")
    for i, out in enumerate(outputs):
        if type(out) is not graph.GradientEdge and (
                not out._requires_grad or out._grad_from_base and out._grad_fn is None):
            msg = f"element {i} of tensors does not require grad and does not have a grad_fn"
            for t in inputs:  # a deployed parameter knows where its graph went, if it does
                why = getattr(t, "_graph_elsewhere", None)
                if why is not None and (why := why()) is not None:
                    raise NotImplementedError(f"{msg}: {why}")
            raise RuntimeError(msg)
    for t in inputs:
        if type(t) is graph.GradientEdge:
            continue  # its node runs (backward) or gives its gradient (grad), as it is
        if not isinstance(t, Tensor):
            raise RuntimeError(
                f"all inputs have to be Tensors or GradientEdges, but got {typename(t)}")
        if accumulate_grad:
            # backward(inputs=[non_leaf]) fills its .grad through retain_grad, as in torch
            t.retain_grad()
        if not t._requires_grad:
            raise RuntimeError("One of the differentiated Tensors does not require grad")
    _reach_inputs_elsewhere(outputs, inputs, create_graph)
    results = execute(outputs, seeds, retain_graph=retain_graph, create_graph=create_graph,
                      inputs=inputs or None, accumulate=accumulate_grad)
    if not allow_unreachable:
        for i, g in enumerate(results):
            if g is None:
                raise RuntimeError(
                    f"The differentiated Tensor at index {i} appears to not have been used in "
                    "the graph. Set allow_unused=True if this is the desired behavior.")
    return None if results is None else tuple(results)


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False,
             grad_variables=None, inputs=None) -> None:
    """Accumulate into ``.grad`` of the leaves (or of ``inputs``) the gradients of ``tensors``."""
    from disthook.tensor import Tensor

    _check_refusal()
    if grad_variables is not None:
        warnings.warn("`grad_variables` is deprecated. Use `grad_tensors` instead.",
                      FutureWarning, stacklevel=2)
        if grad_tensors is not None:
            raise RuntimeError(
                "`grad_tensors` and `grad_variables` (deprecated) arguments both passed to "
                "`backward()`. Please only use `grad_tensors`.")
        grad_tensors = grad_variables
    ins = () if inputs is None else _inputs_tuple(inputs, "backward")
    if inputs is not None and not ins:
        raise RuntimeError("`inputs` argument to `backward()` cannot be empty.")
    outputs = _as_tuple(tensors)
    grads = (None,) * len(outputs) if grad_tensors is None else (
        (grad_tensors,) if isinstance(grad_tensors, Tensor) else tuple(grad_tensors))
    seeds = _make_grads(outputs, grads)
    if retain_graph is None:
        retain_graph = create_graph
    if create_graph:
        _warn_create_graph_cycle()
    _run_backward(outputs, seeds, retain_graph, create_graph, ins,
                  allow_unreachable=True, accumulate_grad=True)


CREATE_GRAPH_CYCLE_WARNING = (
    "Using backward() with create_graph=True will create a reference cycle between the "
    "parameter and its gradient which can cause a memory leak. We recommend using "
    "autograd.grad when creating the graph to avoid this. If you have to use this function, "
    "make sure to reset the .grad fields of your parameters to None after use to break the "
    "cycle and avoid the leak."
)
_warned_create_graph = False
_warn_always = False


def set_warn_always(b: bool) -> None:
    """``torch.set_warn_always``: while True, the warnings torch gives once per process
    (TORCH_WARN_ONCE, like backward(create_graph=True)'s) come every time."""
    global _warn_always
    _warn_always = bool(b)


def is_warn_always_enabled() -> bool:
    return _warn_always


def _warn_create_graph_cycle() -> None:
    """torch's warning for backward(create_graph=True): once per process, hooks or not
    (measured on 2.13: a plain leaf, a Linear, a module with full backward hooks), or each
    time under set_warn_always(True)."""
    global _warned_create_graph
    if _warned_create_graph and not _warn_always:
        return
    _warned_create_graph = True
    from disthook.utils.hooks import _caller_stacklevel

    warnings.warn(CREATE_GRAPH_CYCLE_WARNING, UserWarning, stacklevel=_caller_stacklevel())


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
         only_inputs=True, allow_unused=None, is_grads_batched=False,
         materialize_grads=False):
    """The gradients of ``outputs`` w.r.t. ``inputs``, without touching any ``.grad``.

    ``inputs`` may be a dict (``dict(model.named_parameters())``): the result is then a dict
    with the same keys.
    """
    from disthook.tensor import Tensor, zeros_like

    _check_refusal()
    if materialize_grads and allow_unused is False:
        raise ValueError("Expected allow_unused to be True or not passed when "
                         "materialize_grads=True, but got: allow_unused=False.")
    if allow_unused is None:
        allow_unused = materialize_grads
    outs = _as_tuple(outputs)
    ins = _inputs_tuple(inputs, "grad")
    if not ins:
        raise RuntimeError("`inputs` argument to `grad()` cannot be empty.")
    if not only_inputs:
        warnings.warn("only_inputs argument is deprecated and is ignored now (defaults to "
                      "True). To accumulate gradient for other parts of the graph, please use "
                      "torch.autograd.backward.", FutureWarning, stacklevel=2)
    gouts = (None,) * len(outs) if grad_outputs is None else (
        (grad_outputs,) if isinstance(grad_outputs, Tensor) else tuple(grad_outputs))
    if retain_graph is None:
        retain_graph = create_graph
    if is_grads_batched:
        result = _grads_batched(outs, gouts, ins, retain_graph, create_graph, allow_unused)
    else:
        result = _run_backward(outs, _make_grads(outs, gouts), retain_graph, create_graph,
                               ins, allow_unreachable=allow_unused, accumulate_grad=False)
    if materialize_grads:
        if any(g is None and type(t) is graph.GradientEdge for g, t in zip(result, ins)):
            raise RuntimeError(
                "materialize_grads cannot be used when the given input is a GradientEdge")
        result = tuple(zeros_like(t, requires_grad=create_graph) if g is None else g
                       for g, t in zip(result, ins))
    if type(inputs) is dict:
        return dict(zip(inputs.keys(), result))
    return result
