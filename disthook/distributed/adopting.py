"""The model's own tensors made remote in place, and back: ``adopt`` and ``adopt_buffer``
turn a parameter or buffer into a ``RemoteParameter`` or ``RemoteBuffer`` (the same object,
its array here a ``meta_array``), ``release`` makes it a plain local tensor again holding
the worker's value, and ``retype`` follows a dtype change made on its worker. The classes
themselves are in ``parameters``.
"""
from __future__ import annotations

import numpy as np

from disthook.distributed.parameters import (
    _SLOT_DATA,
    _SLOT_REQUIRES_GRAD,
    RemoteAccumulateGrad,
    RemoteBuffer,
    RemoteParameter,
    RemoteStorage,
    meta_array,
)
from disthook.nn.parameter import Parameter
from disthook.tensor import Tensor

__all__ = ["adopt", "adopt_buffer", "release", "retype"]


def adopt(param: Parameter, model, path: str) -> RemoteParameter:
    """Make the model's own ``param`` a ``RemoteParameter`` in place (the same object: every
    reference a program holds, an optimizer's too, now reaches the worker's parameter);
    its array here gives way to a ``meta_array``."""
    if isinstance(param, RemoteStorage):
        raise ValueError(f"{path!r} is a parameter of another deployed model already")
    _SLOT_DATA.__set__(param, meta_array(_SLOT_DATA.__get__(param)))
    param.__class__ = RemoteParameter
    param.__dict__.update(_model=model, _path=path, _is_data=False,
                          _accumulator=RemoteAccumulateGrad(param))
    model.__dict__.setdefault("_param_proxies", {})[(path, False)] = param
    return param


def adopt_buffer(buf: Tensor, model, path: str) -> RemoteBuffer:
    """Make the model's own buffer ``buf`` a ``RemoteBuffer`` in place (the same object)."""
    if isinstance(buf, RemoteStorage) or type(buf) is not Tensor:
        raise ValueError(f"the buffer {path!r} is a {type(buf).__name__}, not a plain Tensor "
                         "(or it belongs to another deployed model already)")
    _SLOT_DATA.__set__(buf, meta_array(_SLOT_DATA.__get__(buf)))
    buf.__class__ = RemoteBuffer
    buf.__dict__.update(_model=model, _path=path, _is_data=False)
    return buf


def release(t: RemoteStorage, value: np.ndarray) -> Tensor:
    """Undo ``adopt``/``adopt_buffer``: ``t`` is a plain local tensor again (a parameter
    stays a ``Parameter``; a ``.data`` is a ``Tensor``), holding ``value``."""
    parameter = isinstance(t, RemoteParameter) and not t.__dict__.get("_is_data")
    requires_grad = _SLOT_REQUIRES_GRAD.__get__(t) if parameter else False
    t.__class__ = Parameter if parameter else Tensor
    for name in ("_model", "_path", "_is_data", "_accumulator", "_main", "_grad"):
        t.__dict__.pop(name, None)
    _SLOT_DATA.__set__(t, np.array(value))
    _SLOT_REQUIRES_GRAD.__set__(t, requires_grad)
    return t


def retype(t: RemoteStorage, dtype: np.dtype) -> None:
    """``t``'s worker converted it to ``dtype`` (``module.to(dtype)``): what it is here says
    so, its ``.data`` view too."""
    new = np.broadcast_to(np.zeros((), dtype), _SLOT_DATA.__get__(t).shape)
    _SLOT_DATA.__set__(t, new)
    views = t._model.__dict__.get("_param_proxies", {})
    view = views.get((t._path, True))
    if view is not None:
        _SLOT_DATA.__set__(view, new)
