"""``RemoteValue``: a tensor whose value stays on the worker that computed it.

The output of a placed part called by code running on the client (``glue.call_placed``) is
kept by the part's worker; the client holds a ``RemoteValue``, a ``Tensor`` that knows its
shape and dtype (its slot ``_data`` holds a one-element broadcast array of them) and where its
value is. Passing it to a part placed on the same worker uses the value there; on another
worker, that worker takes it from its peer directly (``send_value``), never through the
client. An op of the engine applied to it on the client (a residual add, a ``view``, a loss)
runs on its worker too (``remote_apply``), so a forward written for one process keeps its
activations where they are computed. Gradients follow the same rule in backward: a placed
call's backward keeps its input gradients on the worker, and the next node takes them from
there.

What needs the value here gets it, fetched once and cached (read-only): printing, ``.item()``,
``.numpy()``, a hook that reads it, an op whose other operands are on another deployment. An
in-place change makes the tensor an ordinary local one first (its value fetched). The worker
frees the value when the last client tensor holding it goes (``drop_values``).

How a read of ``_data`` is told apart, without a cost for local tensors: only a
``RemoteValue`` runs this property. A read whose next instruction takes only metadata
(``t._data.shape``, ``.dtype``, ``.ndim``, ``.size``, ``.itemsize``, ``.nbytes``,
``.strides``, ``.flags``), or stores it in a local variable that the code reads only so, gets
the metadata array (decided once per code object and instruction, from its bytecode); a read
by an op's ``forward`` inside ``Op.apply`` (or ``Tensor._binary``) raises ``RemoteOperand``,
and the op goes to the worker; every other read fetches the value.
"""
from __future__ import annotations

import bisect
import dis
import sys
import threading
import weakref

import numpy as np

from disthook import _dtype, wire
from disthook._tensor_shape import by_keyword
from disthook.autograd import grad_mode
from disthook.autograd.inference import InferenceVersion
from disthook.autograd.saved_hooks import current_pair
from disthook.ops import base as ops_base
from disthook.ops import shape as S
from disthook.ops import views as V
from disthook.service import op_calls
from disthook.tensor import Tensor, _can_view
from disthook.utils.checkpoint import _Frame

__all__ = ["RemoteValue", "make_remote", "pack_args", "remote_apply"]

_SLOT_DATA = Tensor.__dict__["_data"]
# what a read may take of the array a RemoteValue holds here: its metadata, never a value
_META_ATTRS = frozenset({"shape", "dtype", "ndim", "size", "itemsize", "nbytes", "strides",
                         "flags"})
_META, _VALUE, _OP = 0, 1, 2


class _Local(threading.local):
    fetching = 0  # > 0: an op that cannot run remotely reads its operands here


_local = _Local()


class _Ref:
    """Where one kept value is: its deployment, the worker that computed it, its id there,
    and the workers a copy was sent to. The value is dropped on all of them when the last
    client tensor holding this goes."""

    __slots__ = ("__weakref__", "address", "copies", "holders", "model", "value", "vid",
                 "views")

    def __init__(self, model, address: str, vid: str, value: np.ndarray | None = None):
        self.model, self.address, self.vid = model, address, vid
        self.copies: set[str] = {address}
        self.value = value  # the fetched array (read-only), once fetched
        self.holders = weakref.WeakSet()  # the client tensors standing for it (detach())
        self.views = weakref.WeakSet()  # the kept values that are views of it on the worker
        weakref.finalize(self, model._hub.drop_values, self.copies, vid)
        model.__dict__.setdefault("_kept_refs", weakref.WeakSet()).add(self)

    def fetch(self) -> np.ndarray:
        hub = self.model._hub
        if self.value is None:
            hub.settle()  # the call that makes it may be in flight (and carry it, if small)
        if self.value is None:
            reply = hub.request(self.address, "fetch", {"values": [self.vid]},
                                what=f"reading a value of {self.model._class_name} kept on "
                                     "its worker")
            (arr,) = reply["result"]["values"]
            self.value = laid_out(np.asarray(arr), self.strides())
        return self.value

    def strides(self) -> tuple | None:
        """The value's strides on its worker (in bytes), as its client tensors know them."""
        for t in self.holders:
            return _SLOT_DATA.__get__(t).strides
        return None

    def at(self, address: str) -> dict:
        """How a request to the worker at ``address`` names the value: by its id, with a
        copy sent there first if it has none (worker to worker: in request order, after the
        call that made it; ``from_peer``: the request waits for it)."""
        if address in self.copies:
            return {"ref": self.vid}
        self.model._hub.send_value(self.address, self.vid, address)
        self.copies.add(address)
        return {"ref": self.vid, "from_peer": True}


