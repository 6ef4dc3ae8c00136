"""The plain attributes a placed module's own code sets on itself while it runs on this
worker (``self.attention_map = attn`` in a forward, ``self.calls += 1``, a tensor hook's
``self.attn_gradients = grad`` in the backward): they are the client's module's too, so the
answer of the call (or backward) that set them carries them to the client
(``disthook.distributed.attr_changes`` sets them there).

Cheap when nothing changes: a shallow copy of each module's ``__dict__`` before, an identity
comparison after, and no field in the answer. A list or dict the code changes in place
(``self.maps.append(attn)``, ``self.stats["n"] += 1``, ``self.cache[k] = v``) is the same
object after, so each list and dict held in a plain attribute (and each one inside it) is
copied shallowly too and compared item by item: a list that only grew sends the items it
grew by (``grown``), any other change its whole value (``in_place``), which the client puts
into its own list or dict rather than rebinding the name. What ``Module`` keeps for itself (its
parameters, buffers, children, hook dicts, ``training``) has its own paths and is left out.
"""
from __future__ import annotations

import contextlib
import weakref
from operator import is_

from disthook.nn.modules.module import Module
from disthook.service import held
from disthook.service.values import opaque_in, pack

__all__ = ["Plain", "Snapshot", "WithGraph", "forget", "merged", "plain", "private", "seen",
           "snapshot", "watching"]

_OWN = frozenset(Module().__dict__)  # the dicts and flags every Module keeps for itself
_MISSING = object()
_GONE = object()  # (told: a name deleted)


class Snapshot:
    """The modules of a part (or stage) with their full paths in the model, and a shallow
    copy of each one's ``__dict__`` when the snapshot was taken."""

    __slots__ = ("entries", "told", "whole")

    def __init__(self, entries: list, whole: bool = False):
        self.entries = entries
        self.told: dict | None = None  # (path, name) -> the value hook events told of
        # lists that grew are told whole, not from where they grew: the stage is shared, and
        # other clients' calls grew them too, past what this client's copy holds
        self.whole = whole

    def changes(self, tensor=None, news: bool = False) -> list[dict] | None:
        """One ``attr_change`` record (``disthook/wire.py``) per module whose plain
        attributes were set, rebound or deleted since the snapshot; None when none was.
        ``tensor(t)``, when given, packs each tensor of their values (``pack``'s). ``news``:
        only what earlier calls with ``news`` did not tell (a pass's hook events)."""
        out = None
        told = self.told
        for path, module, before, was in self.entries:
            after = module.__dict__
            # names a hook event told of that are gone again (set and deleted in the pass)
            undone = [k for (p, k) in told if p == path and k not in after
                      and k not in before] if told else ()
            edited = _edited(after, was) if was else None
            if edited and self.whole:
                edited = dict.fromkeys(edited)
            if not undone and not edited and len(after) == len(before) and all(
                    map(is_, after.values(), before.values())) and all(map(is_, after, before)):
                continue  # (the usual case: every name and value as it was, in order)
            rebound = [k for k, v in after.items() if before.get(k, _MISSING) is not v]
            new = sum(k not in before for k in rebound)
            gone = [k for k in before if k not in after and k not in _OWN] \
                if len(after) - new != len(before) else []  # (else every name is still there)
            gone += undone
            if rebound:
                rebound = [k for k in rebound if k not in _OWN]
            if news:
                rebound, gone = self._untold(path, after, rebound, gone)
            if rebound or gone:
                _names.pop(id(module), None)  # (which names hold what may have changed)
            if rebound or gone or edited:
                if out is None:
                    out = []
                out.append(_record(path, after, rebound, gone, tensor, edited))
        return out

    def _untold(self, path: str, after: dict, rebound: list, gone: list) -> tuple[list, list]:
        """Of ``rebound`` and ``gone``, what the earlier news did not tell; now told."""
        told = self.told = {} if self.told is None else self.told
        rebound = [k for k in rebound if told.get((path, k), _MISSING) is not after[k]]
        gone = [k for k in gone if told.get((path, k), _MISSING) is not _GONE]
        for k in rebound:
            told[(path, k)] = after[k]
        for k in gone:
            told[(path, k)] = _GONE
        return rebound, gone


def snapshot(module: Module, path: str, whole: bool = False) -> Snapshot:
    """The snapshot of ``module`` (at ``path`` in the model) and every module inside it
    (``whole``: see ``Snapshot.whole``)."""
    entries: list = []
    _walk(module, path, entries)
    return Snapshot(entries, whole)


def _walk(module: Module, path: str, into: list) -> None:
    d = module.__dict__
    before = d.copy()
    known = _names.get(id(module))
    if known is not None and known[0]() is module:
        names = known[1]
    else:  # (a tuple of numbers, a kernel size, cannot change while it is the value)
        names = [k for k, v in before.items() if k not in _OWN and isinstance(v, held.WATCHED)
                 and (type(v) is not tuple or held.stamp(v) is not None)]
        _names[id(module)] = (weakref.ref(module), names)
    was = [(k, v, c) for k in names
           if (v := before.get(k, _MISSING)) is not _MISSING and (c := held.stamp(v)) is not None]
    into.append((path, module, before, was))
    for name, child in d["_modules"].items():
        if child is not None:
            _walk(child, f"{path}.{name}" if path else name, into)


# id of a module -> (a weak reference to it, the names of its attributes that may change in
# place: lists, dicts, tensors, tuples holding a list or dict), looked through once: a pass
# that sets, rebinds or deletes one of its attributes, or a client's module_op (``forget``),
# has them looked through again
_names: dict[int, tuple] = {}


