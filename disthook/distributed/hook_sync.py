"""The hooks in a placed module's own dicts, carried to its worker: registering and
removing them as the program does, through its handles or by editing the dicts, is made
there before the module's next call, in the dicts' order, after the global module hooks
(``global_hooks``)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from disthook.distributed import attr_changes, client_modes, global_hooks
from disthook.service import hook_kinds

if TYPE_CHECKING:
    from disthook.distributed.deployment import Deployment
    from disthook.nn.modules.module import Module

__all__ = ["sync_all", "sync_hooks"]


def _wanted(module: Module) -> list[tuple]:
    """(hook id, kind, fn, options) of every hook in the module's dicts, in firing order."""
    d = module.__dict__
    out = [(i, "forward_pre", fn, {"with_kwargs": i in d["_forward_pre_hooks_with_kwargs"]})
           for i, fn in d["_forward_pre_hooks"].items()]
    out += [(i, "forward", fn, {"with_kwargs": i in d["_forward_hooks_with_kwargs"],
                                "always_call": i in d["_forward_hooks_always_called"]})
            for i, fn in d["_forward_hooks"].items()]
    kind = "backward" if d["_is_full_backward_hook"] is False else "full_backward"
    out += [(i, kind, fn, {}) for i, fn in d["_backward_hooks"].items()]
    out += [(i, "full_backward_pre", fn, {}) for i, fn in d["_backward_pre_hooks"].items()]
    return out


def sync_hooks(dep: Deployment, module: Module, path: str,
               globals_: list | None = None) -> None:
    """Make the hooks registered on ``path``'s worker for ``module``'s dicts what the dicts
    hold, in their order, after the global module hooks (``global_hooks``; ``globals_``
    as it gives them, read if None): those removed go, those added come (appended, or
    prepended, else that kind registered again in order)."""
    synced = dep.__dict__.setdefault("_synced", {})
    have: dict = synced.get(id(module), {})
    if globals_ is None:
        globals_ = global_hooks.globals_wanted()
    want = global_hooks.merged(dep, path, _wanted(module), globals_)
    if not want and not have:
        return
    wanted_ids = {i: (kind, fn, opts) for i, kind, fn, opts in want}
    gone = [i for i, entry in have.items() if wanted_ids.get(i) != entry]
    kept = {i: e for i, e in have.items() if i not in gone}
    adds = []  # (id, kind, fn, options with prepend)
    for kind in hook_kinds.KINDS:
        order = [i for i, k, _, _ in want if k == kind]
        old = [i for i, e in kept.items() if e[0] == kind]
        new = [i for i in order if i not in kept]
        if not new and order == old:
            continue
        if order == old + new:
            adds += [(i, False) for i in new]
        elif old and order == new + old:
            adds += [(i, True) for i in reversed(new)]
        else:  # the order changed in the middle: the kind is registered again, in order
            gone += old
            for i in old:
                kept.pop(i)
            adds += [(i, False) for i in order]
    if gone:
        dep._remove_hooks(gone)
    if adds:
        entries = []
        for i, prepend in adds:
            kind, fn, opts = wanted_ids[i]
            given = dict(opts)
            if "prepend" in hook_kinds.KINDS[kind].defaults:
                given["prepend"] = prepend
            entries.append((kind, path, fn, module, hook_kinds.options(kind, given)))
        dep._add_hooks(entries, ids=[i for i, _ in adds])
        for i, _ in adds:
            kept[i] = wanted_ids[i]
    ordered = {i: kept[i] for i, *_ in want if i in kept}
    synced[id(module)] = ordered


def sync_all(dep: Deployment) -> None:
    """Before a call: every placed module's hook dicts as its worker holds them (a handle
    removed that was made before deploy, a dict edited in place), and the lists and dicts
    it shares with its worker as the program left them (``attr_changes.sync``)."""
    attr_changes.sync(dep)  # lists and dicts the program changed in place
    client_modes.publish(dep)  # a module here whose mode was set behind its placement
    _sync_carried(dep)
    synced = dep.__dict__.get("_synced", {})
    globals_ = global_hooks.globals_wanted()
    for path, module in dep.__dict__.get("_placed_modules", ()):
        if not path:
            continue  # a model placed whole: its own hooks fire here (RootPlacement)
        d = module.__dict__
        have = synced.get(id(module))
        if not (have or globals_ or d["_forward_hooks"] or d["_forward_pre_hooks"]
                or d["_backward_hooks"] or d["_backward_pre_hooks"]):
            continue
        want = global_hooks.merged(dep, path, _wanted(module), globals_)
        if have is not None and list(have) == [i for i, *_ in want]:
            continue
        sync_hooks(dep, module, path, globals_)


def _sync_carried(dep: Deployment) -> None:
    """Tensor hooks and post-accumulate-grad hooks a parameter had before the deploy, which
    its worker fires (``glue.carry_hooks``): those removed since, through the handle their
    registration gave, are removed from the worker too."""
    from disthook.distributed.glue import CARRIED_KINDS

    for key, (ref, ids) in list(dep.__dict__.get("_carried_hooks", {}).items()):
        p = ref()
        held = {i for slot, _ in CARRIED_KINDS
                for i in (p.__dict__.get(slot) or {})} if p is not None else set()
        gone = [i for i in ids if i not in held]
        if gone:
            dep._remove_hooks(gone)
            ids.difference_update(gone)
        if not ids:
            del dep.__dict__["_carried_hooks"][key]
