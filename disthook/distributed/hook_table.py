"""The table of client hooks of a deployment: ``HookTable``, the part of ``Deployment`` that
registers hooks on the workers holding their modules (one request per worker, all or none;
hooks of parts that run here are registered here), removes them (keeping those a running
hook removed for the firings under way and the graphs recorded before: ``RemovedHooks``) and
lists what the workers hold. Hook ids come from the one counter every handle's id comes from
(``next_hook_id``)."""
from __future__ import annotations

import contextlib
import weakref

from disthook.distributed.placed import RemoteHandle
from disthook.service import hook_kinds
from disthook.service.worker_hooks import WorkerHook
from disthook.utils.hooks import RemovableHandle

__all__ = ["HookTable", "RemovedHooks", "graph_keeps_removed", "next_hook_id"]


class HookTable:
    """``Deployment``'s client hooks on its workers (its ``_layout``, ``_hub`` and
    ``_owner`` say where each goes)."""

    def _add_hook(self, kind: str, path: str, fn, proxy, *, tag: str | None = None,
                  **options) -> RemoteHandle:
        """Register ``fn`` as a ``kind`` hook on the worker holding ``path``; ``tag`` says
        who registered it (``"toolkit"``: disthook.hooks), as ``_hooks_on_workers`` tells."""
        return self._add_hooks([(kind, path, fn, proxy, options)], tag=tag)[0]

    def _add_hooks(self, hooks: list[tuple], *, tag: str | None = None,
                   ids: list[int] | None = None) -> list[RemoteHandle]:
        """Register several hooks, each (kind, path, fn, proxy, options), in that order: one
        request per worker, all sent at once. If any fails, none stays registered."""
        here = [(i, hook) for i, hook in enumerate(hooks)
                if self._layout.stage_of(hook[1]) is None]
        for _, (kind, path, fn, _, _) in here:
            if isinstance(fn, WorkerHook):
                raise ValueError(f"{fn!r} runs on a worker, but {path!r} runs on the client "
                                 f"(its parts are on several workers, or it is kept here): "
                                 "register a hook function of your own on it")
        if here:  # parts that run here take their hooks here, as in one process
            there = self._add_hooks([h for h in hooks if self._layout.stage_of(h[1]) is not None],
                                    tag=tag)
            handles = iter(there)
            made = {i: hook_kinds.register(target, kind, fn, options)
                    for i, (kind, _, fn, target, options) in here}
            return [made[i] if i in made else next(handles) for i in range(len(hooks))]
        entries = []
        for n, (kind, path, fn, proxy, options) in enumerate(hooks):
            if not callable(fn):
                raise TypeError(f"hook must be callable, got {type(fn).__name__}")
            fields = {"hook": ids[n] if ids else next_hook_id(), "kind": kind, "path": path,
                      "options": options, "tag": tag,
                      "waits": None if self._hooks_ahead else True}
            if isinstance(fn, WorkerHook):
                fields["worker_hook"] = fn.spec()
            entries.append((fn, kind, proxy, fields))
            self._hub.hooks[fields["hook"]] = entries[-1]
        try:
            self._register_hooks([fields for *_, fields in entries])
        except BaseException:
            with contextlib.suppress(Exception):  # those that were registered go again
                self._remove_hooks([fields["hook"] for *_, fields in entries])
            raise
        if self._hub.firing:  # registered by a hook that runs now: a pass run ahead of its
            self._hub.writes += 1  # answer runs again, with these hooks where they fire
        return [RemoteHandle(self, fields["hook"], fields["path"]) for *_, fields in entries]

    def _register_hooks(self, hooks: list[dict]) -> None:
        """Send add_hooks fields to the workers holding their modules (each worker registers
        its share in order, all or none)."""
        shares: dict[str, list] = {}
        for fields in hooks:
            shares.setdefault(self._owner(fields["path"]), []).append(fields)
        what = ", ".join(f"register a {f['kind']} hook on {f['path']!r}" for f in hooks[:3])
        self._hub.request_all([(address, {"hooks": share, "reply_to": self._hub.reply_to})
                               for address, share in shares.items()], "add_hooks",
                              what=what + (", ..." if len(hooks) > 3 else ""))

    def _remove_hooks(self, hook_ids: list[int]) -> None:
        """Remove client hooks from their workers, one request per worker, sent at once
        (ids removed before are skipped)."""
        shares: dict[str, list] = {}
        hub = self._hub
        for hook_id in hook_ids:
            entry = hub.hooks.pop(hook_id, None)
            if entry is not None:
                # the call that fired it fires the hooks it took when it started, this one
                # too (as in one process), and so does a later backward through a graph
                # recorded before (a full backward hook is taken at the module's call, as
                # torch takes it: retain_graph, then the hook removed, then a second
                # backward); removed by a hook that runs now, a pass run ahead of this
                # answer runs again without it
                hub.removed_while_firing[hook_id] = entry
                RemovedHooks.keep(hub, hook_id)
                if hub.firing:
                    hub.writes += 1
            if entry is not None:
                # asked where the module is now (a recovered model's stages may have moved)
                shares.setdefault(self._owner(entry[3]["path"]), []).append(hook_id)
        if shares and self._hub.socks:
            self._hub.request_all([(address, {"hooks": ids}) for address, ids in shares.items()],
                                  "remove_hooks", what="remove_hooks")

    def _hooks_on_workers(self) -> list[dict]:
        """Every hook the stages hold, asked of their workers: {"hook", "kind", "path",
        "tag", "runs" ("client" or "worker"), "worker" (its id)}, stage by stage."""
        replies = self._hub.request_all([(a, {}) for a in self._addresses], "list_hooks",
                                        what="list_hooks")
        return [{**entry, "worker": w.id} for w, reply in zip(self._workers, replies)
                for entry in reply["result"]]


