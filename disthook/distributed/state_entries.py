"""A ``state_dict()`` entry of a deployed tensor. In one process an entry shares the
tensor's memory: a program holding ``sd = model.state_dict()`` sees later training in it,
and writing it in place changes the model (the partial-loading idiom: ``own =
model.state_dict(); own[name].copy_(param)``). Here an entry is a tensor whose storage is
the deployed one's, as the tensor's ``.data`` is: it reads the worker's value (the value
read with the state dict, until the program sends the workers anything, which may change
it) and its in-place changes, through views too, run there. Once the model is closed it
shares the memory of the tensor brought back, as in one process.

A parameter's ``.grad`` is such a tensor too (``GradEntry``): a kept ``g = p.grad`` reads
what a later backward added to the gradient, or ``zero_grad(set_to_none=False)`` zeroed,
and its in-place writes change the gradient there; once the gradient is set to None or
replaced (``zero_grad()``, ``p.grad = t``), ``g`` keeps the value it had then, as a plain
tensor, as one process's does."""
from __future__ import annotations

import weakref

import numpy as np

from disthook.autograd import grad_mode
from disthook.distributed import remote_grads
from disthook.distributed.parameters import RemoteBuffer, RemoteStorage, meta_array
from disthook.tensor import Tensor

__all__ = ["GradEntry", "StateEntry", "WrittenWhole", "entry", "freeze_entries", "freeze_grads",
           "grad_entry", "grads_home"]

_SLOT_DATA = Tensor.__dict__["_data"]


def entry(t: RemoteStorage, value: np.ndarray) -> StateEntry:
    """The entry of the placed tensor ``t``, whose value read from its worker is ``value``."""
    e = _made(StateEntry, t, value)
    t._model.__dict__.setdefault("_state_entries", weakref.WeakValueDictionary())[id(e)] = e
    return e


def freeze_entries(tensors: list[RemoteStorage]) -> None:
    """The values of placed ``tensors`` are about to be replaced (``p.data = t``,
    ``load_state_dict(..., assign=True)``): in one process ``p`` then takes new memory and a
    state dict taken before keeps the old, so each entry of theirs the program still holds
    becomes a plain tensor with the value it has now."""
    wanted = {id(t) for t in tensors}
    for model in {id(t._model): t._model for t in tensors}.values():
        entries = model.__dict__.get("_state_entries", {})
        for key, e in list(entries.items()):
            if isinstance(e, StateEntry) and id(e._of()) in wanted:
                value = np.array(e._data)
                entries.pop(key, None)
                _plain(e, value)


def _plain(e: Tensor, value: np.ndarray) -> None:
    """``e`` (an entry) is a plain tensor of ``value`` from now on."""
    e.__class__ = Tensor
    for name in ("_model", "_path", "_is_data", "_of", "_held"):
        e.__dict__.pop(name, None)
    _SLOT_DATA.__set__(e, value)


def _made(cls: type, t: RemoteStorage, value: np.ndarray):
    """A ``cls`` standing for ``t`` (or its gradient), read now as ``value``."""
    held = np.array(value)
    held.flags.writeable = False
    e = Tensor._make(meta_array(held), None, 0)
    e.__class__ = cls
    e.__dict__.update(_model=t._model, _path=t._path, _is_data=True, _of=weakref.ref(t),
                      _held=(t._model._hub.issued, held))
    return e


class _DataIsSelf:
    """An entry's ``.data`` is the entry (it shares the entry's storage, as in one process),
    not the ``.data`` of the tensor it stands for."""

    @property
    def data(self):
        return self

    @data.setter
    def data(self, value) -> None:
        if not isinstance(value, Tensor):
            raise TypeError(f"data must be a Tensor, got {type(value).__name__}")
        self._set_value(value, f"{self._path}.data = ...")


class WrittenWhole(_DataIsSelf, RemoteBuffer):
    """A tensor whose storage is elsewhere and takes only whole values: an in-place change
    is made here on its value, which ``_write(array)`` writes there; ``_read()`` gives the
    value (both the subclass's)."""

    @property
    def _data(self) -> np.ndarray:
        return self._read()

    @_data.setter
    def _data(self, value: np.ndarray) -> None:
        self._set_value(Tensor._make(np.asarray(value), None, 0), f"{self._path} = ...")

    def _set_value(self, value: Tensor, what: str) -> None:
        if isinstance(value, RemoteStorage):
            value = value.detach()
        if value.shape != self.shape:
            raise RuntimeError(f"{what}: a tensor of size {list(self.shape)} takes a value of "
                               f"that size, not {list(value.shape)}")
        self._write(np.array(value.detach()._data, dtype=_SLOT_DATA.__get__(self).dtype))

    def _inplace(self, op: str, args: tuple, kwargs: dict):
        args = tuple(a.detach() if isinstance(a, RemoteStorage) else a for a in args)
        kwargs = {k: a.detach() if isinstance(a, RemoteStorage) else a
                  for k, a in kwargs.items()}
        value = Tensor._make(np.array(self._data), None, 0)
        with grad_mode.no_grad():
            getattr(value, op)(*args, **kwargs)
        self._set_value(value, f"{self._path}.{op}()")
        return self

    def __repr__(self) -> str:
        return repr(self.detach())


