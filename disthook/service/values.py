"""Hook arguments and results as wire data, both ways between a worker and the client.

Tensors travel as their array, whether they require grad and the name of the node that
made them (its ``grad_fn``, shown on the other side as it is here); tuples, lists and str-keyed
dicts keep their kind, a namedtuple, a dict subclass or a dataclass its class
(``_pack_named``); None, bools, numbers and strings travel as they are. Anything else
(a module object, say) cannot cross: it travels as ``{"opaque": "<type name>"}`` and
arrives as ``None`` — the receiving side substitutes what it knows (the client passes its
module proxy to a module hook in place of the worker's module).
"""
from __future__ import annotations

import collections
import dataclasses
import functools
import importlib
import sys

import numpy as np

from disthook import wire
from disthook.tensor import Tensor

__all__ = ["changed_container", "containers_in", "opaque_in", "pack", "tensors_in", "unpack"]


def pack(value, tensor=None):
    """Wire data for ``value`` (tensors by value: their arrays, detached). ``tensor(t)``,
    when given, packs each tensor instead."""
    if isinstance(value, Tensor):
        if tensor is not None:
            return tensor(value)
        if value._grad_fn is not None:  # the receiver shows the same grad_fn name
            return {"tensor": value._data, "requires_grad": bool(value._requires_grad),
                    "grad_fn": type(value._grad_fn).__name__}
        return {"tensor": value._data, "requires_grad": bool(value._requires_grad)}
    if value is None or type(value) in (bool, int, float, str):
        return value
    if isinstance(value, tuple):
        if isinstance(getattr(type(value), "_fields", None), tuple):  # a namedtuple
            return _pack_named(value, tensor)
        return {"tuple": [pack(v, tensor) for v in value]}
    if isinstance(value, list):
        return {"list": [pack(v, tensor) for v in value]}
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        if type(value) is not dict:  # a model output's mapping class (transformers')
            return _pack_named(value, tensor, "mapping", list(value), list(value.values()))
        return {"dict": {k: pack(v, tensor) for k, v in value.items()}}
    if _is_record(value):
        names = [f.name for f in dataclasses.fields(value)]
        return _pack_named(value, tensor, "fields", names, [getattr(value, n) for n in names])
    state = _distribution_state(value)
    if state is not None:
        return _pack_named(value, tensor, "object", list(state), list(state.values()))
    return {"opaque": type(value).__name__}


def unpack(data, make_tensor=None, kept=None, classes: bool = False):
    """The value of wire data; ``make_tensor(array, requires_grad, grad_fn)`` builds each
    tensor, ``grad_fn`` being the name of the node that made it on the sender (or None)
    (default: a new tensor owning a copy of the array, without history). ``kept(record)``
    builds each tensor whose value stayed on a worker (``{"kept": id, ...}``: see
    ``kept_record``); without it such data is refused. ``classes``: a dict subclass or a
    dataclass comes back as its own class, made with its constructor, where loaded here (the
    client, reading what its workers answer); else (a worker, reading what any client sends)
    as a plain dict or a namedtuple of the same fields: nothing a sender names is called."""
    if make_tensor is None:
        make_tensor = _plain_tensor
    if data is None or type(data) in (bool, int, float, str):
        return data
    if isinstance(data, dict) and len(data) in (1, 2, 3):
        if "tensor" in data and isinstance(data["tensor"], np.ndarray):
            t = make_tensor(data["tensor"], bool(data.get("requires_grad")),
                            data.get("grad_fn"))
            if data.get("inference") is True:  # a call's argument made in inference_mode
                from disthook.autograd.inference import made_inference
                made_inference(t)
            return t
        if len(data) == 1:
            (tag, payload), = data.items()
            if tag == "tuple" and isinstance(payload, list):
                return tuple(unpack(v, make_tensor, kept, classes) for v in payload)
            if tag == "list" and isinstance(payload, list):
                return [unpack(v, make_tensor, kept, classes) for v in payload]
            if tag == "dict" and isinstance(payload, dict):
                return {k: unpack(v, make_tensor, kept, classes) for k, v in payload.items()}
            if tag == "named" and isinstance(payload, dict):
                return _unpack_named(payload, make_tensor, kept, classes)
            if tag == "opaque":
                return None
    if kept is not None and isinstance(data, dict) and isinstance(data.get("kept"), str):
        return kept(data)
    raise ValueError(f"not a packed hook value: {data!r:.80}")