def fetch_held(model) -> None:
    """Fetch every value ``model``'s workers keep that the program still holds, one request
    per worker, as the deployment closes: a closed deployment's values are read here, as a
    tensor of one process is read after its model is gone (``logits`` computed inside
    ``with local_cluster(...)`` and printed after it)."""
    refs = [r for r in list(model.__dict__.get("_kept_refs", ())) if r.value is None
            and len(r.holders)]
    if not refs:
        return
    model._hub.settle()
    by_worker: dict[str, list[_Ref]] = {}
    for ref in refs:
        by_worker.setdefault(ref.address, []).append(ref)
    for address, held in by_worker.items():
        reply = model._hub.request(address, "fetch", {"values": [r.vid for r in held]},
                                   what=f"reading the values of {model._class_name} the "
                                        "program holds, as it closes")
        for ref, arr in zip(held, reply["result"]["values"]):
            ref.value = laid_out(np.asarray(arr), ref.strides())


def laid_out(arr: np.ndarray, strides: tuple | None) -> np.ndarray:
    """A value read from its worker (it comes in C order), read-only, with the worker's
    ``strides`` where they lay out a dense block in another order (a transpose, a permute):
    ``stride()``, ``is_contiguous()`` and views then read it as they did before it was read
    here, as in one process. Other layouts (a slice with gaps, a broadcast) as it came."""
    if strides is not None and arr.size and len(strides) == arr.ndim and strides != arr.strides:
        order = sorted(range(arr.ndim), key=lambda d: -strides[d])  # outermost first
        block = np.empty([arr.shape[d] for d in order], arr.dtype).transpose(np.argsort(order))
        if all(a == b for a, b, n in zip(block.strides, strides, arr.shape) if n > 1):
            block[...] = arr
            arr = block
    arr.flags.writeable = False
    return arr


class RemoteValue(Tensor):
    """A tensor whose value is kept on a worker (see the module's doc)."""

    __slots__ = ()

    @property
    def _data(self) -> np.ndarray:
        ref = self.__dict__["_ref"]
        if ref.value is not None:
            if _local.fetching or not _checkpointed() or \
                    _how_read(sys._getframe(1)) != _OP:
                return ref.value
            raise ops_base.RemoteOperand  # (see _checkpointed)
        how = _how_read(sys._getframe(1))
        if how == _META:
            return _SLOT_DATA.__get__(self)
        if how == _OP and not _local.fetching:
            raise ops_base.RemoteOperand
        return ref.fetch()

    @_data.setter
    def _data(self, value: np.ndarray) -> None:
        self._localize(value)

    @property
    def is_remote(self) -> bool:
        """Whether the value is still only on the worker (not fetched here)."""
        return self.__dict__["_ref"].value is None

    @property
    def data(self) -> Tensor:
        """The same kept value without history, as ``detach()`` gives it: a change in place
        to either is one to both, as in torch."""
        return make_remote(self.__dict__["_ref"], _SLOT_DATA.__get__(self), None, 0)

    @data.setter
    def data(self, value: Tensor) -> None:
        Tensor.data.fset(self, value)

    def _localize(self, value: np.ndarray | None = None) -> None:
        """Become an ordinary local tensor: with ``value`` (``t.data = value``) this tensor
        alone takes it as its memory; before an in-place change (no ``value``) every client
        tensor standing for the same kept value (it, its ``detach()``, its ``.data``) becomes
        local over one fetched copy, so that the change reaches them all, as the memory they
        share would in one process."""
        ref = self.__dict__["_ref"]
        if value is not None:
            _local_over(self, np.array(value))
            return
        base = self.__dict__.get("_view_of")
        if _held(base) or any(_held(view) for view in ref.views):
            raise RuntimeError(
                "an in-place change of a tensor kept on a worker that shares its memory with "
                "another tensor kept there (one is a view of the other, made by view, "
                "reshape, transpose or indexing): the other would not see the change. "
                "clone() the tensor before changing it in place")
        arr = np.array(ref.fetch())
        for t in [t for t in ref.holders if type(t) is RemoteValue]:
            _local_over(t, arr)
        if type(self) is RemoteValue:  # (held by no one else)
            _local_over(self, arr)

    def as_strided(self, size, stride, storage_offset=None):
        """Over the memory the value views on its worker, also once read here: the copy read
        here is the value alone in C order, not that memory (Longformer's sliding chunks)."""
        offset = None if storage_offset is None else int(storage_offset)
        return remote_apply(V.AsStridedView, (self,), {
            "size": tuple(int(n) for n in size), "stride": tuple(int(n) for n in stride),
            "offset": offset})

    def view(self, *args, size=None):
        shape = by_keyword(args, size, "size", "view")
        if self.__dict__["_ref"].value is None and not (
                len(shape) == 1 and isinstance(shape[0], _dtype.dtype)):
            shape = self._shape_arg(shape)
            if _can_view(_SLOT_DATA.__get__(self), shape):  # its layout on the worker
                return S.View.apply(self, shape=shape)
        return Tensor.view(self, *shape)

    def reshape(self, *args, shape=None):
        """A view where the value's layout on its worker allows one, else a copy, as in one
        process, also once read here: the copy read here is dense where the worker's value
        has gaps (a slice), and a view of that read-only copy would be no tensor's memory."""
        shape = self._shape_arg(by_keyword(args, shape, "shape", "reshape"))
        op = S.View if _can_view(_SLOT_DATA.__get__(self), shape) else S.UnsafeView
        return op.apply(self, shape=shape)

    def detach(self) -> Tensor:
        """The same kept value, without history (no copy, no round trip)."""
        return make_remote(self.__dict__["_ref"], _SLOT_DATA.__get__(self), None, 0)

    def __deepcopy__(self, memo):
        copied = Tensor._make(np.array(self.__dict__["_ref"].fetch()), None, 0)
        copied._requires_grad = self._requires_grad and self._grad_fn is None
        memo[id(self)] = copied
        return copied

    def __reduce_ex__(self, protocol):
        """Pickled as a local tensor with the value (fetched)."""
        import copy

        return copy.deepcopy(self).__reduce_ex__(protocol)


