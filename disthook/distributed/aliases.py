"""Module aliases that travel with a model: a client that made ``import torch`` mean disthook
(``sys.modules["torch"] = disthook``, and so on for submodules) has its model files import
disthook under that name; its workers must import those files the same way.

The client lists its aliases with ``client_aliases()`` when it deploys; a worker installs them
with ``install(aliases)`` before it imports the model's classes. Only names that stand for
disthook's own modules travel, and a worker refuses an alias whose name already means
another module there (the real torch, say) rather than mix the two."""
from __future__ import annotations

import importlib
import re
import sys

from disthook.distributed.spec import runs_a_program

__all__ = ["client_aliases", "install"]

_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def client_aliases() -> dict[str, str]:
    """{name: disthook module} for every module of disthook this process also knows by
    another name."""
    out = {}
    for name, module in list(sys.modules.items()):
        real = getattr(module, "__name__", None)
        if (isinstance(real, str) and real != name and _is_ours(real)
                and _DOTTED.match(name) and not _is_ours(name)):
            out[name] = real
    return out


def install(aliases: dict) -> None:
    """Make each name of ``aliases`` import the disthook module it stands for, here."""
    for name, real in sorted(aliases.items()):
        if not (isinstance(name, str) and isinstance(real, str) and _DOTTED.match(name)
                and _DOTTED.match(real) and _is_ours(real) and not _is_ours(name)
                and not runs_a_program(real)):
            raise ValueError(f"not an alias of a disthook module: {name!r} -> {real!r}")
        target = importlib.import_module(real)
        held = sys.modules.get(name)
        if held is not None and held is not target:
            raise ImportError(
                f"the client imports {real} as {name!r}, but {name!r} already means "
                f"{getattr(held, '__name__', held)!r} in this worker (from "
                f"{getattr(held, '__file__', '?')}); start a fresh worker, or deploy models "
                f"that use the same {name!r}")
        sys.modules[name] = target


def _is_ours(name: str) -> bool:
    return name == "disthook" or name.startswith("disthook.")
