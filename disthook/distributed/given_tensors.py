"""One object for one worker tensor in every hook event of a call: a worker names each
tensor its client hook events send (``workers/client_hooks.py``), and the client gives the
hooks of one context the same tensor for the same name, as hooks in one process share
objects (a layer's output is the next layer's input; one input of two layers is one
object): marks set on a tensor (``t.hook_registered = True``), ``id(t)`` keys and ``is``
tests carry from one hook to the next. A worker names the tensors of one job (a request's
forward or backward on it), so the store is kept while the requests run
(``channel._Hub.request_all``); it holds the tensors that graphs here lead from, so it must
not outlive them.

Each such tensor stands for the worker's: its grad_fn is named as the worker's op
(``as_made_by``; hooks on that node are refused), its ``retain_grad`` retains the worker's
gradient (``retain_on_worker``); ``made_here`` tells which of them the hook made leaves of
this process."""
from __future__ import annotations

import numpy as np

from disthook.tensor import Clone, Tensor

__all__ = ["as_made_by", "become_output", "first_places", "given", "made_here", "mark_view",
           "note_stand_in", "once_on_worker", "program_argument", "retain_on_worker",
           "take_retained", "worker_hooks"]


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


_MADE_BY: dict[str, type] = {}


def as_made_by(node_name: str) -> type:
    """A copy op whose node is called ``node_name``: the hook sees
    ``grad_fn=<AddmmBackward0>`` as in one process."""
    op = _MADE_BY.get(node_name)
    if op is None:
        if not node_name.isidentifier():
            node_name = "CloneBackward0"
        # clone's forward and backward, its node named as the worker's tensor's was; its
        # node hooks are refused (the op it is named for ran on the worker)
        op = _MADE_BY[node_name] = type(f"_Made{node_name}", (Clone,), {
            "node_name": node_name, "register_hook": _stand_in_node_hook,
            "register_prehook": _stand_in_node_hook})
    return op


def _stand_in_node_hook(node, fn):
    """``t.grad_fn.register_hook(fn)`` (or ``register_prehook``) on a tensor a hook of a
    deployed model was given: the op that made ``t`` ran on the worker, so its gradients
    (all its inputs', before and after it) never pass this node; refused rather than a hook
    that never fires or sees one input where the op has several."""
    name = type(node).__name__
    raise NotImplementedError(
        f"grad_fn hooks on a tensor a hook of a deployed model was given: its {name} ran on "
        "the model's worker, and the grad_fn here only stands for it, so a hook on it would "
        "not see that node's gradients. Hook the tensor instead (t.register_hook(fn) sees "
        "its gradient, which is the node's grad_outputs), or the module "
        "(register_full_backward_hook sees its grad_input), or run the model in one "
        "process (model.to_local())")


def program_argument(arguments: list | None, numbers: list | None, index: int,
                     array) -> Tensor | None:
    """The program's own tensor that tensor ``index`` of a hook event is (the worker's copy
    of the call's argument, unchanged: ``numbers``, the event's "arguments"), where the
    call's ``arguments`` are known and it has the same values; else None."""
    if not arguments or not numbers or index >= len(numbers) or numbers[index] is None:
        return None
    nr = numbers[index]
    own = arguments[nr] if 0 <= nr < len(arguments) else None
    if not isinstance(own, Tensor) or not own._requires_grad \
            or not np.array_equal(own._data, np.asarray(array)):
        return None
    return own


def mark_leaf_argument(t: Tensor, own: Tensor | None) -> None:
    """``t``, a forward (pre-)hook's tensor, stands for the program's own tensor ``own``
    (``program_argument``): where that is a leaf requiring grad, ``t`` refuses an in-place
    change under grad mode with torch's leaf error, at the hook's statement, as one process
    does (Tensor._leaf_requiring_grad), not on the worker after the hook ran on."""
    if own is not None and own._grad_fn is None:
        t.__dict__["_leaf_argument"] = True


def as_changed(t: Tensor) -> Tensor:
    """What a hook's tensor that it changed in place is sent as: a stand-in for the
    program's leaf (``mark_leaf_argument``) could only be changed unrecorded (no_grad), as
    that leaf: its value alone, which the worker's copy takes unrecorded too."""
    return t.detach() if "_leaf_argument" in t.__dict__ else t


def mark_view(t: Tensor, views: list | None, index: int) -> None:
    """Tensor ``index`` of a hook event stands for a custom Function's view output on the
    worker (``views``, the event's "views": a full backward hook's wrapping of a module's
    output): ``t`` refuses an in-place change with torch's error, in the hook, as one process
    does (Tensor._inplace), not after the hook ran on."""
    view = views[index] if views and index < len(views) else None
    if view is not None and t._grad_fn is not None and t._base is None:
        t.__dict__["_custom_view"] = (int(view[0]), str(view[1]))


def made_here(leaves: list) -> frozenset:
    """Ids of the tensors a client hook was given that it made leaves requiring grad here
    (``out.requires_grad = True`` on a frozen model's output, as baukit's retain_grad does):
    tensors of this process, whose ``.grad`` grows here as in one process."""
    return frozenset(id(t) for t in leaves if t._grad_fn is None and t._requires_grad)


