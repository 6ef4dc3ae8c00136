"""Modules of a deployed model held in plain attributes: a dict, list or tuple of hook
points (``self.mod_dict = {"a": self.fc1}``), or a module set as a plain attribute. In one
process such a reference is the child itself; on the client it must reach the module the
client holds for that child (its proxy, the client's copy of a split module, or the module
itself where it runs here), the same object ``children()`` and ``get_submodule`` give, so
that calling it runs the deployed part and a hook put on it fires.

Each attribute holding modules of the model is translated once, into a new container of the
same type and keys (kept, so that entries added to it later stay); modules that are not the
model's (a helper kept outside its tree) stay as they are and run here, as in one process."""
from __future__ import annotations

from typing import TYPE_CHECKING

from disthook.nn.modules.module import Module

if TYPE_CHECKING:
    from disthook.distributed.remote import RemoteModel

__all__ = ["alias_attributes", "deployed_value"]

_DEPTH = 3  # how deep in nested containers modules are looked for
_MISSING = object()


def deployed_value(model: RemoteModel, value, depth: int = 0):
    """``value`` with each module of ``model`` in it replaced by the client's module for
    it; ``value`` itself when it holds none (containers are rebuilt only when they do)."""
    if isinstance(value, Module):
        path = _paths(model).get(id(value))
        return value if path is None else model.get_submodule(path)
    if depth >= _DEPTH or type(value) not in (list, tuple, dict):
        return value
    if type(value) is dict:
        items = {k: deployed_value(model, v, depth + 1) for k, v in value.items()}
        changed = any(items[k] is not v for k, v in value.items())
    else:
        items = [deployed_value(model, v, depth + 1) for v in value]
        changed = any(a is not b for a, b in zip(items, value))
    return type(value)(items) if changed else value


def alias_attributes(model: RemoteModel) -> None:
    """Translate the plain attributes that hold the model's modules, on the client's root
    (from the deployed module's, which it reads through) and on the client's copies of
    split modules."""
    fresh = frozenset(Module().__dict__)
    for name, value in model._local.__dict__.items():
        if name not in fresh and name not in model.__dict__:
            found = deployed_value(model, value)
            if found is not value:
                object.__setattr__(model, name, found)
    stack = [m for m in model._modules.values() if isinstance(m, Module)]
    while stack:
        module = stack.pop()
        if getattr(type(module), "_kind", None) is not None:
            continue  # a proxy translates its attributes when they are read (translated)
        for name, value in list(module.__dict__.items()):
            if name not in fresh:
                module.__dict__[name] = deployed_value(model, value)
        stack.extend(m for m in module._modules.values() if isinstance(m, Module))


def translated(proxy, name: str, value):
    """What the proxy of a placed module gives for its plain attribute ``name`` (``value``
    on the deployed module): translated once, then kept on the proxy."""
    found = deployed_value(proxy._model, value)
    if found is not value:
        object.__setattr__(proxy, name, found)
    return found


def _paths(model: RemoteModel) -> dict[int, str]:
    """{id(module): its path} over the deployed module's tree (first path of a shared one)."""
    paths = model.__dict__.get("_module_paths")
    if paths is None:
        paths = {}
        for path, module in model._local.named_modules():
            paths.setdefault(id(module), path)
        object.__setattr__(model, "_module_paths", paths)
    return paths