def _local_over(t: RemoteValue, arr: np.ndarray) -> None:
    """``t`` an ordinary local tensor over ``arr``."""
    t.__class__ = Tensor
    _SLOT_DATA.__set__(t, arr)
    for name in ("_ref", "_view_of"):
        t.__dict__.pop(name, None)


def _held(ref: _Ref | None) -> bool:
    """Whether a client tensor still stands for the kept value ``ref``."""
    return ref is not None and any(type(t) is RemoteValue for t in ref.holders)


def make_remote(ref: _Ref, meta: np.ndarray, node, output_nr: int) -> RemoteValue:
    t = ops_base._new(RemoteValue)
    _SLOT_DATA.__set__(t, meta)
    t._requires_grad = node is not None
    t._grad_fn = node
    t._output_nr = output_nr
    # (an output made under inference_mode is an inference tensor, as one process makes it)
    t._vc = InferenceVersion([0]) if grad_mode._state.inference else [0]
    t.__dict__["_ref"] = ref
    ref.holders.add(t)
    return t


def meta_array(dtype: np.dtype, shape: tuple, strides: tuple | None) -> np.ndarray:
    """An array with the shape, dtype and strides (layout flags) of a value kept elsewhere,
    over one element of memory: only its metadata may be read (see ``_how_read``)."""
    base = np.zeros(1, dtype)
    if strides is None or 0 in shape:
        return np.broadcast_to(base.reshape(()), shape)
    return np.lib.stride_tricks.as_strided(base, shape, strides, writeable=False)


def from_record(model, address: str, record: dict, node, output_nr: int) -> RemoteValue:
    """The client's tensor for a value a worker describes (``values.kept_record``)."""
    dtype = wire.dtype_named(record["dtype"])
    strides = record.get("strides")
    meta = meta_array(dtype, tuple(record["shape"]),
                      None if strides is None else tuple(strides))
    t = make_remote(_Ref(model, address, record["kept"], inline_value(record)), meta, node,
                    output_nr)
    if record.get("inference") is True and type(t._vc) is not InferenceVersion:
        t._vc = InferenceVersion(t._vc)  # made in inference_mode there, as one process has it
    view = record.get("custom_view")
    if node is not None and view is not None:  # (see Tensor._inplace)
        t.__dict__["_custom_view"] = (int(view[0]), str(view[1]))
    if node is not None and record.get("saved"):
        node.saved_output(t, by_its_node=record["saved"] is True)
    return t


