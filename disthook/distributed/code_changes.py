"""Code of a placed module changed on the client after the deploy, where nothing is set on
the module itself: its class swapped (``module.__class__ = Sub``, as gradient-checkpointing
and quantization wrappers do), a class of it patched (``nn.GELU.forward = f``, a method or
class default of the program's own class replaced), or a function its class's code calls
patched (``F.gelu = f``, ``modeling.apply_rotary = f``: a function or class that a method
names, in its module or as an attribute of a module it names). The worker's copy keeps the
code it was deployed with, so such a module computes here from then on, with the code the
program has now, as when a forward is set on it (``placed.changed_here``); undoing the
change (the class put back, the function restored) makes it compute on its worker again.

``snapshot`` keeps, at the deploy, each placed module's class, the namespace of every class
in their MROs (``Module`` and ``object`` aside) and what their methods name; ``check``
compares them before a call and marks the modules whose code differs.
"""
from __future__ import annotations

import dis
import functools
import operator
import types

from disthook.nn.modules.module import Module

__all__ = ["changed", "check", "mentions", "snapshot"]

# what Python or a library writes into a class dict on its own (caches), never the program
_CACHES = frozenset({"__annotations__", "__annotate__", "__slotnames__", "__doc__",
                     "__dict__", "__weakref__", "__abstractmethods__", "_abc_impl"})
_WHAT = ("its code (its class, a function it calls, or a global its methods read, changed "
         "since the deploy)")
# what a method may call by name as an attribute of a module it names: a patch of one is a
# change of code. Of its own module's globals every name it loads is watched, whatever it
# holds: a number, a string or a tensor that the program binds again (a notebook's later
# cell, ``SCALE = 2.0``) is read at call time in one process, while the worker's copy of
# the function keeps the value it was deployed with
_CODE = (types.FunctionType, types.BuiltinFunctionType, functools.partial, type)


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


def _functions(cls: type):
    """The functions of ``cls``'s own namespace (methods, static and class methods,
    properties' accessors)."""
    for v in vars(cls).values():
        if isinstance(v, property):
            yield from (f for f in (v.fget, v.fset) if f is not None)
        else:
            v = getattr(v, "__func__", v)
            if isinstance(v, types.FunctionType):
                yield v


def _codes(code):
    yield code
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            yield from _codes(c)


def _called(cls: type, into: dict) -> None:
    """What the methods of ``cls`` read that may change under them: ``(namespace, name) ->
    [the value, the namespace, the name, classes]``, any global of their module they load,
    or an attribute of a module they name that is code (``F.gelu``)."""
    for fn in _functions(cls):
        codes = list(_codes(fn.__code__))
        names = {n for c in codes for n in c.co_names}
        # of the module's globals, those the code loads as globals (an attribute it reads,
        # ``torch.nn.init``, is no call of a global named ``init``)
        loaded = {i.argval for c in codes for i in dis.get_instructions(c)
                  if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
        spaces = [(fn.__globals__, loaded, object)]
        spaces += [(v.__dict__, names, _CODE) for n in loaded
                   if isinstance(v := fn.__globals__.get(n), types.ModuleType)]
        for space, named, watched in spaces:
            for n in named & space.keys():
                if isinstance(space[n], watched):
                    into.setdefault((id(space), n), [space[n], space, n, set()])[3].add(cls)


def _patched_before(classes: dict, called: dict) -> set:
    """The classes that the workers import by name (a library's, disthook's) while this
    process patched them with the program's own code before the deploy (a method of a class
    of the program's own files or script set on them, or on a module they call: ``F.gelu =
    my_gelu``): the workers' copies would not have the patch."""
    from disthook.distributed.shipping import own_code_modules

    own = {"__main__", *own_code_modules()}

    def foreign(value, home) -> bool:
        return home not in own and getattr(value, "__module__", None) in own

    found = {cls for cls in classes
             if any(foreign(f, cls.__module__) for f in _functions(cls))}
    for value, space, _, users in called.values():
        if foreign(value, space.get("__name__")):
            found |= users
    return found


def snapshot(dep, placed: list) -> None:
    """At the deploy: the class of each ``(path, module)`` in ``placed``, the namespaces of
    their classes and the code they call."""
    classes, called = {}, {}
    for _, module in placed:
        for cls in type(module).__mro__:
            if cls not in (Module, object) and cls not in classes:
                classes[cls] = [dict(cls.__dict__), _namespace(cls)]
                _called(cls, called)
    before = _patched_before(classes, called)
    modules = [m for _, m in placed]
    watched = list(called.values())
    dep.__dict__["_code"] = (
        modules, [type(m) for m in modules], classes, watched,
        ([e[1] for e in watched], [e[2] for e in watched], [e[0] for e in watched]), set(),
        before)
    if before:
        check(dep)


def changed(dep, module: Module) -> bool:
    """Whether ``module``'s code is no longer what its worker's copy has (``check``)."""
    check(dep)
    return _WHAT in getattr(module.__dict__.get("_placement"), "here", ())


def check(dep) -> None:
    """Mark (and unmark) the placed modules whose class is not the one deployed, or one of
    whose classes or the code they call was patched since: they compute here
    (``changed_here``)."""
    code = dep.__dict__.get("_code")
    if code is None:
        return
    modules, types_, classes, called, (spaces, names, values), was, before = code
    patched = set(before)  # (kept so: the workers import them as their library has them)
    for cls, kept in classes.items():
        if cls.__dict__ != kept[0]:  # (a dict comparison: the cheap test first)
            if _same(cls, kept[1]):
                kept[0] = dict(cls.__dict__)  # a cache written into it
            else:
                patched.add(cls)
    if any(map(operator.is_not, map(dict.get, spaces, names), values)):
        for value, space, name, users in called:
            if space.get(name) is not value:
                patched |= users
    now = set()
    if patched or any(map(operator.is_not, map(type, modules), types_)):
        now = {id(m) for m, cls in zip(modules, types_)
               if type(m) is not cls or not patched.isdisjoint(cls.__mro__)}
    if now == was:
        return
    for m in modules:
        placement = m.__dict__.get("_placement")
        if placement is not None and (id(m) in now) != (id(m) in was):
            placement._mark(_WHAT, id(m) in now)
    was.clear()
    was.update(now)


def mentions(cls: type, name: str) -> bool:
    """Whether the code of ``cls`` (its methods and what they define, ``Module`` aside) names
    ``name``: as an attribute (``self.act_fn``) or a string (``getattr(self, "act_fn")``)."""
    key = (cls, name)
    if key not in _MENTIONS:
        _MENTIONS[key] = any(
            name in c.co_names or name in c.co_consts
            for k in cls.__mro__ if k not in (Module, object)
            for fn in _functions(k) for c in _codes(fn.__code__))
    return _MENTIONS[key]


_MENTIONS: dict = {}
