"""What a list or dict holds, by identity, and a tensor's version, to tell later whether
code changed it in place (``maps.append(attn)``, ``stats["n"] += 1``, ``cache[k] = v``,
``self.seen += 1``, ``mask[i] = 0``): the same object after, so the name's identity says
nothing. The worker diffs a placed module's attributes with it
(``workers/attr_changes.py``), the client the ones it shares with a worker
(``disthook.distributed.attr_changes``)."""
from __future__ import annotations

from operator import is_

from disthook.tensor import Tensor

__all__ = ["HOLDING", "WATCHED", "contents", "grew_from", "same", "stamp", "unchanged"]

HOLDING = (list, dict, tuple)  # what may be or hold a container changed in place
WATCHED = (list, dict, tuple, Tensor)  # what ``stamp`` takes note of


def stamp(value):
    """What tells later whether ``value`` was changed in place: a tensor's version, a
    container's ``contents``; None where nothing in it can change (a tuple of numbers)."""
    if isinstance(value, Tensor):
        return value._vc[0]
    return contents(value) or None


def unchanged(value, was) -> bool:
    """Whether ``value`` is as ``was`` (its ``stamp``) says it was."""
    if type(was) is int:
        return value._vc[0] == was
    return same(was)


def contents(value) -> list:
    """(container, its items, its dict's values or None) for ``value`` and each list or
    dict inside it (through tuples too), each once: what each holds now; empty for a tuple
    without one. A shallow copy per container."""
    if type(value) is tuple and not any(isinstance(x, HOLDING) for x in value):
        return []  # (the usual tuple: a kernel size, a shape)
    out: list = []
    seen: set = set()
    stack = [value]
    while stack:
        c = stack.pop()
        if id(c) in seen:
            continue
        seen.add(id(c))
        if isinstance(c, dict):
            items = tuple(c.values())
            out.append((c, tuple(c), items))
        elif isinstance(c, list):
            items = tuple(c)
            out.append((c, items, None))
        else:
            items = c
        if any(issubclass(kind, HOLDING) for kind in set(map(type, items))):
            stack.extend(x for x in items if isinstance(x, HOLDING))
    return out


def same(held: list) -> bool:
    """Whether every container of ``held`` (``contents``'s) holds what it held then."""
    for c, items, values in held:
        if len(c) != len(items) or not all(map(is_, c, items)) or (
                values is not None and not all(map(is_, c.values(), values))):
            return False
    return True


def grew_from(held: list) -> int | None:
    """The length the list of ``held`` had, where it changed only by growing at its end
    (``append``, ``extend``, ``+=``); None for any other change."""
    c, items, values = held[0]
    if (values is None and len(c) > len(items) and all(map(is_, c, items))
            and same(held[1:])):
        return len(items)
    return None
