"""In-place changes of a view of a deployed tensor (``p[i] += v``, ``p[:, j].zero_()``,
``p.data[0].copy_(t)``): in one process a basic index of a tensor is a view sharing its
memory, so changing the view in place changes the tensor. Here the view holds a read-only
copy of the value read from the worker; its in-place change is made on the tensor's value at
that index as it is now (read again: it may have changed since the view was taken) and
carried to the worker as ``p[i] = new value`` (``RemoteStorage.__setitem__``). An advanced index
(``p[[0, 2]]``) is a copy in one process too, and stays one."""
from __future__ import annotations

import functools

import numpy as np

from disthook.autograd import grad_mode
from disthook.tensor import VIEW_OF_LEAF_INPLACE_MSG, Tensor

__all__ = ["viewed"]


def viewed(storage, index, view: Tensor) -> Tensor:
    """``view`` (``storage[index]``), its in-place changes written through to the worker
    when it is a view of the value read (basic indexing: read-only memory)."""
    if not view._data.flags.writeable:
        view._write_through = functools.partial(_write_through, storage, index)
    return view


def _write_through(storage, index, view: Tensor, ufunc, values: np.ndarray) -> None:
    """``view = ufunc(view, values)`` (or ``view = values``) as ``disthook.tensor``'s
    in-place writes do, carried out on ``storage``'s worker at ``index``."""
    if (storage.requires_grad and not storage.__dict__.get("_is_data")
            and grad_mode.is_grad_enabled()):
        raise RuntimeError(VIEW_OF_LEAF_INPLACE_MSG)
    new = np.array(storage._data[index])  # the value now, which a view reads in one process
    if ufunc is None:
        np.copyto(new, values, casting="unsafe")
    else:
        ufunc(new, values, out=new, casting="unsafe")
    storage[index] = Tensor._make(new, None, 0)
    new.flags.writeable = False  # a later change of the view goes through again
    view._data = new  # it shows the new value, as a view does
    view._vc[0] += 1