def custom_view(t: Tensor) -> list | None:
    """``[output_nr, name]`` where ``t`` is a custom Function's view output still unchanged
    (a full backward hook's wrapping of a module's output), else None: the client's tensor
    that stands for it refuses an in-place change as one process does (Tensor._inplace)."""
    view = t.__dict__.get("_custom_view")
    if view is None or t._vc[0] != t.__dict__.get("_view_version", t._vc[0]):
        return None  # (a placed call's output on the client has no version of its own)
    return list(view)


def as_argument(t: Tensor, nr: int) -> Tensor:
    """Mark ``t`` as argument ``nr`` of a call from the client (its tensors in ``pack``'s
    order), as it is now: see ``kept_record``."""
    t.__dict__["_argument"] = (nr, t._vc[0])
    return t


def mark_custom_view(t: Tensor, view) -> None:
    """Make ``t`` (a chain stage's input) stand for the previous stage's output that is a
    custom Function's view (``custom_view``'s ``[output_nr, name]``): an in-place change of
    it raises torch's error on this stage and in the client's hooks, as in one process."""
    t.__dict__["_custom_view"] = (int(view[0]), str(view[1]))
    t.__dict__["_view_version"] = t._vc[0]


def argument_number(t: Tensor) -> int | None:
    """The number of the call's argument that ``t`` is, unchanged since it came (marked by
    ``as_argument``), else None: a hook event names it, for the client to give its hooks
    the program's own tensor where one process does."""
    mark = t.__dict__.get("_argument")
    return None if mark is None or t._vc[0] != mark[1] else mark[0]


def returned_argument(t: Tensor) -> int | None:
    """The number of the call's argument that ``t`` is, unchanged and without hooks on it or
    its node (a part that returns its input as it is: ``nn.Identity``), else None: the call
    then gives back the program's own tensor there, as one process does."""
    mark = t.__dict__.get("_argument")
    node = t._grad_fn  # (a stand-in node of the call: a legacy backward hook goes there)
    if mark is None or t._vc[0] != mark[1] or t._backward_hooks or t._post_acc_hooks \
            or t._retains_grad or node is not None and (node._post_hooks or node._pre_hooks):
        return None
    return mark[0]


# a backward's gradients that the client gave and a hook on the worker changed in place: their
# new values go back under this key and the gradient's number (in the answer's "tapped"), for
# the client to change its own gradient tensor, which in one process is the one changed
GIVEN_TAP = "given:"


def one_object_grads(packed: list, grads: list) -> list:
    """A backward request's gradients (``packed``, those of ``grads`` as they travel), with
    a gradient that is the same tensor as an earlier one sent as ``{"same": i}``: the
    worker makes them one tensor again, so that a hook's in-place change of one is a change
    of the other (one process's add hands both its operands one gradient tensor)."""
    first: dict = {}
    out = []
    for i, (g, p) in enumerate(zip(grads, packed)):
        j = None if g is None else first.setdefault(id(g), i)
        out.append(p if j is None or j == i else {"same": j})
    return out


def given_changes(made: list, tapped: dict) -> None:
    """Put in ``tapped`` the new value of each gradient the client gave that the backward
    changed in place (``made``: (its number, the tensor, its version when made))."""
    for i, t, version in made:
        if t._vc[0] != version:
            tapped[f"{GIVEN_TAP}{i}"] = t._data


def saved_by_its_node(t: Tensor) -> bool:
    """Whether the node that made ``t`` saved it for backward (tanh, sigmoid, exp keep their
    result): a backward through that node refuses it once changed in place, which the
    client's tensor that stands for it checks (``RemoteBackward0``)."""
    node = t._grad_fn
    return node is not None and any(getattr(s, "vc", None) is t._vc
                                    for s in node._saved or ())


