"""``len()``, iteration, indexing and truth of a deployed module, exactly where its class
defines them: a deployed ``Sequential``, ``ModuleList`` or ``ModuleDict`` (root or part)
reads its children as the container does in one process; any other module has none of
them, so it is truthy and ``len()`` raises ``TypeError``, as in one process (a summary tool
asks ``any(m.children())``, which a falsy leaf would answer wrongly).

The container's own read methods run on a plain instance of its class that holds the
deployed module's children (``_view``): a slice of a deployed ``Sequential`` is a
``Sequential`` of its parts, as in one process. Methods a user's class defines itself run
on the deployed module as they are."""
from __future__ import annotations

from disthook.nn.modules.container import ModuleDict, ModuleList, Sequential
from disthook.nn.modules.module import Module

__all__ = ["container_reads"]

_CONTAINERS = (Sequential, ModuleList, ModuleDict)
# what a container reads without changing its children
_READS = ("__len__", "__iter__", "__getitem__", "__contains__", "keys", "items", "values")


def container_reads(kind: type) -> dict:
    """The read methods of ``kind`` that a disthook container class defines, as methods of
    a deployed module of that class ({name: function}); empty for any other class."""
    methods = {}
    for name in _READS:
        owner = next((c for c in kind.__mro__ if name in c.__dict__), None)
        if owner in _CONTAINERS:
            methods[name] = _on_view(name, owner.__dict__[name], kind)
    return methods


def _on_view(name: str, method, kind: type):
    def read(self, *args):
        return method(_view(self, kind), *args)

    read.__name__ = name
    read.__doc__ = method.__doc__
    return read


def _view(module, kind: type) -> Module:
    """A plain ``kind`` holding ``module``'s children (the deployed parts themselves)."""
    view = object.__new__(kind)
    Module.__init__(view)
    view.__dict__["_modules"].update(module._modules)
    return view