class RemovedHooks:
    """The hooks removed while one generation of graphs was the newest: a graph (its
    ``RemoteBackward0``) holds the generation that was the newest when it was recorded, each
    generation holds the next, so a graph keeps every hook removed after it was recorded,
    as one process's graph keeps the hooks it took; with none of its graphs alive and no
    call under way, a generation goes, and its hooks (and what they capture) leave the
    hub's ``removed_while_firing``."""

    __slots__ = ("__weakref__", "ids", "next")

    def __init__(self, removed: dict):
        self.ids: list[int] = []
        self.next: RemovedHooks | None = None
        weakref.finalize(self, _forget, removed, self.ids)

    @staticmethod
    def keep(hub, hook_id: int) -> None:
        """``hook_id`` (in ``hub.removed_while_firing``) was removed: kept by the graphs
        alive now, and by a call under way (which may record a graph when it ends)."""
        newest = hub.removed_newest
        newest.ids.append(hook_id)
        if not hub.firing and not hub.in_flight:
            _next_generation(hub)


def graph_keeps_removed(hub) -> RemovedHooks:
    """What a graph recorded now holds: the newest generation (hooks removed while its call
    ran, and later ones)."""
    newest = hub.removed_newest
    if newest.ids and not hub.firing and not hub.in_flight:
        _next_generation(hub)  # (no call runs now that took its hooks before)
    return newest


def _next_generation(hub) -> None:
    newest = hub.removed_newest
    newest.next = hub.removed_newest = RemovedHooks(hub.removed_while_firing)


def _forget(removed: dict, ids: list[int]) -> None:
    for hook_id in ids:
        removed.pop(hook_id, None)


def next_hook_id() -> int:
    """A hook id from the one counter every handle's id comes from (hooks registered by the
    model's dicts keep their handle's id on the workers)."""
    hook_id = RemovableHandle.next_id
    RemovableHandle.next_id += 1
    return hook_id
