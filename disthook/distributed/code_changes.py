"""Code of a placed module changed on the client after the deploy, where nothing is set on
the module itself: its class swapped (``module.__class__ = Sub``, as gradient-checkpointing
and quantization wrappers do) or a class of it patched (``nn.GELU.forward = f``, a method
or class default of the program's own class replaced). The worker's copy keeps the class
it was deployed with, so such a module computes here from then on, with the code the
program has now, as when a forward is set on it (``placed.changed_here``); undoing the
change (the class put back, the method restored) makes it compute on its worker again.

``snapshot`` keeps, at the deploy, each placed module's class and the namespace of every
class in their MROs (``Module`` and ``object`` aside); ``check`` compares them before a
call and marks the modules whose code differs.
"""
from __future__ import annotations

from disthook.nn.modules.module import Module

__all__ = ["check", "snapshot"]

# what Python or a library writes into a class dict on its own (caches), never the program
_CACHES = frozenset({"__annotations__", "__annotate__", "__slotnames__", "__doc__",
                     "__dict__", "__weakref__", "__abstractmethods__", "_abc_impl"})
_WHAT = "its code (its class changed since the deploy)"


def _namespace(cls: type) -> dict:
    return {k: v for k, v in cls.__dict__.items() if k not in _CACHES}


def _same(cls: type, kept: dict) -> bool:
    n = 0
    for k, v in cls.__dict__.items():
        if k in _CACHES:
            continue
        if kept.get(k, _same) is not v:
            return False
        n += 1
    return n == len(kept)


def snapshot(dep, placed: list) -> None:
    """At the deploy: the class of each ``(path, module)`` in ``placed`` and the namespaces
    of their classes."""
    classes = {}
    for _, module in placed:
        for cls in type(module).__mro__:
            if cls not in (Module, object) and cls not in classes:
                classes[cls] = [dict(cls.__dict__), _namespace(cls)]
    dep.__dict__["_code"] = ([(m, type(m)) for _, m in placed], classes, set())


def check(dep) -> None:
    """Mark (and unmark) the placed modules whose class is not the one deployed, or one of
    whose classes was patched since: they compute here (``changed_here``)."""
    code = dep.__dict__.get("_code")
    if code is None:
        return
    modules, classes, was = code
    patched = set()
    for cls, kept in classes.items():
        if cls.__dict__ != kept[0]:  # (a dict comparison: the cheap test first)
            if _same(cls, kept[1]):
                kept[0] = dict(cls.__dict__)  # a cache written into it
            else:
                patched.add(cls)
    now = set()
    if patched or any(type(m) is not cls for m, cls in modules):
        now = {id(m) for m, cls in modules
               if type(m) is not cls or not patched.isdisjoint(cls.__mro__)}
    if now == was:
        return
    for m, _ in modules:
        placement = m.__dict__.get("_placement")
        if placement is not None and (id(m) in now) != (id(m) in was):
            placement._mark(_WHAT, id(m) in now)
    code[2].clear()
    code[2].update(now)


def mentions(cls: type, name: str) -> bool:
    """Whether the code of ``cls`` (its methods and what they define, ``Module`` aside) names
    ``name``: as an attribute (``self.act_fn``) or a string (``getattr(self, "act_fn")``)."""
    key = (cls, name)
    if key not in _MENTIONS:
        codes = [getattr(getattr(v, "__func__", v), "__code__", None)
                 for k in cls.__mro__ if k not in (Module, object) for v in vars(k).values()]
        _MENTIONS[key] = any(_names(c, name) for c in codes if c is not None)
    return _MENTIONS[key]


def _names(code, name: str) -> bool:
    return name in code.co_names or any(
        c == name or (hasattr(c, "co_names") and _names(c, name)) for c in code.co_consts)


_MENTIONS: dict = {}
