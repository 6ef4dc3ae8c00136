"""The two unpicklers of ``disthook.load``: weights-only (the default) and trusted.

Weights-only admits the names in ``names.weights_global`` (tensors, storages, dtypes, Size,
device, containers, primitives) plus those the user allowed (``add_safe_globals``), and calls
nothing else: every callable a pickle can reach comes through ``find_class``, which refuses
the rest before anything is imported or called, and REDUCE, NEWOBJ and BUILD are checked
again. Trusted (``weights_only=False``) rebuilds any pickled object, with torch's names mapped
to disthook's, and never imports torch.

Both are Python's own pure-Python unpickler with some opcodes replaced: it runs the pickle
machine iteratively, so nesting costs no recursion while loading; ``check_depth`` then
refuses objects nested deeper than Python code could walk.
"""
from __future__ import annotations

import pickle
from collections import Counter, OrderedDict
from typing import ClassVar

from disthook._serialization import names
from disthook._serialization.rebuild import CheckpointError
from disthook._surface import refusal

MAX_DEPTH = 1000

_DOCS = "https://pytorch.org/docs/stable/generated/torch.load.html"
_RERUN = ("Re-running disthook.load with weights_only=False will load it, but that runs "
          "whatever code the file names: do it only for a file from a source you trust.")

# the user's additions (torch.serialization.add_safe_globals): "module.qualname" -> object
SAFE_GLOBALS: dict = {}


def safe_global_name(entry) -> tuple[str, object]:
    if isinstance(entry, tuple):
        if len(entry) != 2 or not isinstance(entry[1], str):
            raise TypeError("add_safe_globals takes objects, or (object, 'module.qualname') "
                            f"pairs; got {entry!r}")
        return entry[1], entry[0]
    return f"{entry.__module__}.{entry.__qualname__}", entry


def weights_only_error(detail: str) -> pickle.UnpicklingError:
    return pickle.UnpicklingError(
        f"Weights only load failed. {_RERUN}\n\n{detail}\n\nSee the documentation of "
        f"torch.load for what weights_only=True admits: {_DOCS}")


def unsupported_global(module: str, name: str) -> pickle.UnpicklingError:
    full = f"{module}.{name}"
    why = names.unsupported_reason(module, name)
    if why is not None:  # not a matter of trust: weights_only=False cannot load it either
        return pickle.UnpicklingError(f"disthook.load cannot rebuild this file: GLOBAL "
                                      f"{full}: {why}.")
    return weights_only_error(
        f"Unsupported global: GLOBAL {full} is not an allowed global: a weights-only load "
        f"admits tensors, storages, dtypes, torch.Size, devices, containers and primitives. "
        f"If you trust this class or function, allow it with "
        f"torch.serialization.add_safe_globals([{full}]) or within "
        f"torch.serialization.safe_globals([{full}]).")


class _Unpickler(pickle._Unpickler):
    """Python's unpickler reading storages through ``load_storage`` and refusing the opcodes
    torch never writes that reach Python's global extension cache."""

    dispatch: ClassVar[dict] = dict(pickle._Unpickler.dispatch)

    def __init__(self, file, load_storage, encoding: str = "utf-8") -> None:
        super().__init__(file, encoding=encoding)
        self._load_storage = load_storage

    def persistent_load(self, pid):
        return self._load_storage(pid)

    def _refuse_ext(self):
        raise pickle.UnpicklingError("the pickle uses extension codes (EXT opcodes), which "
                                     "torch.save never writes")

    for _op in (pickle.EXT1, pickle.EXT2, pickle.EXT4):
        dispatch[_op[0]] = _refuse_ext
    del _op


