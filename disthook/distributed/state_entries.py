"""A ``state_dict()`` entry of a deployed tensor. In one process an entry shares the
tensor's memory: a program holding ``sd = model.state_dict()`` sees later training in it,
and writing it in place changes the model (the partial-loading idiom: ``own =
model.state_dict(); own[name].copy_(param)``). Here an entry is a tensor whose storage is
the deployed one's, as the tensor's ``.data`` is: it reads the worker's value (the value
read with the state dict, until the program sends the workers anything, which may change
it) and its in-place changes, through views too, run there. Once the model is closed it
shares the memory of the tensor brought back, as in one process."""
from __future__ import annotations

import weakref

import numpy as np

from disthook.distributed.parameters import RemoteBuffer, RemoteStorage, meta_array
from disthook.tensor import Tensor

__all__ = ["StateEntry", "entry"]

_SLOT_DATA = Tensor.__dict__["_data"]


def entry(t: RemoteStorage, value: np.ndarray) -> StateEntry:
    """The entry of the placed tensor ``t``, whose value read from its worker is ``value``."""
    held = np.array(value)
    held.flags.writeable = False
    e = Tensor._make(meta_array(held), None, 0)
    e.__class__ = StateEntry
    e.__dict__.update(_model=t._model, _path=t._path, _is_data=True, _of=weakref.ref(t),
                      _held=(t._model._hub.issued, held))
    return e


class StateEntry(RemoteBuffer):
    """A ``state_dict()`` entry of a placed tensor (see the module's doc): like a buffer, it
    requires no grad."""

    def _local(self) -> bool:
        """Whether the tensor it stands for was brought back (the model closed): then it
        becomes a plain tensor over that tensor's memory."""
        t = self._of()
        if t is None or isinstance(t, RemoteStorage):
            return False
        self.__class__ = Tensor
        for name in ("_model", "_path", "_is_data", "_of", "_held"):
            self.__dict__.pop(name, None)
        _SLOT_DATA.__set__(self, _SLOT_DATA.__get__(t))
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
