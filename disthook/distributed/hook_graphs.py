"""What a client hook's result is computed from (the hook server's checks: a graph that
reaches a deployed model's call, or tensors of this process besides the hook's own), and a
deployed parameter's tensor hook that one backward fires once per call of the model (with
the warning that says so)."""
from __future__ import annotations

import warnings

from disthook.autograd import engine, grad_mode
from disthook.autograd.graph import AccumulateGrad, walk
from disthook.distributed import given_tensors
from disthook.distributed.tap_node import RemoteTapBackward0
from disthook.tensor import Tensor

__all__: list[str] = []


def _graph_has(value: Tensor, passed, found) -> bool:
    """Whether the graph of ``value``, short of the nodes ``passed(node)`` says to go by,
    holds a node that ``found(node)`` says is one."""
    return any(found(node) for node in walk([value._grad_fn], passed))


def _reaches_remote(value: Tensor, stops: dict) -> bool:
    """Whether the graph of ``value``, short of the nodes in ``stops`` (id -> node), holds a
    node of a deployed model's call (whose backward the client's own backward runs)."""
    from disthook.distributed.autograd_node import RemoteBackward0

    return _graph_has(value, lambda node: id(node) in stops, lambda node: isinstance(
        node, (RemoteBackward0, RemoteTapBackward0)))


def _reaches_own(value: Tensor, leaves: list, bases: list, since: int) -> bool:
    """Whether ``value``, a client hook's result (or a tensor it changed in place), is
    computed from tensors of this process that require grad besides the tensors the hook
    was given: a leaf of this process, or a tensor computed before the hook ran."""
    if value._grad_fn is None:  # a leaf of this process is fed to the worker (taps)
        return False
    own = {id(t._grad_fn) for t in (*leaves, *bases) if t._grad_fn is not None}
    given = {id(b) for b in bases} - given_tensors.made_here(leaves)  # (those are of this process)
    return _graph_has(
        value, lambda node: id(node) in own or (
            isinstance(node, AccumulateGrad) and id(node.variable) in given),
        lambda node: isinstance(node, AccumulateGrad) or node._seq < since)


def _calls_apart(model, path: str) -> int:
    """How many calls of ``model`` in the backward now running give the parameter at
    ``path`` their gradients apart (none in a plain backward, which sums them first: see
    ``_fired_again``)."""
    from disthook.distributed.autograd_node import RemoteBackward0

    task = engine._running.tasks[-1]
    if task.accumulate and task.needed is None and not grad_mode.is_grad_enabled():
        return 0
    return sum(1 for n in engine.nodes_of(task, RemoteBackward0)
               if n._model is model and engine.will_execute(task, n)
               and n.uses_parameter(path))


def _warn_fired_apart(param) -> None:
    warnings.warn(
        f"the tensor hook on {param._path!r} of a deployed model fires once for each call "
        "of the model in this backward: several calls of the model's forward use that "
        "parameter (a module called more than once, or weights tied between parts), and in "
        "a backward(create_graph=True) or an autograd.grad (or backward(inputs=)) naming "
        "the parameter its workers give each call's gradient to the hook apart, where one "
        "process gives it their sum once. A hook that only reads sees the parts; one that "
        "changes the gradient (clamp, rescale) changes each part. A plain backward() gives "
        "the sum once; or deploy a module holding every use of the parameter as one part "
        "(placement=), or hook the gradient where it is used (a module's full backward "
        "hook)", RuntimeWarning, stacklevel=4)
