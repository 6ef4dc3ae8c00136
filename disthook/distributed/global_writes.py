"""A global of the program that a placed module's ``forward`` changes in place (a tensor hook
the forward registers, appending to the script's list ``LOG``) is changed on the worker,
in the worker's copy of the program's code and globals, which the program never sees: the
deploy warns, naming the class, the global and what to do (keep it on the module, whose lists
and dicts come back after each call). Read from the bytecode of ``forward`` and of the
functions and lambdas written inside it; nothing is run."""
from __future__ import annotations

import collections
import dis
import types
import warnings

from disthook.distributed import shipping

__all__ = ["warn_of_global_writes"]

# methods that change a list, dict, set or deque in place
_CHANGES = frozenset({"append", "extend", "insert", "update", "add", "setdefault", "clear",
                      "pop", "popitem", "remove", "discard", "appendleft", "extendleft"})
_CONTAINERS = (list, dict, set, collections.deque)
_warned: set[tuple] = set()


def _changed_globals(code: types.CodeType, globs: dict) -> set[str]:
    """The globals (containers in ``globs``) whose changing method ``code`` calls, as
    ``LOG.append(...)``, in it or in a function or lambda written inside it."""
    found, name = set(), None
    for ins in dis.get_instructions(code):
        if ins.opname == "LOAD_GLOBAL":
            name = ins.argval
            continue
        if ins.opname in ("LOAD_ATTR", "LOAD_METHOD") and name is not None \
                and ins.argval in _CHANGES and isinstance(globs.get(name), _CONTAINERS):
            found.add(name)
        name = None
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            found |= _changed_globals(const, globs)
    return found


def warn_of_global_writes(stage_modules) -> None:
    """A RuntimeWarning per class and global (once per process) where the ``forward`` of a
    class of the program's own code, placed on a worker, changes a global in place."""
    own = set(shipping.own_code_modules()) | {"__main__"}
    for stage in stage_modules:
        for module in stage.modules():
            for cls in type(module).__mro__:
                forward = cls.__dict__.get("forward")
                if cls.__module__ not in own or not isinstance(forward, types.FunctionType):
                    continue
                for name in sorted(_changed_globals(forward.__code__, forward.__globals__)):
                    key = (cls, name)
                    if key in _warned:
                        continue
                    _warned.add(key)
                    warnings.warn(
                        f"{cls.__qualname__}.forward changes the global {name!r} of "
                        f"{cls.__module__} in place; on its worker that changes the worker's "
                        "copy of it, which this program does not see. Keep it on the module "
                        f"(self.{name.lower()}), whose lists and dicts come back after each "
                        "call", RuntimeWarning, stacklevel=4)
