"""The plain attributes that a placed module's own code set on itself on its worker (in its
forward, or in a tensor hook it registered there that fired in the backward), set on the
program's module here, as one process would have them: an attention module's
``self.attention_map``, a counter, a mixture-of-experts layer's ``self.aux_loss``.

The worker's answer carries them (``workers/attr_changes.py``). They are set here without
going back (the module's ``__dict__``, not its placement's ``set_attr``) and are the
worker's copy's (``PartPlacement.shared``): a later set by the program goes to the worker,
as a set of an attribute the module was deployed with does. A tensor comes by value, as a
plain tensor without history (what ``detach()`` gives); a value that cannot travel (a
function, an object of the program's own class) leaves the attribute here as it was, with
one warning per module path and name.
"""
from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import numpy as np

from disthook import wire
from disthook.autograd.graph import Node
from disthook.distributed import remote_values
from disthook.nn.modules.module import Module
from disthook.service.values import unpack
from disthook.tensor import Tensor

if TYPE_CHECKING:
    from disthook.distributed.deployment import Deployment

__all__ = ["GraphElsewhere", "apply", "apply_for"]

_MODULE_OWN = frozenset(Module().__dict__)  # the dicts and flags every Module keeps


def apply(model: Deployment, changes, kept=None, address: str | None = None) -> None:
    """Set the attributes ``changes`` (a list of ``attr_change`` records, or None) names on
    the model's modules here.
    ``kept(record)`` makes the tensor of a value kept on the worker with the call's
    outputs (one with a graph there: ``glue.call_remote`` makes it an output of the call's
    node); without it (an answer that came after the program went on, from ``address``)
    such a tensor comes without its graph, and a backward through it says so."""
    if not changes:
        return
    for record in wire.checked("list[attr_change]", changes, "a worker's attribute changes"):
        path = record["path"]
        at = _worker_of(model, path)  # (for what it says)
        # every value is made, in order, even where it is not set: a kept one's place
        # among the call's outputs is its order in the answer
        values = {name: unpack(data, _plain_or_elsewhere(path, name, at),
                               kept or _late(model, address, path, name, at),
                               classes=True)
                  for name, data in (record.get("set") or {}).items()}
        module = _module_at(model._local, path)
        if module is None:  # no longer here (the program replaced it meanwhile)
            continue
        d = module.__dict__
        shared = getattr(d.get("_placement"), "shared", None)
        if shared is None and not (model._whole and module is model._local):
            continue  # a module whose forward runs here (a chain's root): not the worker's
        for name, value in values.items():
            if not _own(d, name):
                d[name] = value
                if shared is not None:
                    shared.add(name)
        for name in record.get("deleted") or ():
            if not _own(d, name):
                d.pop(name, None)
                if shared is not None:
                    shared.discard(name)
        for name, what in (record.get("opaque") or {}).items():
            if shared is not None:  # the worker's copy has it: a set by the program goes there
                shared.add(name)
            _warn_once(model, module, path, name, what, at)


def apply_for(target, changes) -> None:
    """``apply`` for a hook event on ``target`` (the placed module or tensor the hook is
    on): what the modules set so far in the pass that fired it, before the hook runs."""
    from disthook.distributed.placed import deployment_of

    model = deployment_of(target) or getattr(target, "__dict__", {}).get("_model")
    if model is not None:
        apply(model, changes)


class GraphElsewhere(Node):
    """The node of an attribute's tensor whose graph stayed on the worker that set it (set
    by a chain's stage, or come after the program went on): a backward through it says so,
    instead of giving the worker's parameters no gradient."""

    def __init__(self, what: str):
        super().__init__()
        self._what = what

    def _backward(self, grads: list) -> tuple:
        raise RuntimeError(
            f"{self._what}, and its graph stayed there: a backward through it here cannot "
            "reach the parameters that made it. Place the module so that the model's own "
            "forward calls it (deploy with placement=...), where such a tensor keeps its "
            "graph, or compute the value from the module's output here")


def _plain_or_elsewhere(path: str, name: str, where: str):
    def make(array, requires_grad: bool, grad_fn: str | None = None) -> Tensor:
        node = GraphElsewhere(f"{path or 'the model'}.{name} was set on its worker ({where}) "
                              "to a tensor with a graph") if requires_grad else None
        return Tensor._make(np.array(array), node, 0)
    return make


def _late(model: Deployment, address: str | None, path: str, name: str, where: str):
    def make(record: dict) -> Tensor:
        node = GraphElsewhere(f"{path or 'the model'}.{name} was set on its worker ({where}) "
                              "to a tensor with a graph, in a call whose answer came after "
                              "the program went on")
        return remote_values.from_record(model, address, record, node, 0)
    return make


def _worker_of(model: Deployment, path: str) -> str:
    """"stage i, worker W": where the module at ``path`` is."""
    stage = model._layout.stage_of(path)
    return "its worker" if stage is None else f"stage {stage}, worker {model._workers[stage].id}"


def _own(d: dict, name: str) -> bool:
    """Whether ``name`` is one of Module's own (a parameter, buffer or child, a hook dict),
    which a worker never reports and the client never takes from one."""
    return name.startswith("__") or name in ("_placement", "training") or any(
        name in d.get(k, ()) for k in ("_parameters", "_buffers", "_modules")) or (
        name.startswith("_") and name in _MODULE_OWN)


def _module_at(root, path: str):
    module = root
    for name in path.split(".") if path else ():
        module = module.__dict__.get("_modules", {}).get(name)
        if module is None:
            return None
    return module


def _warn_once(model: Deployment, module, path: str, name: str, what: str,
               where: str) -> None:
    warned = model.__dict__.setdefault("_attr_warned", set())
    if (path, name) in warned:
        return
    warned.add((path, name))
    old = (f"a {type(module.__dict__[name]).__name__}" if name in module.__dict__
           else "not set")
    warnings.warn(
        f"the deployed module at {path!r} ({type(module).__name__}) set its attribute "
        f"{name!r} to {what} on its worker ({where}), which cannot come to the client: "
        f"{path or 'the model'}.{name} here keeps its old value ({old}). "
        "To read it here, keep a tensor, number, string, None, or tuples, lists and "
        "str-keyed dicts of them in it; or read it on the worker (a worker hook), or run "
        "the model here (model.to_local())", UserWarning, stacklevel=3)

