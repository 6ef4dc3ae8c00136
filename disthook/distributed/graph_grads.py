"""What a ``backward(create_graph=True)`` through a deployed model leaves on its workers (the
parameters' ``.grad`` kept there with their graph, ``RemoteBackward0._backward_with_graph``)
and what a program meets where that graph is not there: a later backward naming such a
parameter, a double backward through a chain of stages (refused, with the ``placement=``
that deploys the same model part by part, where it works)."""
from __future__ import annotations

__all__ = ["create_graph_chain_refused", "forget_graph_grads", "graph_elsewhere",
           "part_by_part"]


def forget_graph_grads(params) -> None:
    """The workers' ``.grad`` of ``params`` is about to change (zero_grad, ``p.grad = g``,
    another backward): ``p.grad`` is no longer the value a ``backward(create_graph=True)``
    kept with its graph (``_backward_with_graph``)."""
    for p in params:
        p._model.__dict__.get("_graph_grads", {}).pop(p._path, None)


def graph_elsewhere(param) -> str | None:
    """Why a backward naming the placed parameter ``param`` as an input finds a root
    without a graph, where its ``.grad`` was computed with its graph on the worker (a
    ``backward(create_graph=True)`` through its part, ``_backward_with_graph``); else None."""
    parts = param._model.__dict__.get("_grads_with_graph", ())
    if not any(p == "" or param._path.startswith(p + ".") for p in parts):
        return None
    return (f"the gradient of {param._path!r}, a parameter of a deployed model, has a graph "
            "on its worker, but .grad here is its value: a backward(create_graph=True) gives "
            "p.grad with its graph only where that backward, through one call of the "
            "parameter's part, made it, not where it added to a gradient that another "
            "backward or another call of the part left (a Hessian-vector product from "
            "p.grad: AdaHessian, PyHessian). Zero the gradients before each "
            "backward(create_graph=True) (optimizer.zero_grad()), call the part once per "
            "forward" + (f" (with chunks={param._model._chunks} each micro-batch calls it: "
                         "deploy with chunks=1 for this)" if param._model._chunks > 1 else "")
            + ", or take the products in one process (local = model.to_local())")


def part_by_part(model) -> str:
    """The ``placement=`` argument that deploys a chain of stages part by part instead (its
    forward then runs on the client, calling each part on its worker)."""
    names = getattr(model, "_stage_names", None) or []
    placement = {path: stage for stage, paths in enumerate(names) for path in paths if path}
    return f"placement={placement!r}" if placement else "placement={...}"


def create_graph_chain_refused(model) -> str:
    """The refusal of a double backward through a chain of stages, with the deploy call that
    runs the same model from here, part by part, where it works."""
    way = part_by_part(model)
    return ("backward(create_graph=True) or autograd.grad(..., create_graph=True) through a "
            "model deployed as a chain of stages (its children cut into contiguous stages, "
            "each stage sending its activations and gradients straight to the next): those "
            "gradients travel as values, without a graph, so they cannot be differentiated "
            "again (gradient penalties, double backward). Deploy it with " + way +
            " instead: its forward then runs here, calling each part on its worker, and "
            "double backward works; or compute that part in one process "
            "(remote.to_local()), or keep create_graph=False")