def unreached_inputs(outs: list, inputs: list) -> list[int]:
    """The numbers of ``inputs`` that require grad and that the graph of no tensor of
    ``outs`` reaches (a forward pre-hook gave the module a detached tensor): the client's
    node of the call then has no edge to the program's tensor there, as one process's graph
    has none (its backward runs nothing on the way to it, its hooks do not fire)."""
    return sorted(_unreached(outs, {  # (leaves: a kept value has a graph)
        id(t): k for k, t in enumerate(inputs)
        if isinstance(t, Tensor) and t._requires_grad and t._grad_fn is None}))


def graph_facts(outs: list, inputs: list, named: list,
                saved: set | None = None) -> tuple[list[int], list[str] | None]:
    """From one walk of the graph of ``outs`` (a call's answer needs both; each walk would
    cost about as much as the other): ``unreached_inputs``'s answer, and the names
    (``named``: (name, parameter) pairs, a tied one under each of its names) of the
    parameters that require grad and that the graph of no tensor of ``outs`` reaches (a
    forward hook replaced a layer's output by one computed under no_grad), None where it
    reaches them all: the client's node of the call then has no edge to their accumulators,
    as one process's graph has none (a backward whose ``inputs=`` name only such parameters
    runs nothing of the call, and the hooks on its outputs do not fire). With ``saved``, the
    whole graph is walked and the ids of the version counters of the tensors its nodes saved
    for backward are put there: an argument of the call among them (a linear layer's input),
    or an output that a later op of the call saved (``y * y`` beside ``return y``), is one
    that the client's node checks for a change in place (``RemoteBackward0``)."""
    leaves = {id(t): ("input", k) for k, t in enumerate(inputs)
              if isinstance(t, Tensor) and t._requires_grad and t._grad_fn is None}
    leaves.update((id(p), ("param", id(p))) for _, p in named if p.requires_grad)
    left = _unreached(outs, leaves, saved)
    params = {key for kind, key in left if kind == "param"}
    return (sorted(key for kind, key in left if kind == "input"),
            [name for name, p in named if id(p) in params] or None)


def _unreached(outs: list, leaves: dict, saved: set | None = None) -> set:
    """The keys of ``leaves`` (id of a leaf -> key) whose leaf the graph of no tensor of
    ``outs`` reaches; with ``saved``, the whole graph is walked and the ids of the version
    counters its nodes saved are put there."""
    left = dict(leaves)
    seen, todo = set(), [o._grad_fn for o in outs if o._grad_fn is not None]
    while todo and (left or saved is not None):
        node = todo.pop()
        left.pop(id(getattr(node, "variable", None)), None)
        if saved is not None and node._saved:
            saved.update(id(vc) for t in node._saved if (vc := getattr(t, "vc", None)))
        for nxt, _ in node.next_functions:
            if nxt is not None and id(nxt) not in seen:
                seen.add(id(nxt))
                todo.append(nxt)
    return set(left.values())


def kept_record(vid: str, t: Tensor, inline_bytes: int = 0, saved: set | None = None) -> dict:
    """What a worker answers for its tensor ``t`` kept under ``vid`` (its value stays there):
    shape, dtype, whether it requires grad and the node that made it, and the value itself
    when it has at most ``inline_bytes`` bytes (a loss: no round trip to read it). ``saved``
    (``graph_facts``' ``saved``): its call's saved tensors, beyond those of the node that made it
    ("saved": "later", where that node did not save it)."""
    data = t._data
    record = {"kept": vid, "shape": list(data.shape), "dtype": data.dtype.str,
              "strides": list(data.strides), "requires_grad": bool(t._requires_grad)}
    if t._grad_fn is not None:
        record["grad_fn"] = type(t._grad_fn).__name__
    view = custom_view(t)
    if view is not None:
        record["custom_view"] = view
    if t.is_inference():  # (a hook's result made in inference_mode, under no_grad)
        record["inference"] = True
    if saved_by_its_node(t):
        record["saved"] = True
    elif saved is not None and id(t._vc) in saved:
        record["saved"] = "later"
    argument = returned_argument(t)
    if argument is not None:
        record["argument"] = argument
    if data.nbytes <= inline_bytes:
        record["value"] = wire.c_order(data)
    return record


