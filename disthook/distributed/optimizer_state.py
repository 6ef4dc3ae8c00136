"""``optimizer.state`` of an optimizer whose workers step a deployed model's parameters
(``remote_grads.optimizer_share``): each parameter's state (Adam's ``exp_avg``, ``step``)
lives in its worker's share, so reading ``opt.state[p]`` here reads it there, as one
process reads the optimizer's own (Adam-state pruning, Lookahead, a gradient noise scale).

``opt.state[p]`` of such a parameter is a mapping bound to it, read when used: a tensor in
it (``opt.state[p]["exp_avg"]``) is a ``RemoteStateTensor``, whose value is the worker's at
each read, so one kept across a ``step()`` sees the update, as in one process, where the
step changes it in place. Writes (``state["exp_avg"].zero_()``, ``state["exp_avg"][m] =
0``, ``opt.state[p]["slow"] = t``, ``del opt.state[p]``) are carried out in the worker's
share (its state loaded again, with the change). What a read fetched is kept until the
next step or load of the optimizer, so walking every parameter's state costs one request
per worker. Local parameters keep their state here, in the dict every optimizer has."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import MutableMapping

import numpy as np

from disthook.distributed.parameters import RemoteStorage, meta_array
from disthook.distributed.state_entries import WrittenWhole
from disthook.tensor import Tensor

__all__ = ["RemoteOptimizerState", "RemoteStateTensor", "forget", "state_of"]

_SLOT_DATA = Tensor.__dict__["_data"]


def state_of(optimizer, local, replace: bool = False) -> RemoteOptimizerState:
    """``local`` (the optimizer's own state) with the remote parameters' state read from
    their workers. ``replace``: the program assigned ``local`` as the optimizer's state
    (``opt.state = defaultdict(dict)``, a reset): the workers' shares take what it holds
    for their parameters (nothing, for a reset)."""
    if isinstance(local, RemoteOptimizerState) and not replace:
        return local
    state = RemoteOptimizerState(dict)
    state._optimizer = optimizer
    remote = {}
    for p, value in list(local.items()):
        if _stepped_there(optimizer, p):
            remote[p] = dict(value)
        else:
            dict.__setitem__(state, p, value)
    if replace:
        _load(optimizer, remote)
    return state


def _load(optimizer, state: dict) -> None:
    """The workers' shares hold ``state`` ({parameter: {key: value}}) and nothing else."""
    from disthook.optim.optimizer import _remote_params

    for kind in _remote_params(optimizer):
        kind._optimizer_share(optimizer, "load", state)
    forget(optimizer)


def forget(optimizer) -> None:
    """A step or load of ``optimizer`` was issued: what its state reads fetched is old."""
    optimizer.__dict__.pop("_fetched_state", None)


def _fetched(optimizer) -> dict:
    """{parameter: {key: value}} of every remote parameter's state, fetched once per step."""
    have = optimizer.__dict__.get("_fetched_state")
    if have is None:
        from disthook.optim.optimizer import _remote_params

        have = {}
        for kind in _remote_params(optimizer):
            have.update(kind._optimizer_share(optimizer, "state"))
        optimizer.__dict__["_fetched_state"] = have
    return have


def _stepped_there(optimizer, p) -> bool:
    from disthook.optim.optimizer import _remote_params

    return isinstance(p, RemoteStorage) and any(
        p is q for params in _remote_params(optimizer).values() for q in params)


def _write(optimizer, p, change) -> None:
    """``change(state of p)`` made in the worker's share: its whole state loaded again."""
    state = {q: dict(v) for q, v in _fetched(optimizer).items()}
    mine = state.setdefault(p, {})
    change(mine)
    if not mine:
        del state[p]
    _load(optimizer, state)


class RemoteOptimizerState(defaultdict):
    """The optimizer's ``state``: a local parameter's entry here (made on first use, as
    every optimizer's), a remote one's a ``ParamState`` over its worker's share."""

    def __getitem__(self, p):
        opt = self.__dict__.get("_optimizer")
        if opt is not None and _stepped_there(opt, p):
            return ParamState(opt, p)
        return super().__getitem__(p)

    def __setitem__(self, p, value) -> None:
        opt = self.__dict__.get("_optimizer")
        if opt is not None and _stepped_there(opt, p):
            given = dict(value)
            _write(opt, p, lambda mine: (mine.clear(), mine.update(given)))
            return
        super().__setitem__(p, value)

    def __delitem__(self, p) -> None:
        opt = self.__dict__.get("_optimizer")
        if opt is not None and _stepped_there(opt, p):
            if p not in _fetched(opt):
                raise KeyError(p)
            _write(opt, p, dict.clear)
            return
        super().__delitem__(p)

    def clear(self) -> None:
        dict.clear(self)
        opt = self.__dict__.get("_optimizer")
        if opt is not None and _fetched(opt):
            _load(opt, {})

    def pop(self, p, *default):
        if p not in self:
            if default:
                return default[0]
            raise KeyError(p)
        value = self[p]
        value = dict(value) if isinstance(value, ParamState) else value
        del self[p]
        return value

    def setdefault(self, p, default=None):
        if p not in self:
            self[p] = {} if default is None else default
        return self[p]

    def update(self, other=(), **kwargs) -> None:
        for p, value in dict(other, **kwargs).items():
            self[p] = value

    def _remote(self) -> dict:
        opt = self.__dict__.get("_optimizer")
        return {} if opt is None else _fetched(opt)

    def __contains__(self, p) -> bool:
        return dict.__contains__(self, p) or any(p is q for q in self._remote())

    def __iter__(self):
        yield from dict.keys(self)
        yield from self._remote()

    def __len__(self) -> int:
        return dict.__len__(self) + len(self._remote())

    def keys(self):
        return list(self)

    def items(self):
        return [(p, self[p]) for p in self]

    def values(self):
        return [self[p] for p in self]

    def get(self, p, default=None):
        if p not in self:
            return default
        return self[p]

    def __repr__(self) -> str:
        return repr({p: dict(v) for p, v in self.items()})

    def __reduce__(self):  # pickled (torch.save(opt), deepcopy) as the values it holds now
        return (defaultdict, (dict, {p: dict(v) for p, v in self.items()}))


class ParamState(MutableMapping):
    """``opt.state[p]`` of a parameter its worker steps: its state there, read when used."""

    def __init__(self, optimizer, p):
        self._optimizer, self._p = optimizer, p

    def _now(self) -> dict:
        return _fetched(self._optimizer).get(self._p, {})

    def __getitem__(self, key):
        value = self._now()[key]
        if isinstance(value, Tensor):
            return RemoteStateTensor._of(self._optimizer, self._p, key, value)
        return value

    def __setitem__(self, key, value) -> None:
        if isinstance(value, RemoteStorage):
            value = value.detach()
        _write(self._optimizer, self._p, lambda mine: mine.__setitem__(key, value))

    def __delitem__(self, key) -> None:
        if key not in self._now():
            raise KeyError(key)
        _write(self._optimizer, self._p, lambda mine: mine.pop(key))

    def __iter__(self):
        return iter(list(self._now()))

    def __len__(self) -> int:
        return len(self._now())

    def __repr__(self) -> str:
        return repr(dict(self.items()))


class RemoteStateTensor(WrittenWhole):
    """A tensor of a parameter's optimizer state in its worker's share (``exp_avg``): its
    value is the worker's at each read; an in-place change is made here on that value and
    loaded there. Like a buffer's, it requires no grad and has no ``.grad``."""

    @classmethod
    def _of(cls, optimizer, p, key: str, value: Tensor) -> RemoteStateTensor:
        t = Tensor._make(meta_array(value._data), None, 0)
        t.__class__ = cls
        t.__dict__.update(_optimizer=optimizer, _param=p, _key=key, _is_data=True,
                          _path=f"the optimizer state {key!r} of {p._path}",
                          _model=p._model)
        return t

    def _read(self) -> np.ndarray:
        value = _fetched(self._optimizer).get(self._param, {}).get(self._key)
        if value is None:
            raise KeyError(f"{self._path} is no longer there: the optimizer's state of "
                           "that parameter was loaded or deleted since it was read")
        arr = np.array(value._data)
        arr.flags.writeable = False
        return arr

    def _write(self, new: np.ndarray) -> None:
        key, value = self._key, Tensor._make(new, None, 0)
        _write(self._optimizer, self._param, lambda mine: mine.__setitem__(key, value))