class StateEntry(_DataIsSelf, RemoteBuffer):
    """A ``state_dict()`` entry of a placed tensor (see the module's doc): like a buffer, it
    requires no grad."""

    def _local(self) -> bool:
        """Whether the tensor it stands for was brought back (the model closed): then it
        becomes a plain tensor over that tensor's memory."""
        t = self._of()
        if t is None or isinstance(t, RemoteStorage):
            return False
        _plain(self, _SLOT_DATA.__get__(t))
        return True

    @property
    def _data(self) -> np.ndarray:
        if self._local():
            return _SLOT_DATA.__get__(self)
        issued, held = self._held
        hub = self._model._hub
        if issued != hub.issued:  # the workers were sent something since: read it again
            held = np.array(self._model._states(names=[self._path])["state"][self._path])
            held.flags.writeable = False
            self.__dict__["_held"] = (hub.issued, held)
        return held

    @_data.setter
    def _data(self, value: np.ndarray) -> None:
        if self._local():
            _SLOT_DATA.__set__(self, value)
            return
        self._set_value(Tensor._make(np.asarray(value), None, 0), f"{self._path} = ...")

    def _inplace(self, op: str, args: tuple, kwargs: dict):
        if self._local():
            return getattr(self, op)(*args, **kwargs)
        return super()._inplace(op, args, kwargs)

    def __repr__(self) -> str:
        return repr(self.detach())


def grad_entry(p, value: np.ndarray) -> GradEntry:
    """The ``.grad`` of the placed parameter ``p``, whose value read from its worker is
    ``value``."""
    e = _made(GradEntry, p, value)
    p._model.__dict__.setdefault("_grad_entries", weakref.WeakValueDictionary())[id(e)] = e
    return e


def freeze_grads(params: list) -> None:
    """The gradients of ``params`` are about to be set to None or replaced on their workers:
    each ``GradEntry`` of them the program still holds becomes a plain tensor with the value
    the gradient has now (one request per worker, only where there are such tensors)."""
    from disthook.distributed.graph_grads import forget_graph_grads

    forget_graph_grads(params)
    wanted = {id(p) for p in params}
    entries = [e for model in {id(p._model): p._model for p in params}.values()
               for e in list(model.__dict__.get("_grad_entries", {}).values())
               if id(e._of()) in wanted]
    if not entries:
        return
    asked: dict = {}
    for e in entries:
        asked.setdefault((e._model, e._model._owner(e._path)), set()).add(e._path)
    grads: dict = {}
    for (model, address), names in asked.items():
        reply = model._hub.request(address, "get_state", {"names": sorted(names)},
                                   what="the gradients kept as p.grad")
        grads.update({(model, k): v for k, v in reply["result"]["grads"].items()})
    for e in entries:
        value = grads.get((e._model, e._path))
        value = np.array(e._held[1] if value is None else value)
        e._model.__dict__["_grad_entries"].pop(id(e), None)
        _plain(e, value)


def grads_home(model, params: list, grads: dict) -> None:
    """The deployed ``model`` came back here (``close()``): each of ``params`` (brought back)
    gets its worker's gradient (``grads`` by name) as ``.grad``, as one process keeps it; a
    ``p.grad`` the program holds becomes that tensor (params: (parameter, its path))."""
    held: dict = {}
    for e in list(model.__dict__.get("_grad_entries", {}).values()):
        value = grads.get(e._path)
        of = e._of()
        _plain(e, np.array(e._held[1] if value is None else value))
        if value is not None and of is not None:
            held[id(of)] = e
    model.__dict__.pop("_grad_entries", None)
    for p, path in params:
        if path in grads and not isinstance(p, RemoteStorage):
            e = held.get(id(p))
            p.grad = e if e is not None else Tensor._make(np.array(grads[path]), None, 0)


class GradEntry(WrittenWhole):
    """A placed parameter's ``.grad`` (see the module's doc): like a buffer, it requires no
    grad."""

    def _read(self) -> np.ndarray:
        issued, held = self._held
        hub = self._model._hub
        if issued != hub.issued:  # the workers were sent something since: read it again
            value = self._model._states(names=[self._path])["grads"].get(self._path)
            if value is None:
                raise RuntimeError(
                    f"this tensor was the gradient of {self._path}, which its worker has "
                    "since set to None in a way the client did not see, so the value it "
                    "had then is not known here: read the parameter's .grad again")
            held = np.array(value)
            held.flags.writeable = False
            self.__dict__["_held"] = (hub.issued, held)
        return held

    def _write(self, new: np.ndarray) -> None:
        remote_grads.grad_op([self._of()], "set", grads=[new])
        new.flags.writeable = False
        self.__dict__["_held"] = (self._model._hub.issued, new)
