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

__all__ = ["container_reads", "container_writes"]

_CONTAINERS = (Sequential, ModuleList, ModuleDict)
# what a container reads without changing its children
_READS = ("__len__", "__iter__", "__getitem__", "__contains__", "keys", "items", "values")
# what changes a container's children (and Module's own ways to add a child or a parameter)
_WRITES = ("append", "extend", "insert", "pop", "__setitem__", "__delitem__", "__iadd__",
           "clear", "update")
_MODULE_WRITES = ("add_module", "register_module", "register_parameter")


def container_reads(kind: type) -> dict:
    """The read methods of ``kind`` that a disthook container class defines, as methods of
    a deployed module of that class ({name: function}); empty for any other class."""
    methods = {}
    for name in _READS:
        owner = next((c for c in kind.__mro__ if name in c.__dict__), None)
        if owner in _CONTAINERS:
            methods[name] = _on_view(name, owner.__dict__[name], kind)
    return methods


def container_writes(kind: type, *, root: bool = False) -> dict:
    """Refusals of what would change the children (or add a parameter) of a module placed
    on a worker: its worker's copy would not change, and the forward there would go on
    computing without the change, a silent wrong result. The container methods are refused
    where ``kind`` has them from a disthook container, Module's own ways everywhere. With
    ``root`` (the deployed model itself), only where its forward does not run here."""
    names = [*_MODULE_WRITES, *(
        name for name in _WRITES
        if next((c for c in kind.__mro__ if name in c.__dict__), None) in _CONTAINERS)]
    return {name: _refusal(name, kind if root else None) for name in names}


def _refusal(name: str, root_kind: type | None):
    allowed = None if root_kind is None else next(
        c.__dict__[name] for c in root_kind.__mro__ if name in c.__dict__)

    def refuse(self, *args, **kwargs):
        if allowed is not None and self.__dict__.get("_glue"):
            return allowed(self, *args, **kwargs)  # its forward runs here: so do changes
        path = getattr(self, "_path", "")
        where = f"the deployed module at {path!r}" if path else "the deployed model"
        raise NotImplementedError(
            f"{name}() on {where}: its modules live on their workers as they were deployed, "
            "and a change of its children or parameters made here would not reach them. "
            "Change the model before deploying it (or close it and deploy the changed "
            "model); a container whose parts are on several workers runs here and takes "
            "such changes")

    refuse.__name__ = name
    return refuse


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