class WeightsUnpickler(_Unpickler):
    """torch's ``weights_only=True``: data and tensors, nothing that runs code."""

    dispatch: ClassVar[dict] = dict(_Unpickler.dispatch)

    def find_class(self, module, name):
        module, name = names.fix_import(module, name)
        found = names.weights_global(module, name, SAFE_GLOBALS)
        if found is None:
            raise unsupported_global(module, name)
        return found

    def _callable(self, func, opcode: str):
        if any(func is f for f in names.CALLABLE) or any(
                func is f for f in SAFE_GLOBALS.values()):
            return func
        what = getattr(func, "__qualname__", type(func).__name__)
        raise weights_only_error(f"Unsupported operand: {opcode} on {what}, which a "
                                 "weights-only load never calls.")

    @staticmethod
    def _plain_args(func, args) -> None:
        """Containers, Size, bytearray and complex are built from the pickle's own data only:
        never from a tensor (iterating a broadcast view could make millions of objects) and
        never bytearray(n) (n bytes that the file does not hold)."""
        if any(func is f for f in names.DATA_BUILDERS) and not all(
                type(a) in _PLAIN or (func is complex and type(a) in (int, float))
                for a in args):
            kinds = ", ".join(type(a).__name__ for a in args)
            name = getattr(func, "__name__", repr(func))
            raise weights_only_error(f"Unsupported operand: {name}({kinds}); a weights-only "
                                     "load builds containers from the pickle's own data.")

    def load_reduce(self):
        args = self.stack.pop()
        func = self._callable(self.stack[-1], "REDUCE")
        if not isinstance(args, tuple):
            raise pickle.UnpicklingError("REDUCE with arguments that are not a tuple")
        self._plain_args(func, args)
        self.stack[-1] = func(*args)

    def load_newobj(self):
        args = self.stack.pop()
        cls = self._callable(self.stack.pop(), "NEWOBJ")
        if not isinstance(cls, type) or not isinstance(args, tuple):
            raise pickle.UnpicklingError("NEWOBJ on something that is not a class")
        self._plain_args(cls, args)
        self.append(cls.__new__(cls, *args))

    def load_build(self):
        state = self.stack.pop()
        inst = self.stack[-1]
        if any(type(inst) is f for f in SAFE_GLOBALS.values()):
            setstate = getattr(inst, "__setstate__", None)
            if setstate is not None:
                setstate(state)
            else:
                inst.__dict__.update(state)
            return
        if type(inst) not in (OrderedDict, Counter) or not isinstance(state, dict) or not all(
                isinstance(k, str) and not hasattr(type(inst), k) for k in state):
            raise weights_only_error(f"Unsupported operand: BUILD on a {type(inst).__name__}; "
                                     "a weights-only load sets attributes only on "
                                     "OrderedDicts (a state dict's _metadata), and never one "
                                     "that hides a method.")
        inst.__dict__.update(state)

    def _into(self, target, kinds: tuple, opcode: str):
        if type(target) not in kinds:
            raise weights_only_error(f"Unsupported operand: {opcode} into a "
                                     f"{type(target).__name__}; a weights-only load fills "
                                     "only lists, dicts and sets.")

    def load_append(self):
        self._into(self.stack[-2], (list,), "APPEND")
        super().load_append()

    def load_appends(self):
        self._into(self.metastack[-1][-1] if self.metastack else None, (list,), "APPENDS")
        super().load_appends()

    def load_setitem(self):
        self._into(self.stack[-3], (dict, OrderedDict, Counter), "SETITEM")
        super().load_setitem()

    def load_setitems(self):
        self._into(self.metastack[-1][-1] if self.metastack else None,
                   (dict, OrderedDict, Counter), "SETITEMS")
        super().load_setitems()

    def load_additems(self):
        self._into(self.metastack[-1][-1] if self.metastack else None, (set,), "ADDITEMS")
        super().load_additems()

    def _refuse(self):
        raise weights_only_error("Unsupported operand: the pickle builds objects by calling "
                                 "their class (INST/OBJ/NEWOBJ_EX), which torch.save never "
                                 "writes for weights.")

    dispatch[pickle.REDUCE[0]] = load_reduce
    dispatch[pickle.NEWOBJ[0]] = load_newobj
    dispatch[pickle.BUILD[0]] = load_build
    dispatch[pickle.APPEND[0]] = load_append
    dispatch[pickle.APPENDS[0]] = load_appends
    dispatch[pickle.SETITEM[0]] = load_setitem
    dispatch[pickle.SETITEMS[0]] = load_setitems
    dispatch[pickle.ADDITEMS[0]] = load_additems
    for _op in (pickle.INST, pickle.OBJ, pickle.NEWOBJ_EX):
        dispatch[_op[0]] = _refuse
    del _op


