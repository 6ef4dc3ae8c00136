"""Modules as data: what crosses the wire when a stage is placed on a worker. Never pickle.

A module travels as a *spec*: a plain map of its class path, its plain attributes, its
parameters and buffers (numpy arrays, which ``disthook.wire`` sends as raw frames) and the
specs of its children. ``build_module`` makes the module again from a spec without calling
the class's ``__init__``: it sets up the bare ``Module`` state, then restores attributes,
tensors and children, the way ``copy.deepcopy`` or unpickling would but from data only.

Plain attributes are data: None, bool, int, float, str, disthook dtypes, functions and classes
defined at a module's top level (by name), objects of such classes whose ``__dict__`` is data
(a config object, a dataclass: its class and attributes, rebuilt without calling
``__init__``), and tuples, lists and str-keyed dicts of those. Containers are tagged
(``{"tuple": [...]}``) so that a tuple comes back a tuple; scalars travel as they are.

A module with an attribute that is not data (a lambda or closure over its submodules, a bound
method, a nested function) cannot travel as a spec: it is code, and code travels only pickled
by value (``shipping``), to workers that take code. ``module_spec`` refuses it, naming the
module path and the attribute, before anything is sent.

A parameter or buffer shared by several modules of one stage (tied weights) travels once;
its other places hold ``{"tied": "<path of the first>"}`` and are rebuilt as the same object.
"""
from __future__ import annotations

import importlib
import os
import sys
import types
from collections.abc import Callable
from typing import Any

import numpy as np

from disthook import _blas, _dtype
from disthook.nn.modules.module import Module
from disthook.nn.parameter import Parameter
from disthook.tensor import Tensor

__all__ = ["SpecError", "build_module", "class_path", "module_spec", "resolve_class", "walk_name"]

# The state every Module keeps in its __dict__ apart from plain attributes: never sent.
_MODULE_INTERNALS = frozenset({
    "training", "_parameters", "_buffers", "_non_persistent_buffers_set", "_modules",
    "_backward_pre_hooks", "_backward_hooks", "_is_full_backward_hook", "_forward_hooks",
    "_forward_hooks_with_kwargs", "_forward_hooks_always_called", "_forward_pre_hooks",
    "_forward_pre_hooks_with_kwargs", "_state_dict_hooks", "_state_dict_pre_hooks",
    "_load_state_dict_pre_hooks", "_load_state_dict_post_hooks", "_placement",
})
_SPEC_KEYS = frozenset({"class", "training", "attrs", "params", "buffers", "children"})


class SpecError(TypeError):
    """A module that cannot be described as data, or a spec that cannot be built."""


def class_path(cls: type) -> str:
    """``"package.module:Qualified.Name"`` of a class."""
    return f"{cls.__module__}:{cls.__qualname__}"


def resolve_class(path: str, *, allow: Callable[[str], bool] | None = None,
                  main=None) -> type:
    """The Module subclass named by ``path``; ``allow(module_name)`` may refuse the import.
    Classes of ``__main__`` (this process's script) come from ``main`` (on a client; a worker
    never imports a client's script: models with such classes reach it pickled by value)."""
    if not isinstance(path, str) or path.count(":") != 1:
        raise SpecError(f"class path must look like 'package.module:ClassName', got {path!r}")
    mod_name, qualname = path.split(":")
    if mod_name in ("__main__", "__mp_main__"):
        if main is None:
            raise SpecError(f"class {path!r} is defined in the client's main script, which "
                            "workers never import; a model that comes as data needs classes "
                            "from installed modules (define it in a module installed on the "
                            "workers), or deploy it to workers that take code (a cluster "
                            "you own: local_cluster or disthook launch)")
        mod_name = main.__name__
    if allow is not None and not allow(mod_name):
        raise SpecError(f"importing {mod_name!r} is not allowed here (class {path!r})")
    try:
        from_main = main is not None and mod_name == main.__name__
        obj: Any = main if from_main else importlib.import_module(mod_name)
        obj = walk_name(obj, qualname, path, allow)
    except (ImportError, AttributeError) as exc:
        raise SpecError(f"cannot find class {path!r}: {exc} (sys.path here: "
                        f"{', '.join(p for p in sys.path if p) or 'empty'}); install its "
                        "module where the workers run, or put it on their PYTHONPATH") from None
    if not (isinstance(obj, type) and issubclass(obj, Module)):
        raise SpecError(f"{path!r} is not a disthook.nn.Module subclass")
    return obj


def runs_a_program(module: str) -> bool:
    """Whether importing ``module`` runs a program: a package's ``__main__`` (importing
    ``disthook.bench.__main__`` runs a benchmark and exits). Names from a client never
    import one, whatever package is allowed."""
    return any(part in ("__main__", "__mp_main__") for part in module.split("."))


