"""One object for one worker tensor in every hook event of a call: a worker names each
tensor its client hook events send (``workers/client_hooks.py``), and the client gives the
hooks of one context the same tensor for the same name, as hooks in one process share
objects (a layer's output is the next layer's input; one input of two layers is one
object): marks set on a tensor (``t.hook_registered = True``), ``id(t)`` keys and ``is``
tests carry from one hook to the next. A worker names the tensors of one job (a request's
forward or backward on it), so the store is kept while the requests run
(``channel._Hub.request_all``); it holds the tensors that graphs here lead from, so it must
not outlive them."""
from __future__ import annotations

import numpy as np

from disthook.tensor import Tensor

__all__ = ["first_places", "given", "once_on_worker"]


def given(store: dict, name: str, array, make) -> tuple[Tensor, Tensor, bool]:
    """The tensor a hook is given for the worker's tensor ``name`` ("<tensor>@<version>",
    its value ``array``), what it is computed from here, and whether an earlier event gave
    it as it is: the one in ``store`` (a context's), or a new one (``make()``: the tensor
    and its base). One changed in place since (a later version) is the earlier one: as it
    is where a hook here made that change (which the worker made after it), else changed
    the same way as the worker's pass changed it."""
    tensor, _, version = name.rpartition("@")
    before = store.get(tensor)
    if before is not None:
        t, base, was, mine = before
        if was == version or (t._vc[0] != mine and np.array_equal(t._data, array)):
            store[tensor] = (t, base, version, t._vc[0])
            return t, base, True
    t, base = make()
    if before is not None:
        t = _changed_in_place(before[0], t)
    store[tensor] = (t, base, version, t._vc[0])
    return t, base, False


def _changed_in_place(t: Tensor, now: Tensor) -> Tensor:
    """``t`` made what ``now`` (a new copy of its worker tensor, changed in place on the
    worker since) is: its values and grad_fn, its version one more, as an in-place op in
    one process makes it. Tensor hooks it has stay with the version they were put on (their
    stubs are on the worker's tensor, as torch keeps them); hooks put on it now are the
    changed version's."""
    if (t._data.shape == now._data.shape and t._data.dtype == now._data.dtype
            and t._data.flags.writeable):
        np.copyto(t._data, now._data)  # (views a hook took of it see the change too)
    else:
        t._data = now._data
    t._grad_fn, t._output_nr = now._grad_fn, now._output_nr
    t._requires_grad = now._requires_grad
    t._vc[0] += 1
    for field in ("_backward_hooks", "_on_worker", "_retain_on_worker", "_retains_grad"):
        t.__dict__.pop(field, None)
    return t


def once_on_worker(leaves: list, made: frozenset) -> tuple[list, list, list]:
    """Of a hook's tensors (``leaves``, in the order given), the indices whose tensor hooks
    the worker is to fire (watch), those whose gradients it is to retain (retain), and
    for each index whether its tensor's hooks fire on the worker (hooked): each tensor once
    (given at several places, or by an earlier event that did so already), its hooks then
    those it has when its gradient comes. ``made``: ids of tensors whose hooks fire here."""
    watch, retain, hooked = [], [], []
    first: dict[int, int] = {}
    for i, t in enumerate(leaves):
        done = t.__dict__.get("_on_worker", (False, False))
        if first.setdefault(id(t), i) != i:
            hooked.append(done[0] or first[id(t)] in watch)
            continue
        watches = bool(t._backward_hooks) and id(t) not in made and not done[0]
        retains = bool(t.__dict__.get("_retain_on_worker")) and not done[1]
        if watches:
            watch.append(i)
        if retains:
            retain.append(i)
        if watches or retains:
            t._on_worker = (done[0] or watches, done[1] or retains)
        hooked.append(done[0] or watches)
    return watch, retain, hooked


def first_places(leaves: list) -> list[bool]:
    """For each of a hook's tensors, whether this is the first place it is given at."""
    seen: set[int] = set()
    return [not (id(t) in seen or seen.add(id(t))) for t in leaves]
