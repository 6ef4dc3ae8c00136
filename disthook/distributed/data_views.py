"""The ``.data`` of a placed parameter or buffer: one object per tensor that reads and writes
the worker's tensor, as ``t.data`` shares ``t``'s memory in one process. Until ``t``'s value
is replaced (``t.data = v``, ``load_state_dict(..., assign=True)``): in one process ``t`` then
gets new memory and a ``.data`` taken before keeps the old values (the idiom that saves
``w.data``, puts a changed weight in, and puts the saved one back: Zennit's canonizers and
parameter modifiers, weight-swapping attributions), so ``unshare`` makes the one handed out
a local tensor holding them, and the next ``.data`` is a new one."""
from __future__ import annotations

import sys

from disthook.distributed.adopting import release
from disthook.distributed.parameters import (
    _SLOT_DATA,
    _SLOT_REQUIRES_GRAD,
    RemoteBuffer,
    RemoteStorage,
)
from disthook.distributed.state_entries import freeze_entries

__all__ = ["buffer_data", "unshare"]


def buffer_data(buf: RemoteBuffer) -> RemoteBuffer:
    """``buf.data``: the buffer's ``.data`` object (made once, until ``unshare``)."""
    cache = buf._model.__dict__.setdefault("_param_proxies", {})
    view = cache.get((buf._path, True))
    if view is None:
        view = cache[(buf._path, True)] = object.__new__(RemoteBuffer)
        _SLOT_DATA.__set__(view, _SLOT_DATA.__get__(buf))
        _SLOT_REQUIRES_GRAD.__set__(view, False)
        view._grad_fn, view._output_nr, view._vc = None, 0, [0]
        view.__dict__.update(_model=buf._model, _path=buf._path, _is_data=True)
    return view


def unshare(tensors: list[RemoteStorage]) -> None:
    """The values of placed ``tensors`` are about to be replaced: a ``.data`` of theirs that
    the program still holds becomes a local tensor with the current value (read from the
    workers together), no longer the worker's tensor; so does a ``state_dict()`` entry of
    theirs."""
    freeze_entries(tensors)
    held = []
    for t in tensors:
        t._model.__dict__.get("_data_ptrs", {}).pop(t._path, None)  # its new memory
        view = t._model.__dict__.get("_param_proxies", {}).pop((t._path, True), None)
        # (held by the program: references beyond this name and getrefcount's argument)
        if view is not None and sys.getrefcount(view) > 2:
            held.append(view)
    if held:
        for view, value in zip(held, RemoteStorage._read_together(held)):
            release(view, value._data)