def forget(module: Module) -> None:
    """``module``'s attributes were changed outside a pass (a client's ``module_op``, or
    another client's attributes put in, ``Stage.use_client``)."""
    _names.pop(id(module), None)


# ---- each client's own attributes (workers/stages.Stage.use_client) --------------------------

def plain(module: Module) -> dict:
    """``module``'s plain attributes: what its code and its client set, not what every
    ``Module`` keeps for itself (parameters, buffers, children, hooks, ``training``)."""
    return {k: v for k, v in module.__dict__.items() if k not in _OWN}


class Plain:
    """The plain attributes of a stage's modules, taken off them and put back, one dict per
    module (``Stage.use_client``: another client's go on in their place). Where a module's
    attributes keep their names (the usual case) nothing but those names is looked at:
    about 1 µs a module."""

    def __init__(self, modules: list[Module]):
        self.modules = modules
        self.names = [tuple(plain(m)) for m in modules]  # each module's, as put on last
        self.own = [len(m.__dict__) - len(n) for m, n in zip(modules, self.names)]

    def take(self) -> list[dict]:
        out = []
        for i, m in enumerate(self.modules):
            d, names = m.__dict__, self.names[i]
            if len(d) == self.own[i] + len(names) and all(k in d for k in names):
                out.append({k: d.pop(k) for k in names})
            else:  # a call set a new name, or deleted one
                out.append({k: d.pop(k) for k in [k for k in d if k not in _OWN]})
                self.own[i] = len(d)
        return out

    def put(self, attrs: list[dict]) -> None:
        for i, (m, a) in enumerate(zip(self.modules, attrs)):
            m.__dict__.update(a)
            if len(a) != len(self.names[i]) or any(k not in a for k in self.names[i]):
                self.names[i] = tuple(a)
                forget(m)  # (other names may hold lists: looked through again)


def private(value):
    """A copy of an attribute's value that no other client's calls change in place: lists,
    dicts and sets copied, and those inside them; anything else as it is."""
    kind = type(value)
    if kind is list:
        return [private(v) for v in value]
    if kind is dict:
        return {k: private(v) for k, v in value.items()}
    if kind is set:
        return set(value)
    return value


class WithGraph:
    """Packs the tensors of a call's changed attributes: one with a graph (an attention map
    in a forward run with grad, a mixture-of-experts layer's ``aux_loss``) becomes one more
    output of the call, kept here with the others (its gradient comes back with theirs, as
    in one process); any other by value. ``tensors``: those outputs, in order; ``fill``
    gives their records once kept."""

    def __init__(self):
        self.tensors: list = []
        self._slots: list[dict] = []

    def __call__(self, t):
        if not t.requires_grad:
            return pack(t)
        slot: dict = {}
        self.tensors.append(t)
        self._slots.append(slot)
        return slot

    def fill(self, records) -> None:
        """The kept records (``values.kept_record``) of ``tensors``, in order."""
        for slot, record in zip(self._slots, records):
            slot.update(record)


_watched: dict[int, Snapshot] = {}  # id of a running job -> the snapshot its pass diffs


@contextlib.contextmanager
def watching(job, snap: Snapshot):
    """While the pass of ``job`` runs: the client hooks it fires tell the client what its
    modules set so far (``seen``), so that a forward hook there reads ``module.attn`` as
    the module's forward left it, as in one process."""
    _watched[id(job)] = snap
    try:
        yield
    finally:
        _watched.pop(id(job), None)


def seen(job) -> list[dict] | None:
    """What the modules of ``job``'s pass set since it began (a hook event carries it);
    tensors with a graph come by value, their graph stays here."""
    snap = _watched.get(id(job))
    return None if snap is None else snap.changes(news=True)


def merged(given: list | None, own: list | None) -> list | None:
    """The changes a neighbour stage passed on (``given``) followed by this stage's."""
    if not given:
        return own or None
    return [*given, *own] if own else list(given)


def _edited(after: dict, was: list) -> dict | None:
    """{name: the length its list had, where it only grew at its end; else None} for each
    list, dict or tensor of ``was`` that is still the attribute's value and was changed in
    place."""
    out = None
    for name, value, stamp in was:
        if after.get(name, _MISSING) is not value or held.unchanged(value, stamp):
            continue
        if out is None:
            out = {}
        out[name] = None if type(stamp) is int else held.grew_from(stamp)
    return out


def _record(path: str, after: dict, rebound: list, gone, tensor,
            edited: dict | None = None) -> dict:
    """The ``attr_change`` record of one module: values that travel by value (``pack``:
    tensors as detached arrays), the type of each that cannot, the names deleted; lists
    and dicts changed in place (``edited``): a list that grew, from where it grew
    (``grown``: [length before, its new items]), any other whole (``in_place``)."""
    values, opaque = {}, {}
    for name in rebound:
        value = after[name]
        what = opaque_in(value)
        if what is None:
            values[name] = pack(value, tensor)
        else:
            opaque[name] = what
    grown = {}
    for name, start in (edited or {}).items():  # (whole values first: the order they pack)
        value = after[name]
        what = opaque_in(value if start is None else value[start:])
        if what is not None:
            opaque[name] = what
        elif start is None:
            values[name] = pack(value, tensor)
    for name, start in (edited or {}).items():
        if start is not None and name not in opaque:
            grown[name] = [start, pack(after[name][start:], tensor)]
    record: dict = {"path": path}
    if values:
        record["set"] = values
    in_place = [name for name, start in (edited or {}).items()
                if start is None and name in values]
    if in_place:
        record["in_place"] = in_place
    if grown:
        record["grown"] = grown
    if opaque:
        record["opaque"] = opaque
    if gone:
        record["deleted"] = list(gone)
    return record