_PLAIN = (list, tuple, dict, OrderedDict, str, bytes, set, frozenset)


class TrustedUnpickler(_Unpickler):
    """torch's ``weights_only=False``: any pickled object, torch's names read as disthook's."""

    def find_class(self, module, name):
        module, name = names.fix_import(module, name)
        if module == "torch" or module.startswith("torch."):
            found = names.trusted_global(module, name)
            if found is None or refusal.is_refused(found):
                why = names.unsupported_reason(module, name)
                raise pickle.UnpicklingError(
                    f"the file names {module}.{name}: "
                    + (why if why else "disthook has no counterpart of it")
                    + ", so the object that uses it cannot be rebuilt here")
            return found
        return super().find_class(module, name)


def run(unpickler: _Unpickler):
    """Load, turning the pickle machine's own failures into UnpicklingError."""
    try:
        out = unpickler.load()
    except (pickle.UnpicklingError, CheckpointError, RecursionError, MemoryError):
        raise
    except (KeyError, IndexError, EOFError, TypeError, ValueError, AttributeError,
            UnicodeDecodeError, OverflowError) as e:
        raise pickle.UnpicklingError(f"the pickle in the file is malformed or truncated "
                                     f"({type(e).__name__}: {e})") from None
    check_depth(out)
    return out


def _children(obj):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield k
            yield v
    elif isinstance(obj, (list, tuple, set, frozenset)):
        yield from obj
    else:
        d = getattr(obj, "__dict__", None) if not isinstance(obj, type) else None
        if isinstance(d, dict):
            yield d


def check_depth(root, limit: int = MAX_DEPTH) -> None:
    """Refuse objects nested deeper than ``limit`` (a recursion bomb: Python code that walks
    them would overflow). Iterative; every object is walked once."""
    height: dict = {}  # id -> height below it, once walked
    keep: list = []  # keeps walked objects alive, so their ids stay theirs
    path: list = [(root, iter(_children(root)), 0)]
    on_path = {id(root)}
    while path:
        obj, children, best = path[-1]
        for child in children:
            if not isinstance(child, (dict, list, tuple, set, frozenset)) and not hasattr(
                    child, "__dict__"):
                continue
            if id(child) in on_path:
                continue  # a cycle, which pickle allows
            below = height.get(id(child))
            if below is None:
                if len(path) >= limit:
                    raise pickle.UnpicklingError(
                        f"the pickle nests objects more than {limit} deep (a recursion "
                        f"bomb?); disthook.load refuses it")
                path[-1] = (obj, children, best)
                path.append((child, iter(_children(child)), 0))
                on_path.add(id(child))
                break
            best = max(best, below + 1)
            if len(path) + below >= limit:
                raise pickle.UnpicklingError(f"the pickle nests objects more than {limit} "
                                             "deep (a recursion bomb?); disthook.load refuses "
                                             "it")
            path[-1] = (obj, children, best)
        else:
            path.pop()
            on_path.discard(id(obj))
            height[id(obj)] = best
            keep.append(obj)
            if path:
                parent, it, pbest = path[-1]
                path[-1] = (parent, it, max(pbest, best + 1))



def globals_named(data: bytes) -> list:
    """Every ``module.name`` a pickle names (GLOBAL, and STACK_GLOBAL of strings it pushed
    or memoized), read from its opcodes without running them."""
    import pickletools

    found: list = []
    strings: list = []  # the values on the stack, where they are strings
    memo: dict = {}
    for op, arg, _ in pickletools.genops(data):
        if op.name == "GLOBAL":
            module, _, name = arg.partition(" ")
            found.append(f"{module}.{name}")
        elif op.name == "STACK_GLOBAL" and len(strings) >= 2:
            found.append(f"{strings[-2]}.{strings[-1]}")
        if isinstance(arg, str) and op.name.endswith("UNICODE"):
            strings.append(arg)
        elif op.name == "MEMOIZE" and strings:
            memo[len(memo)] = strings[-1]
        elif op.name in ("BINPUT", "LONG_BINPUT", "PUT") and strings:
            memo[arg] = strings[-1]
        elif op.name in ("BINGET", "LONG_BINGET", "GET") and arg in memo:
            strings.append(memo[arg])
    return list(dict.fromkeys(found))
