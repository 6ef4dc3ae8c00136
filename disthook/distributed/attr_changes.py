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

A list or dict that the module's code changed in place there (``self.maps.append(attn)``,
``self.stats["n"] += 1``) is changed in place here too, so that the program's own
reference to it (``maps = layer.maps``) sees what one process would; and one the program
changes in place here goes to the worker before the model's next call (``sync``).
"""
from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import numpy as np

from disthook import wire
from disthook.autograd.graph import Node
from disthook.distributed import remote_values
from disthook.nn.modules.module import Module
from disthook.service import held
from disthook.service.values import opaque_in, unpack
from disthook.tensor import Tensor

if TYPE_CHECKING:
    from disthook.distributed.deployment import Deployment

__all__ = ["GraphElsewhere", "apply", "apply_for", "sync", "watch"]

_MODULE_OWN = frozenset(Module().__dict__)  # the dicts and flags every Module keeps
_MISSING = object()


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
        grown = {name: (start, unpack(data, _plain_or_elsewhere(path, name, at),
                                      kept or _late(model, address, path, name, at),
                                      classes=True))
                 for name, (start, data) in (record.get("grown") or {}).items()}
        module = _module_at(model._local, path)
        if module is None:  # no longer here (the program replaced it meanwhile)
            continue
        d = module.__dict__
        shared = getattr(d.get("_placement"), "shared", None)
        if shared is None and not (model._whole and module is model._local):
            continue  # a module whose forward runs here (a chain's root): not the worker's
        in_place = record.get("in_place") or ()
        for name, value in values.items():
            if not _own(d, name):
                d[name] = _into(d.get(name), value) if name in in_place else value
                if shared is not None:
                    shared.add(name)
                    watch(model, module, name)
        for name, (start, items) in grown.items():
            if not _own(d, name):
                _grow(d, name, start, items, path)
                if shared is not None:
                    shared.add(name)
                    watch(model, module, name)
        for name in record.get("deleted") or ():
            if not _own(d, name):
                d.pop(name, None)
                if shared is not None:
                    shared.discard(name)
        for name, what in (record.get("opaque") or {}).items():
            if shared is not None:  # the worker's copy has it: a set by the program goes there
                shared.add(name)
            _warn_once(model, module, path, name, what, at)


def _into(mine, value):
    """``value`` (a list, dict or tensor a worker changed in place) put into ``mine``, the
    program's object for it here, keeping its identity and that of the lists and dicts
    inside it where they stand in the same place; ``value`` itself where ``mine`` is of
    another kind."""
    if isinstance(mine, list) and isinstance(value, list):
        old = list(mine)
        mine[:] = [_into(a, b) for a, b in zip(old, value)] + value[len(old):]
        return mine
    if isinstance(mine, dict) and isinstance(value, dict):
        old = dict(mine)
        mine.clear()
        mine.update({k: _into(old.get(k), v) for k, v in value.items()})
        return mine
    if type(mine) is tuple and type(value) is tuple and len(mine) == len(value):
        return tuple(_into(a, b) for a, b in zip(mine, value))  # (the lists inside it)
    if (type(mine) is Tensor and type(value) is Tensor and mine._grad_fn is None
            and value._grad_fn is None and mine.shape == value.shape
            and mine.dtype == value.dtype and mine._data.flags.writeable):
        np.copyto(mine._data, value._data)  # (a tensor the module changed in place)
        mine._vc[0] += 1
        return mine
    return value


def _grow(d: dict, name: str, start: int, items: list, path: str) -> None:
    """The list at ``name`` grew on its worker from length ``start`` by ``items`` (told by a
    hook event, then again by the answer: the same items from the same place)."""
    mine = d.get(name)
    if not isinstance(mine, list) or len(mine) < start:
        have = (f"a list of {len(mine)}" if isinstance(mine, list)
                else f"a {type(mine).__name__}")
        raise RuntimeError(
            f"{path or 'the model'}.{name}: the deployed module appended to this list on its "
            f"worker, where it had {start} items, but here it is {have}: the program changed "
            "it between the call and its answer, so the two no longer agree. Set it anew "
            f"(module.{name} = [...]) rather than changing it in place while a call runs")
    mine[start:] = items


def watch(model: Deployment, module, name: str) -> None:
    """Keep what the list, dict or tensor at ``module.name`` (one its worker's copy has
    too) holds now, so that ``sync`` sees a change the program makes to it in place."""
    watched = model.__dict__.setdefault("_held", {})
    value = module.__dict__.get(name)
    stamp = held.stamp(value) if isinstance(value, held.WATCHED) else None
    if stamp is not None:
        watched[(id(module), name)] = (module, name, value, stamp)
    else:
        watched.pop((id(module), name), None)


def sync(model: Deployment) -> None:
    """Before a call: each list, dict or tensor that a placed module shares with its worker
    and that the program changed in place here (``layer.maps.clear()``, ``mask[i] = 0``)
    goes there, as a set of the attribute would, or for a list that only grew, the items it
    grew by (at the first call, every such attribute is taken note of)."""
    watched = model.__dict__.setdefault("_held", {})
    if not model.__dict__.get("_held_noted"):
        model.__dict__["_held_noted"] = True
        for _, module in model.__dict__.get("_placed_modules", ()):
            shared = getattr(module.__dict__.get("_placement"), "shared", None)
            for name in shared or ():
                watch(model, module, name)
    for key, (module, name, value, stamp) in list(watched.items()):
        d = module.__dict__
        if d.get(name, _MISSING) is not value:  # set anew (which went there) or deleted
            watch(model, module, name)
            continue
        if held.unchanged(value, stamp):
            continue
        placement = d.get("_placement")  # (set_attr watches it anew)
        start = None if type(stamp) is int else held.grew_from(stamp)
        if start is not None and placement is not None and opaque_in(value[start:]) is None:
            placement.extend_attr(name, start, value[start:])  # (only what it grew by)
            watch(model, module, name)
            continue
        if placement is None or not placement.set_attr(module, name, value):
            watched.pop(key, None)  # it stays here (a value that cannot travel: see set_attr)


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


def flag_stays(model: Deployment, name: str) -> None:
    """A flag ``name`` set on a module of a model attached from a shared deployment stays on
    this client (its hooks here see it): warned once per name."""
    warned = model.__dict__.setdefault("_attr_warned", set())
    if ("", "flag " + name) in warned:
        return
    warned.add(("", "flag " + name))
    warnings.warn(
        f"the attribute {name!r} set on modules of {model._attached!r} stays on this client "
        "(its hooks see it): the model is attached from a shared deployment, whose modules "
        "on the workers only its deployer changes, so their forward does not see it; ask "
        "the deployer to set it if the forward should", UserWarning, stacklevel=4)


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