def containers_in(value, found: list | None = None) -> list:
    """Each list and dict in ``value`` (through tuples, lists and dicts), with what it holds
    then (the ids of its items, and its keys), for ``changed_container`` to compare later:
    a call that changes a container it was given as a copy (on a worker, or cut into
    micro-batches) would leave the program's own as it was."""
    found = [] if found is None else found
    if isinstance(value, list):
        found.append((value, [id(v) for v in value]))
    elif isinstance(value, dict):
        found.append((value, [(k, id(v)) for k, v in value.items()]))
    elif not isinstance(value, tuple):
        return found
    for v in value.values() if isinstance(value, dict) else value:
        containers_in(v, found)
    return found


def changed_container(held: list):
    """The first container of ``containers_in``'s list that changed since, or None."""
    for container, was in held:
        now = ([id(v) for v in container] if isinstance(container, list)
               else [(k, id(v)) for k, v in container.items()])
        if now != was:
            return container
    return None


def tensors_in(value):
    """The tensors in a value, in the order ``pack`` visits them."""
    if isinstance(value, Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from tensors_in(v)
    elif isinstance(value, dict) and all(isinstance(k, str) for k in value):
        for v in value.values():
            yield from tensors_in(v)
    elif _is_record(value):
        for f in dataclasses.fields(value):
            yield from tensors_in(getattr(value, f.name))
    else:
        for v in (_distribution_state(value) or {}).values():
            yield from tensors_in(v)


def opaque_in(value) -> str | None:
    """What in ``value`` would travel as opaque (``"a Linear"``), or None if it all packs."""
    if isinstance(value, Tensor) or value is None or type(value) in (bool, int, float, str):
        return None
    if isinstance(value, (tuple, list)):
        items = value
    elif isinstance(value, dict) and all(isinstance(k, str) for k in value):
        items = value.values()
    elif _is_record(value):
        items = [getattr(value, f.name) for f in dataclasses.fields(value)]
    elif _distribution_state(value) is not None:
        items = _distribution_state(value).values()
    else:
        return f"a {type(value).__name__}"
    for v in items:
        found = opaque_in(v)
        if found:
            return found
    return None


def _distribution_state(value) -> dict | None:
    """A probability distribution's attributes (its parameters, shapes and flags: all it is),
    which travel as its state (a policy head's ``Categorical(logits=...)``); None for
    anything else."""
    if type(value).__module__ == "builtins" or isinstance(value, (Tensor, type)):
        return None
    from disthook.distributions import Distribution

    return dict(vars(value)) if isinstance(value, Distribution) else None


def _is_record(value) -> bool:
    """Whether ``value`` is a dataclass instance (a model output of the user's own)."""
    return dataclasses.is_dataclass(value) and not isinstance(value, type)


def _pack_named(value, tensor, form: str = "tuple", fields=None, items=None) -> dict:
    """A value of a class of its own that holds named items: a namedtuple (a part's
    ``Out(logits, hidden)``, a ``PackedSequence``; ``form`` "tuple"), a ``dict`` subclass
    ("mapping": transformers' ``ModelOutput``) or a dataclass ("fields"), as its class's
    name, its item names and its items, so that the other side gives back the same."""
    kind = type(value)
    if form == "tuple":
        fields, items = kind._fields, value
    return {"named": {"class": f"{kind.__module__}:{kind.__qualname__}", "form": form,
                      "fields": {"tuple": [str(f) for f in fields]},
                      "items": {"tuple": [pack(v, tensor) for v in items]}}}


def _unpack_named(payload: dict, make_tensor, kept, classes: bool):
    """The value ``_pack_named`` describes: of its own class where this process has that
    class loaded already or it is disthook's (nothing else is imported for it); else a
    namedtuple class of the same name and fields, which reads the same (``out.hidden``,
    ``out[1]``), or for a mapping a plain dict."""
    items = unpack(payload.get("items"), make_tensor, kept, classes)
    fields = unpack(payload.get("fields"))
    name, form = payload.get("class"), payload.get("form", "tuple")
    if not (isinstance(items, tuple) and isinstance(fields, tuple) and isinstance(name, str)
            and len(fields) == len(items) and all(isinstance(f, str) for f in fields)
            and form in ("tuple", "mapping", "fields", "object")):
        raise ValueError(f"not a packed named value: {payload!r:.80}")
    module, _, qualname = name.partition(":")
    kind = sys.modules.get(module)
    if kind is None and _importable(module):
        # disthook's own value classes (a PackedSequence for a placed LSTM, a distribution):
        # their module is imported
        kind = _import_ours(module)
    for part in qualname.split("."):
        kind = getattr(kind, part, None)
    named = dict(zip(fields, items))
    if form == "tuple" and isinstance(kind, type) and issubclass(kind, tuple) \
            and getattr(kind, "_fields", None) == fields:
        return kind._make(items)
    if form == "object":
        return _distribution_made(kind, module, qualname, named, classes)
    if classes and form != "tuple" and isinstance(kind, type) and (
            issubclass(kind, dict) if form == "mapping" else dataclasses.is_dataclass(kind)):
        try:
            return kind(**named)
        except TypeError:  # a constructor of another shape: the stand-in below
            pass
    if form == "mapping":
        return named
    return _stand_in(qualname.rpartition(".")[2], fields)._make(items)


def _distribution_made(kind, module: str, qualname: str, state: dict, classes: bool):
    """The distribution ``_distribution_state`` describes, of its class ``kind`` (the
    client's: disthook's, or the program's own, found by its name: else a TypeError that
    says so), its state set as it was; a worker reading a client's gets a namedtuple of its
    attributes (nothing a sender names is made there)."""
    from disthook.distributions import Distribution
    from disthook.tensor import Size

    if not classes:
        return _stand_in(qualname.rpartition(".")[2], tuple(state))._make(state.values())
    if not (isinstance(kind, type) and issubclass(kind, Distribution)):
        kind = _made_in_a_function(Distribution, module, qualname)
    if kind is None:
        raise TypeError(
            f"a module on a worker returned a distribution of class {qualname}, which is not "
            "found here by that name (a class made inside a function: this process holds "
            "none of that name, or several, made by two calls of the function): define the "
            "class at the top level of a module, or return the distribution's parameters "
            "and make it in the code that calls the module")
    made = kind.__new__(kind)
    for name, value in state.items():
        if name in ("_batch_shape", "_event_shape") and isinstance(value, tuple):
            value = Size(value)
        made.__dict__[name] = value
    return made


def _made_in_a_function(base: type, module: str, name: str) -> type | None:
    """The one class of this process under ``base``, of ``module``, named ``name`` and made
    inside a function (``make_policy.<locals>.FixedNormal``): a deploying client's own class,
    which its workers got by value (cloudpickle gives the worker's copy the class's name as
    its qualname). None where there is none, or several (a factory called twice made two
    classes of that name, and which one the worker's copy is cannot be told)."""
    found, todo, seen = [], [base], set()
    while todo:
        kind = todo.pop()
        if kind in seen:
            continue
        seen.add(kind)
        if kind.__module__ == module and kind.__name__ == name.rpartition(".")[2] \
                and "<locals>" in kind.__qualname__:
            found.append(kind)
        todo.extend(kind.__subclasses__())
    return found[0] if len(found) == 1 else None


def _importable(module: str) -> bool:
    """Whether a value's module named on the wire may be imported here to make it: only
    disthook's modules of value classes, none of whose parts is private or a ``__main__``
    (importing ``disthook.bench.__main__`` would run a benchmark and exit)."""
    parts = module.split(".")
    return (module.startswith(("disthook.nn.", "disthook.distributions."))
            and all(p.isidentifier() and not p.startswith("_") for p in parts))


def _import_ours(module: str):
    """disthook's module ``module`` (a name from the wire: None where there is none)."""
    try:
        return importlib.import_module(module)
    except ImportError:
        return None


@functools.lru_cache(maxsize=256)
def _stand_in(name: str, fields: tuple) -> type:
    return collections.namedtuple(name if name.isidentifier() else "Named", fields,
                                  rename=True)


def _plain_tensor(array: np.ndarray, requires_grad: bool, grad_fn: str | None = None) -> Tensor:
    return Tensor._make(np.array(array), None, 0)