def walk_name(obj, qualname: str, path: str, allow: Callable[[str], bool] | None):
    """The object ``qualname`` names inside module ``obj`` (``path`` as the sender wrote
    it, for the errors), walked one attribute at a time. What a name may not do, so that
    an allow-list of modules means what it says (``allowed.mod:os.system`` would otherwise
    reach any module the allowed one imported): go through a dunder (``__globals__``,
    ``__class__``, ``__builtins__``), through a module or to an object of a module that
    ``allow`` refuses. ``AttributeError`` where a part is missing, ``SpecError`` else."""
    for part in qualname.split("."):
        if part.startswith("__"):
            raise SpecError(f"{path!r}: a name may not go through {part!r}; name a function "
                            "or class by its own module and qualified name")
        obj = getattr(obj, part)
        if allow is None:
            continue
        if isinstance(obj, types.ModuleType):
            own = obj.__name__
        else:
            own = getattr(obj, "__module__", None)
            own = own if isinstance(own, str) else None
        if own is None or not allow(own):
            what = (f"module {own}" if isinstance(obj, types.ModuleType)
                    else f"an object of {own or 'no module'}")
            raise SpecError(f"{path!r} leads out of the allowed modules (to {what}): a name "
                            "is followed only inside them; name a function or class by the "
                            "module that defines it, and allow that module")
    return obj


# ---- module -> spec -------------------------------------------------------------------------

def module_spec(module: Module, path: str = "") -> dict:
    """The spec of ``module`` and its whole subtree (arrays are views of the live tensors)."""
    if not isinstance(module, Module):
        raise SpecError(f"expected a disthook.nn.Module, got {type(module).__name__}")
    return _spec(module, path, {})


_DATA = ("Data is None, bool, int, float, str, dtypes, functions and classes defined at a "
         "module's top level (by name), objects of such classes whose attributes are data (a "
         "config object, a dataclass), and tuples, lists and str-keyed dicts of those")


def _spec(module: Module, path: str, seen: dict[int, str]) -> dict:
    where = path or "the root module"
    attrs = {}
    for name, value in module.__dict__.items():
        if name in _MODULE_INTERNALS:
            continue
        try:
            attrs[name] = _plain(value)
        except SpecError as exc:
            raise SpecError(
                f"attribute {name!r} of {where} ({type(module).__name__}) is not data: {exc}. "
                "A model that travels as data (to a shared service's workers, in a "
                "checkpoint's or a published model's description) holds only data in its "
                f"attributes. {_DATA}") from None
    if "<locals>" in type(module).__qualname__:
        raise SpecError(f"{where} is a {type(module).__qualname__}, a class defined inside a "
                        "function: workers cannot import it; define it at module level")
    return {
        "class": class_path(type(module)),
        "training": bool(module.training),
        "attrs": attrs,
        "params": {name: _tensor_entry(p, _join(path, name), seen)
                   for name, p in module._parameters.items()},
        "buffers": {name: _tensor_entry(b, _join(path, name), seen,
                                        persistent=name not in module._non_persistent_buffers_set)
                    for name, b in module._buffers.items()},
        "children": {name: None if child is None else _spec(child, _join(path, name), seen)
                     for name, child in module._modules.items()},
    }


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _tensor_entry(t: Tensor | None, path: str, seen: dict[int, str], **extra) -> dict | None:
    if t is None:
        return None
    if id(t) in seen:
        return {"tied": seen[id(t)], **extra}
    seen[id(t)] = path
    return {"data": t._data, "requires_grad": bool(t._requires_grad), **extra}


def _plain(value, inside: frozenset[int] = frozenset()):
    """``value`` as data (see the module's doc); ``inside``: ids of the containers and
    objects it is in, so that one that holds itself is refused, not followed forever."""
    if value is None or type(value) in (bool, int, float, str):
        return value
    if isinstance(value, _dtype.dtype):
        return {"dtype": str(value).removeprefix("torch.")}
    if isinstance(value, (types.FunctionType, types.BuiltinFunctionType, type)):
        return {"ref": _reference(value)}
    if id(value) in inside:
        raise SpecError(f"a {type(value).__name__} that holds itself")
    inside = inside | {id(value)}
    if type(value) is tuple:
        return {"tuple": [_plain(v, inside) for v in value]}
    if type(value) is list:
        return {"list": [_plain(v, inside) for v in value]}
    if type(value) is dict:
        return {"dict": _plain_dict(value, inside)}
    if _plain_class(type(value)) and hasattr(value, "__dict__"):
        return {"object": {"class": _reference(type(value)),
                           "attrs": _plain_dict(vars(value), inside)}}
    if isinstance(value, Module):
        raise SpecError(f"a {type(value).__name__} module")
    if isinstance(value, Tensor):
        raise SpecError("a tensor")
    if isinstance(value, types.MethodType):
        raise SpecError(f"a bound method ({value.__qualname__})")
    raise SpecError(f"a value of type {type(value).__name__}")


