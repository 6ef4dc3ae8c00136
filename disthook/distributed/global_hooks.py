"""The global module hooks (``nn.modules.module.register_module_forward_hook`` and the
others) on a deployed model's parts.

In one process a global hook fires for every module call, before the module's own hooks. A
placed module is called on its worker, where the client's globals are not: so each global
hook is registered on every placed module as one of that module's own hooks, ahead of the
module's, under an id of its own per module (``hook_sync.sync_hooks`` keeps them in step as the
globals are added and removed). It then fires where the module runs, as a client hook, with
the program's own module as its first argument, as in one process.
"""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from disthook.nn.modules import module as _module

if TYPE_CHECKING:
    from disthook.distributed.deployment import Deployment

__all__ = ["globals_wanted", "merged"]


def globals_wanted() -> list[tuple]:
    """(global id, kind, fn, options) of every global module hook, in firing order per kind."""
    m = _module
    out = [(i, "forward_pre", fn, {"with_kwargs": False})
           for i, fn in m._global_forward_pre_hooks.items()]
    out += [(i, "forward", fn, {"with_kwargs": i in m._global_forward_hooks_with_kwargs,
                                "always_call": i in m._global_forward_hooks_always_called})
            for i, fn in m._global_forward_hooks.items()]
    if m._global_backward_hooks:
        if m._global_is_full_backward_hook is False:
            raise NotImplementedError(
                "nn.modules.module.register_module_backward_hook (the legacy global backward "
                "hook) with a deployed model: its modules run on their workers, where a "
                "legacy hook cannot sit beside their own full backward hooks. Register it "
                "with register_module_full_backward_hook instead")
        out += [(i, "full_backward", fn, {}) for i, fn in m._global_backward_hooks.items()]
    out += [(i, "full_backward_pre", fn, {}) for i, fn in m._global_backward_pre_hooks.items()]
    return out


def merged(dep: Deployment, path: str, own: list[tuple], globals_: list[tuple]) -> list[tuple]:
    """The hooks a placed module at ``path`` should hold on its worker: each global one (under
    an id of its own for this module) before the module's own of the same kind."""
    if not globals_:
        return own
    from disthook.distributed.hook_table import next_hook_id

    ids = dep.__dict__.setdefault("_global_hook_ids", {})
    out = []
    for gid, kind, fn, options in globals_:
        key = (path, gid)
        if key not in ids:
            ids[key] = (next_hook_id(), _while_registered(gid, kind, fn))
        out.append((ids[key][0], kind, ids[key][1], options))
    return out + own  # (the order that counts is within a kind: sync_hooks keeps it)


_GLOBAL_DICTS = {"forward_pre": "_global_forward_pre_hooks", "forward": "_global_forward_hooks",
                 "full_backward": "_global_backward_hooks",
                 "full_backward_pre": "_global_backward_pre_hooks"}


def _while_registered(gid: int, kind: str, fn):
    """``fn`` as a placed module's copy of global hook ``gid``: it does nothing once the
    global hook was removed (by a hook during a call, say), as in one process, where the
    modules the call reaches afterwards no longer fire it; the copies go with the next call
    (``hook_sync``)."""
    @functools.wraps(fn)
    def while_registered(*args, **kwargs):
        if gid not in getattr(_module, _GLOBAL_DICTS[kind]):
            return None
        return fn(*args, **kwargs)

    return while_registered