def inline_value(record: dict) -> np.ndarray | None:
    """The value a worker sent with its description of a kept value (a small one), as the
    read-only array the client keeps; None when it sent none."""
    value = record.get("value")
    if value is None:
        return None
    value = np.asarray(value, wire.dtype_named(record["dtype"]))
    value = value.reshape(tuple(record["shape"]))
    strides = record.get("strides")
    return laid_out(value, None if strides is None else tuple(strides))


# ---- packing the arguments of a call ----------------------------------------------------

def pack_args(value, address: str, model=None):
    """``values.pack`` for a call of ``model``'s part on the worker at ``address``: a kept
    value by its id (sent there from its worker first when it is elsewhere), every other
    tensor by value, and so is a value another deployment keeps (see ``_same_deployment``)."""
    from disthook.service.values import pack

    def tensor(t: Tensor):
        ref = t.__dict__["_ref"] if type(t) is RemoteValue else None
        if ref is not None and _same_deployment(ref, model):
            return {**ref.at(address), "requires_grad": bool(t._requires_grad)}
        if ref is not None:
            return {"tensor": ref.fetch(), "requires_grad": bool(t._requires_grad)}
        if t.is_inference():  # the worker's copy is one too (its ops refuse to save it)
            return {"tensor": t._data, "inference": True}
        return pack(t)

    return pack(value, tensor)


def grad_data(g: Tensor | None, address: str, model=None):
    """A gradient for a backward request of ``model`` to ``address``: None, an array, or a
    kept value by its id (by value when another deployment keeps it)."""
    if g is None:
        return None
    if type(g) is RemoteValue:
        ref = g.__dict__["_ref"]
        return ref.at(address) if _same_deployment(ref, model) else ref.fetch()
    return g._data


def _same_deployment(ref: _Ref, model) -> bool:
    """Whether a value kept by ``ref`` can be named by its id in a request of ``model``
    (None: the value's own). A value another deployment keeps (one model's activation
    passed to another model's part: stitching, patching across models) is held for that
    deployment's client alone, and a worker-to-worker copy ordered through its channel
    would wait there unsent while this request waits for it: it travels by value."""
    return model is None or ref.model is model


# ---- ops on kept values ---------------------------------------------------------------------

def remote_apply(cls, inputs: tuple, params: dict):
    """``cls.apply(*inputs, **params)`` where an input's value is kept on a worker: on that
    worker (the one keeping the most of the op's input bytes, when several do), as one call;
    here, with the values fetched, when the op cannot go there (its operands belong to
    different deployments, a parameter is not plain data)."""
    refs = [t.__dict__["_ref"] for t in inputs if type(t) is RemoteValue]
    model = refs[0].model
    if any(r.model is not model for r in refs) or model.__dict__.get("_hub") is None:
        return _here(cls, inputs, params)
    try:
        encoded = op_calls.encode_params(params)
    except op_calls.Unsendable:
        return _here(cls, inputs, params)
    sizes: dict[str, int] = {}
    for t in inputs:
        if type(t) is RemoteValue:
            ref = t.__dict__["_ref"]
            sizes[ref.address] = sizes.get(ref.address, 0) + _SLOT_DATA.__get__(t).nbytes
    address = max(sizes, key=sizes.get)
    from disthook.distributed.glue import call_remote

    out = call_remote(model, address, list(inputs), {}, op=op_calls.op_name(cls),
                      params=encoded, what=f"{cls.__name__} on a value kept on a worker")
    if cls.view and type(inputs[0]) is RemoteValue:  # see RemoteValue._localize
        base = inputs[0].__dict__["_ref"]
        for o in (out if isinstance(out, tuple) else (out,)):
            if type(o) is RemoteValue:
                o.__dict__["_view_of"] = base
                base.views.add(o.__dict__["_ref"])
    return out


def _here(cls, inputs: tuple, params: dict):
    _local.fetching += 1
    try:
        return cls.apply(*inputs, **params)
    finally:
        _local.fetching -= 1


ops_base.remote_apply = remote_apply