def _plain_dict(value: dict, inside: frozenset[int]) -> dict:
    for k in value:
        if not isinstance(k, str):
            raise SpecError(f"dict key {k!r} is not a str")
    return {k: _plain(v, inside) for k, v in value.items()}


def _plain_class(cls: type) -> bool:
    """Whether an object of ``cls`` is all in its ``__dict__``, so that ``object.__new__``
    and that dict make it again: no ``__new__`` of its own, no slots, not a module or tensor,
    and no ``__del__`` (an object made from a peer's data must do nothing as it goes)."""
    if cls.__new__ is not object.__new__ or issubclass(cls, (Module, Tensor)):
        return False
    if any("__del__" in vars(c) for c in cls.__mro__[:-1]):  # its objects act as they go
        return False  # (tempfile's closer unlinks the path it holds): not plain data
    for c in cls.__mro__:
        slots = vars(c).get("__slots__", ())
        if set((slots,) if isinstance(slots, str) else slots) - {"__dict__", "__weakref__"}:
            return False
    return True


def _reference(obj) -> str:
    """``"module:qualname"`` of a function or class the workers can import by that name
    (as F.relu held by TransformerEncoderLayer); a lambda or a nested function cannot."""
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", "")
    if "<lambda>" in qualname:
        raise SpecError("a lambda (define it as a function at a module's top level, or "
                        "compute it in forward())")
    if "<locals>" in qualname or not module:
        raise SpecError(f"{qualname or repr(obj)}, defined inside a function (define it at a "
                        "module's top level)")
    found = sys.modules.get(module)
    for part in qualname.split("."):
        found = getattr(found, part, None)
    if found is not obj:
        raise SpecError(f"{module}.{qualname}, which is not found by that name")
    return f"{module}:{qualname}"


# ---- spec -> module -------------------------------------------------------------------------

def _resolve_reference(path: str, where: str, allow, main):
    """The function or class a ``{"ref": "module:qualname"}`` attribute names."""
    if path.count(":") != 1:
        raise SpecError(f"spec of {where}: {path!r} is not a 'module:qualname' reference")
    module, qualname = path.split(":")
    if module in ("__main__", "__mp_main__"):
        if main is None:
            raise SpecError(f"spec of {where}: {path!r} is defined in the client's main "
                            "script, which this worker did not import")
        found = main
    else:
        if allow is not None and not allow(module):
            raise SpecError(f"spec of {where}: importing {module!r} is not allowed here")
        try:
            found = importlib.import_module(module)
        except ImportError as exc:
            raise SpecError(f"spec of {where}: cannot import {module!r}: {exc}") from None
    try:
        found = walk_name(found, qualname, path, allow)
    except AttributeError:
        found = None
    except SpecError as exc:
        raise SpecError(f"spec of {where}: {exc}") from None
    if not callable(found):
        raise SpecError(f"spec of {where}: {path!r} names no function or class here")
    return found

def build_module(spec: dict, *, allow: Callable[[str], bool] | None = None,
                 main=None) -> Module:
    """A new module (own, writable copies of every array) from a spec; ``main`` is the
    client's main script as a module, for the classes defined there."""
    return _build(spec, "", {}, allow, main)


def main_script_of(spec: dict) -> str | None:
    """The path of the client's main script if a class of the spec is defined there (None if
    none is); ``SpecError`` if that script is no file (an interactive session)."""
    if not _uses_main(spec):
        return None
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if not path:
        raise SpecError("a module class is defined in an interactive session (no script "
                        "file): workers cannot import it; define it in a module file")
    return os.path.abspath(path)


def _uses_main(spec: dict) -> bool:
    """Whether a class or function the spec names (its modules' and their attributes') is
    defined in the client's main script."""
    values = list(spec["attrs"].values())
    return (_in_main(spec["class"]) or any(_value_uses_main(v) for v in values)
            or any(c is not None and _uses_main(c) for c in spec["children"].values()))


def _value_uses_main(value) -> bool:
    if not isinstance(value, dict):
        return False
    (tag, payload), = value.items()
    if tag == "ref":
        return _in_main(payload)
    if tag == "object":
        return _in_main(payload["class"]) or any(map(_value_uses_main,
                                                     payload["attrs"].values()))
    if tag in ("tuple", "list"):
        return any(map(_value_uses_main, payload))
    return tag == "dict" and any(map(_value_uses_main, payload.values()))


def _in_main(path: str) -> bool:
    return path.split(":")[0] in ("__main__", "__mp_main__")