def retain_on_worker(t: Tensor) -> None:
    """``retain_grad()`` of a tensor a client hook got: the worker's tensor retains its
    gradient, which comes here when that worker's backward is done."""
    if not t._requires_grad:
        raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
    if t._grad_fn is None:  # a leaf here (the hook made it require grad, as baukit's
        return  # retain_grad does on a frozen model): its .grad accumulates here, a no-op
    t._retain_on_worker = True
    t._retains_grad = True  # its .grad (the worker's, sent here) is expected: no warning


def note_stand_in(stand_ins, ctx: str, name: str, t: Tensor) -> None:
    """Remember ``t`` as the hook's tensor for the worker's tensor ``name`` in context
    ``ctx`` (a weak map: while the program or a graph holds it), for ``become_output``."""
    if "retain_grad" in t.__dict__ and t._grad_fn is not None:  # (a stand-in with a graph)
        stand_ins[f"{ctx}|{name.rpartition('@')[0]}"] = t
        t.__dict__["_worker_name"] = name


def stand_in_of(stand_ins, ctx: str, name: str | None, shape: tuple | None = None,
                dtype=None, as_given: bool = False) -> Tensor | None:
    """The hook's tensor for the worker's tensor ``name`` that a call returned (of
    ``shape`` and ``dtype``, where given), where a hook here was given that tensor; else None.
    ``as_given``: only where the worker did not change it since (its value is the one the
    hook was given, which the call's answer does not carry)."""
    if not name:
        return None
    t = stand_ins.pop(f"{ctx}|{name.rpartition('@')[0]}", None)
    if t is None or shape is not None and (t._data.shape != tuple(shape)
                                           or t._data.dtype != dtype):
        return None
    if as_given and t.__dict__.get("_worker_name") != name:
        # changed since (by the hook itself, recorded here from its own graph): it stays a
        # tensor of its own, but a gradient it retains is the output's (become_output)
        if not t.__dict__.get("_retain_on_worker"):
            return None
        t.__dict__["_retains_output"] = True
    return t


def become_output(t: Tensor | None, out: Tensor) -> Tensor:
    """The call's output ``out`` as the one object the hook was given for it (``t``, from
    ``stand_in_of``), as in one process, where a forward hook's output *is* what the call
    returns: marks, ``is`` tests, ``retain_grad`` and tensor hooks put on it later are the
    output's. ``t`` takes ``out``'s node; the tensor hooks the hook put on it
    stay on the worker's tensor, where they fire with the gradient of the value the hook
    saw (``worker_hooks``); a ``retain_grad`` it asked for is retained here too, for where
    the program changes the output in place later (``take_retained``).
    ``t`` has ``out``'s value already (``stand_in_of(as_given=True)``)."""
    if t is None:
        return out
    d = t.__dict__
    if d.pop("_retains_output", False):  # a tensor of its own: where the program changes
        out.retain_grad()  # the output in place, it takes the output's gradient, retained
        d["_grad_of"] = (out, out._vc[0])  # here (take_retained)
        return out
    worker_retains = bool(d.pop("_retain_on_worker", False))
    for field in ("retain_grad", "register_hook", "_reach_from", "_leaf_argument",
                  "_custom_view", "_worker_name"):
        d.pop(field, None)
    if t._backward_hooks:
        d["_worker_hooks"] = t._backward_hooks
    if t._grad_fn is not None and t._grad_fn._retains:
        t._grad_fn._retains.pop(t._output_nr, None)
    t._grad_fn, t._output_nr, t._requires_grad = out._grad_fn, out._output_nr, True
    t._backward_hooks = None
    t._retains_grad = False
    if "_custom_view" in out.__dict__:  # (see Tensor._inplace)
        d["_custom_view"] = out.__dict__["_custom_view"]
    if worker_retains:
        t.retain_grad()
        d["_grad_of"] = (t, t._vc[0])
    return t


def worker_hooks(t: Tensor):
    """The tensor hooks a client hook put on ``t`` that fire with the worker's tensor's
    gradient (leaf_hook events): its own, or those it had when it became a call's output."""
    return t.__dict__.get("_worker_hooks", t._backward_hooks)


def drop_taps(taps: dict, ctx: str, stand_ins: list) -> None:
    """``stand_ins`` (``stand_in_of``'s, None for none) become outputs of context ``ctx``'s
    node: no taps of their own (their gradients are the node's outputs')."""
    ids = {id(t) for t in stand_ins if t is not None}
    if ids and ctx in taps:
        taps[ctx] = [e for e in taps[ctx] if id(e[1]) not in ids]


def take_retained(t: Tensor, grad: Tensor) -> None:
    """The gradient the worker's tensor retained for ``t`` (``retain_on_worker``) is its
    ``.grad``: the whole of it, the part's own uses of that tensor too (a part that returns
    ``h, h.sigmoid()``). Not where ``t`` stands for a call's output that the program changed
    in place since (``become_output``): as torch's retain_grad follows the tensor, it is
    then the gradient of what the output is now, which the output retained here."""
    of = t.__dict__.get("_grad_of")
    if of is None or of[0]._vc[0] == of[1]:
        t._grad = grad
    else:
        t._grad = of[0]._grad
