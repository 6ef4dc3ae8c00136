"""``default_collate``: a list of samples into one batch, structure kept.

Tensors are stacked (a new first dimension), numpy arrays and numbers become tensors,
strings stay a list, and mappings, named tuples and sequences are collated field by field.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

__all__ = ["default_collate", "default_convert"]

FORMAT_MSG = ("default_collate: batch must contain tensors, numpy arrays, numbers, dicts or "
              "lists; found {}")


def _is_namedtuple(x) -> bool:
    return isinstance(x, tuple) and hasattr(x, "_fields")


def default_collate(batch):
    """One batch from the samples in ``batch`` (a list)."""
    from disthook.tensor import Tensor, from_numpy, stack, tensor

    elem = batch[0]
    if isinstance(elem, Tensor):
        return stack(list(batch), 0)
    if isinstance(elem, np.ndarray) and elem.dtype.kind not in "USO":
        return stack([from_numpy(np.asarray(b)) for b in batch], 0)
    if isinstance(elem, np.generic) and elem.dtype.kind not in "USO":
        return tensor(np.array(batch))
    if isinstance(elem, np.ndarray):
        raise TypeError(FORMAT_MSG.format(elem.dtype))
    if isinstance(elem, bool):
        return tensor(batch)
    if isinstance(elem, float):
        return tensor(batch, dtype=_float64())
    if isinstance(elem, int):
        return tensor(batch)
    if isinstance(elem, (str, bytes)):
        return batch
    return collate_container(batch, default_collate)


def collate_container(batch, collate_part):
    """A batch of mappings, named tuples or sequences, each field batched by
    ``collate_part(list of that field's values)``; torch's TypeError for anything else."""
    elem = batch[0]
    if isinstance(elem, Mapping):
        collated = {key: collate_part([d[key] for d in batch]) for key in elem}
        try:
            return type(elem)(collated)
        except TypeError:
            return collated
    if _is_namedtuple(elem):
        return type(elem)(*(collate_part(list(samples)) for samples in zip(*batch)))
    if isinstance(elem, Sequence) and not isinstance(elem, (str, bytes)):
        size = len(elem)
        if any(len(b) != size for b in batch):
            raise RuntimeError("each element in list of batch should be of equal size")
        transposed = [collate_part(list(samples)) for samples in zip(*batch)]
        if isinstance(elem, tuple):
            return transposed
        try:
            return type(elem)(transposed)
        except TypeError:
            return transposed
    raise TypeError(FORMAT_MSG.format(type(elem)))


def default_convert(data):
    """Numpy arrays (at any depth) to tensors; used when batching is off."""
    from disthook.tensor import from_numpy, tensor

    if isinstance(data, np.ndarray) and data.dtype.kind not in "USO":
        return from_numpy(data)
    if isinstance(data, np.generic) and data.dtype.kind not in "USO":
        return tensor(data)
    if isinstance(data, Mapping):
        try:
            return type(data)({k: default_convert(v) for k, v in data.items()})
        except TypeError:
            return {k: default_convert(v) for k, v in data.items()}
    if _is_namedtuple(data):
        return type(data)(*(default_convert(d) for d in data))
    if isinstance(data, tuple):
        return [default_convert(d) for d in data]
    if isinstance(data, Sequence) and not isinstance(data, (str, bytes)):
        try:
            return type(data)([default_convert(d) for d in data])
        except TypeError:
            return [default_convert(d) for d in data]
    return data


def _float64():
    from disthook import _dtype

    return _dtype.float64
