"""``torch.utils.data._utils.collate``: ``default_collate`` and ``default_convert``, and
``collate`` with a ``collate_fn_map`` ({type: fn(batch, *, collate_fn_map)}), the hook torch
offers for batching a type of one's own; the map's entries are tried first, by ``isinstance``,
and containers are walked as ``default_collate`` walks them."""
from __future__ import annotations

import numpy as np

from disthook.tensor import Tensor
from disthook.utils.data.collate import collate_container, default_collate, default_convert

__all__ = ["collate", "collate_float_fn", "collate_int_fn", "collate_numpy_array_fn",
           "collate_numpy_scalar_fn", "collate_str_fn", "collate_tensor_fn", "default_collate",
           "default_collate_fn_map", "default_convert"]


def collate(batch, *, collate_fn_map: dict | None = None):
    """One batch from ``batch`` (a list of samples), ``collate_fn_map`` deciding the leaves."""
    elem = batch[0]
    for kind, fn in (collate_fn_map or {}).items():
        if isinstance(elem, kind):
            return fn(batch, collate_fn_map=collate_fn_map)
    return collate_container(batch, lambda part: collate(part, collate_fn_map=collate_fn_map))


def _leaf(batch, *, collate_fn_map=None):
    """A batch of one kind of leaf, batched as ``default_collate`` batches it."""
    return default_collate(batch)


collate_tensor_fn = collate_numpy_array_fn = collate_numpy_scalar_fn = _leaf
collate_float_fn = collate_int_fn = collate_str_fn = _leaf

default_collate_fn_map: dict = {
    Tensor: collate_tensor_fn,
    np.ndarray: collate_numpy_array_fn,
    (np.bool_, np.number, np.object_): collate_numpy_scalar_fn,
    float: collate_float_fn,
    int: collate_int_fn,
    (str, bytes): collate_str_fn,
}