def _checkpointed() -> bool:
    """Inside ``torch.utils.checkpoint`` (use_reentrant=False), its forward or its rerun: an op
    on a kept value runs on its worker even where the value came with the call's answer, so
    that the rerun, whose calls may go on without their answers, saves the same tensors here
    as the forward did (none), rather than failing its determinism check."""
    pair = current_pair()
    return pair is not None and (isinstance(getattr(pair[0], "__self__", None), _Frame)
                                 or getattr(pair[0], "keeps_values", False))


# ---- what a read of _data is for ----------------------------------------------------------

_read_kinds: dict[tuple, int] = {}  # (code, instruction offset) -> _META or _VALUE
_forward_codes: set = set()
# the callers of an op's forward that take RemoteOperand (and send the op to the worker)
_DISPATCHERS = frozenset({ops_base.Op.__dict__["apply"].__func__.__code__,
                          Tensor._binary.__code__})
_OPS_DIR = ops_base.__file__.rsplit("/", 1)[0]


def _how_read(frame) -> int:
    key = (frame.f_code, frame.f_lasti)
    kind = _read_kinds.get(key)
    if kind is None:
        kind = _read_kinds[key] = _read_kind(*key)
    if kind == _META:
        return _META
    return _OP if _in_op_forward(frame) else _VALUE


def _read_kind(code, offset: int) -> int:
    """_META when the instruction after the ``_data`` load at ``offset`` loads one of the
    metadata attributes, or stores it in a local variable of which the code only ever loads
    metadata attributes; else _VALUE."""
    instructions = list(dis.get_instructions(code))
    # the instruction that reads ``_data``: the last one at or before ``offset`` (CPython
    # 3.12 reports a load it has specialised for a property at the load's last inline
    # cache entry, past the instruction's own offset; 3.11 and 3.13 at the instruction)
    i = bisect.bisect_right([ins.offset for ins in instructions], offset) - 1
    if 0 <= i < len(instructions) - 1:
        nxt = instructions[i + 1]
        if nxt.opname == "LOAD_ATTR" and nxt.argval in _META_ATTRS:
            return _META
        if nxt.opname == "STORE_FAST" and _only_metadata_of(instructions, nxt.argval):
            return _META
    return _VALUE


def _only_metadata_of(instructions: list, name: str) -> bool:
    """Whether every load of local ``name`` is followed by a load of a metadata attribute
    (and nothing else stores to it). Any other instruction on the local (CPython 3.13's
    paired loads and stores, a comprehension's save and clear, a closure's cell, a delete)
    answers no: the value is then fetched, which is always right."""
    stores = 0
    for i, ins in enumerate(instructions):
        op = ins.opname
        if not any(part in op for part in ("FAST", "DEREF", "CLOSURE", "CELL")):
            continue
        names = ins.argval if isinstance(ins.argval, tuple) else (ins.argval,)
        if name not in names:
            continue
        if op == "STORE_FAST":
            stores += 1
        elif op in _SINGLE_LOADS or (op in _PAIRED_LOADS and names[0] != name):
            # (a paired load's second local is the one the next instruction takes)
            nxt = instructions[i + 1] if i + 1 < len(instructions) else None
            if nxt is None or nxt.opname != "LOAD_ATTR" or nxt.argval not in _META_ATTRS:
                return False
        else:
            return False
    return stores == 1


# the instructions that load one local and nothing else (3.12's checked load, 3.14's borrow)
_SINGLE_LOADS = frozenset({"LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_BORROW"})
# the instructions that load two locals (3.13, 3.14)
_PAIRED_LOADS = frozenset({"LOAD_FAST_LOAD_FAST", "LOAD_FAST_BORROW_LOAD_FAST_BORROW"})


def _in_op_forward(frame) -> bool:
    """Whether ``frame`` is an op's ``forward`` called by ``Op.apply`` (or a helper of the
    ops package called from one): its inputs may be refused, and the op sent elsewhere."""
    f = frame
    for _ in range(3):
        if f is None:
            return False
        code = f.f_code
        if code.co_name == "forward":
            if code not in _forward_codes:
                _forward_codes.update(
                    c.__dict__["forward"].__func__.__code__
                    for c in op_calls._all_ops().values()
                    if isinstance(c.__dict__.get("forward"), (staticmethod, classmethod)))
            if code in _forward_codes:
                return f.f_back is not None and f.f_back.f_code in _DISPATCHERS
        if not code.co_filename.startswith(_OPS_DIR):
            return False
        f = f.f_back
    return False