def _build(spec, path: str, made: dict[str, Tensor], allow, main=None) -> Module:
    where = path or "the root module"
    cls = _spec_class(spec, path, allow, main)
    module = cls.__new__(cls)
    Module.__init__(module)
    module.training = bool(spec["training"])
    for name, value in spec["attrs"].items():
        if name in _MODULE_INTERNALS:
            raise SpecError(f"spec of {where}: attribute {name!r} is Module state, not data")
        module.__dict__[name] = _unplain(value, f"{where}.{name}", allow, main)
    for name, entry in spec["params"].items():
        t = _tensor(entry, _join(path, name), made, parameter=True)
        module._parameters[name] = t
    for name, entry in spec["buffers"].items():
        t = _tensor(entry, _join(path, name), made, parameter=False)
        module._buffers[name] = t
        if entry is not None and not entry.get("persistent", True):
            module._non_persistent_buffers_set.add(name)
    for name, child in spec["children"].items():
        module._modules[name] = (None if child is None
                                 else _build(child, _join(path, name), made, allow, main))
    return module


def _spec_class(spec, path: str, allow, main) -> type:
    """The module class of a spec, once its keys are checked."""
    where = path or "the root module"
    if not isinstance(spec, dict) or spec.keys() != _SPEC_KEYS:
        raise SpecError(f"spec of {where} must be a map with keys class, training, attrs, "
                        f"params, buffers, children; got {_keys(spec)}")
    try:
        return resolve_class(spec["class"], allow=allow, main=main)
    except SpecError as exc:
        raise SpecError(f"module {path!r}: {exc}" if path else f"the root module: {exc}") \
            from None


def _keys(obj) -> str:
    return str(sorted(obj)) if isinstance(obj, dict) else type(obj).__name__


def _tensor(entry, path: str, made: dict[str, Tensor], *, parameter: bool):
    if entry is None:
        return None
    if not isinstance(entry, dict):
        raise SpecError(f"tensor entry of {path} must be a map, got {type(entry).__name__}")
    if "tied" in entry:
        tied = made.get(entry["tied"])
        if tied is None:
            raise SpecError(f"{path} is tied to {entry['tied']!r}, which was not built before it")
        made[path] = tied
        return tied
    data = entry.get("data")
    if not isinstance(data, np.ndarray):
        raise SpecError(f"tensor entry of {path} has no array 'data'")
    # own, writable copy of the received frame, aligned as on the client (shipping.loads)
    t = Tensor._make(_blas.aligned(data, copy=True), None, 0)
    if parameter:
        t = Parameter(t, bool(entry.get("requires_grad", True)))
    elif entry.get("requires_grad"):
        t.requires_grad_(True)
    made[path] = t
    return t


def _unplain(value, where: str, allow=None, main=None):
    if value is None or type(value) in (bool, int, float, str):
        return value
    if isinstance(value, dict) and len(value) == 1:
        (tag, payload), = value.items()
        if tag == "dtype" and isinstance(payload, str):
            dt = getattr(_dtype, payload, None)
            if isinstance(dt, _dtype.dtype):
                return dt
        elif tag in ("tuple", "list") and isinstance(payload, list):
            items = [_unplain(v, where, allow, main) for v in payload]
            return tuple(items) if tag == "tuple" else items
        elif tag == "dict" and isinstance(payload, dict):
            return {k: _unplain(v, where, allow, main) for k, v in payload.items()}
        elif tag == "ref" and isinstance(payload, str):
            return _resolve_reference(payload, where, allow, main)
        elif tag == "object" and isinstance(payload, dict) and payload.keys() == {
                "class", "attrs"} and isinstance(payload["attrs"], dict):
            return _unplain_object(payload, where, allow, main)
    raise SpecError(f"spec of {where}: {value!r:.80} is not a plain attribute value")


def _unplain_object(payload: dict, where: str, allow, main):
    """An object of a plain class (``_plain_class``), made without calling its
    ``__init__``: ``object.__new__``, then its ``__dict__``, as unpickling would."""
    cls = _resolve_reference(payload["class"], where, allow, main) \
        if isinstance(payload["class"], str) else None
    if not (isinstance(cls, type) and _plain_class(cls)):
        why = (" (it has a __del__, which would run on data a peer chose)"
               if isinstance(cls, type) and any("__del__" in vars(c) for c in cls.__mro__[:-1])
               else "")
        raise SpecError(f"spec of {where}: {payload['class']!r:.80} is not a class whose "
                        f"objects are plain data here{why}")
    obj = object.__new__(cls)
    obj.__dict__.update({k: _unplain(v, f"{where}.{k}", allow, main)
                         for k, v in payload["attrs"].items()})
    return obj
