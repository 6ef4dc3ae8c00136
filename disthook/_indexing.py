"""What ``x[index]`` and ``x[index] = v`` accept, read as torch reads it: the index turned into
numpy's terms (a uint8 tensor is a mask, a list holding tensors, lists, slices, ``None`` or
``...`` is a tuple), then checked against the tensor with torch's error types and words, so
numpy never answers in its own (or, worse, computes something else)."""
from __future__ import annotations

import importlib
import warnings

import numpy as np

# the module, not the ``disthook.tensor`` factory that shadows it on the package
_tensor = importlib.import_module("disthook.tensor")

_INDEX_DTYPES = (np.int64, np.int32, np.bool_)
_AS_TUPLE_MAX = 32  # torch reads longer lists as one index, whatever they hold


def index_arg(item):
    """The index as numpy takes it; IndexError, worded as torch's, for index types torch
    refuses."""
    if isinstance(item, list) and _sequence_as_tuple(item):
        warnings.warn("Using a non-tuple sequence for multidimensional indexing is "
                      "deprecated; use x[tuple(seq)] instead of x[seq] (torch reads the list "
                      "as that tuple)", UserWarning, stacklevel=3)
        item = tuple(item)
    if isinstance(item, tuple):
        return tuple(_one_index(i) for i in item)
    return _one_index(item)


def check_number_fill(item) -> None:
    """``x[item] = v`` with one value (a number, a one-element tensor) is torch's masked_fill_
    when ``item`` holds a mask, and that one takes no uint8 mask: RuntimeError, as torch's."""
    items = item if isinstance(item, tuple) else (item,)
    if any(isinstance(i, _tensor.Tensor) and i._data.dtype == np.uint8 for i in items):
        raise RuntimeError("masked_fill_ only supports boolean masks, but got mask with dtype "
                           "unsigned char")


def _sequence_as_tuple(seq: list) -> bool:
    return len(seq) < _AS_TUPLE_MAX and any(
        isinstance(i, (_tensor.Tensor, list, tuple, slice)) or i is None or i is Ellipsis
        for i in seq)


def _one_index(item):
    if isinstance(item, _tensor.Tensor):
        data = item._data
        if data.dtype == np.uint8:
            warnings.warn("indexing with dtype torch.uint8 is now deprecated, please use a "
                          "dtype torch.bool instead.", UserWarning, stacklevel=4)
            return data.astype(np.bool_)
        if data.dtype.type not in _INDEX_DTYPES:
            raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
        return data
    if isinstance(item, list):
        return _one_index(np.asarray([i._data if isinstance(i, _tensor.Tensor) else i
                                      for i in item]))
    if isinstance(item, slice) and item.step is not None and item.step <= 0:
        # numpy would walk backwards
        raise ValueError("slice step cannot be zero" if item.step == 0 else
                         "step must be greater than zero")
    if isinstance(item, (str, bytes)) or isinstance(item, np.ndarray) and item.dtype.kind in "SU":
        # torch makes a tensor of it: a TypeError naming the type (numpy's: IndexError)
        raise TypeError(f"new(): invalid data type '{_type_name(item)}'")
    if not (item is None or item is Ellipsis or isinstance(item, (slice, np.ndarray))
            or hasattr(type(item), "__index__")):  # a float, complex, dict, object ...
        raise IndexError("only integers, slices (`:`), ellipsis (`...`), None and long or "
                         f"byte Variables are valid indices (got {_type_name(item)})")
    return item


def _type_name(item) -> str:
    kind = str if isinstance(item, np.ndarray) else type(item)  # (an array of strings)
    return kind.__name__ if kind.__module__ == "builtins" else (
        f"{kind.__module__}.{kind.__name__}")


def _dims_taken(i) -> int:
    """How many of the tensor's dims an index item reads."""
    if i is None or i is Ellipsis or isinstance(i, (bool, np.bool_)):
        return 0
    if isinstance(i, np.ndarray) and i.dtype == np.bool_:
        return i.ndim
    return 1


def check_index(shape: tuple, index):
    """The index (as ``index_arg`` gives it) for numpy, after IndexError, worded as torch's,
    where it does not fit a tensor of ``shape``: too many indices, an integer out of range, a
    mask whose shape is not that of the dims it covers. (An index array out of range is
    numpy's to find, as it indexes; ``numpy_words`` puts its error in torch's words.)"""
    items = index if isinstance(index, tuple) else (index,)
    ndim = len(shape)
    if len(items) > 1 and [i is Ellipsis for i in items].count(True) > 1:
        index = items = _one_ellipsis(items, ndim)
    if ndim == 0:
        for i in items:
            if isinstance(i, slice):
                raise IndexError("slice() cannot be applied to a 0-dim tensor.")
            if isinstance(i, (int, np.integer)) and not isinstance(i, (bool, np.bool_)):
                raise IndexError("invalid index of a 0-dim tensor. Use `tensor.item()` in "
                                 "Python or `tensor.item<T>()` in C++ to convert a 0-dim "
                                 "tensor to a number")
    taken, masked = 0, False
    for i in items:
        taken += _dims_taken(i)
        masked = masked or isinstance(i, np.ndarray) and i.dtype == np.bool_
    if taken > ndim:
        raise IndexError(f"too many indices for tensor of dimension {ndim}")
    dim = 0  # the dim of ``shape`` the next item reads
    view = list(shape)  # the tensor as torch sees it when it reaches a mask
    at = 0  # the next item's dim in ``view``
    for i in items:
        if i is Ellipsis:
            dim += ndim - taken
            at += ndim - taken
        elif i is None:
            view.insert(at, 1)
            at += 1
        elif isinstance(i, (bool, np.bool_)):
            view.insert(at, int(i))
            at += 1
        elif isinstance(i, np.ndarray) and i.dtype == np.bool_:
            _check_mask(i, view, at)
            dim += i.ndim
            at += i.ndim
        elif isinstance(i, (int, np.integer)):
            if not -shape[dim] <= i < shape[dim]:
                _out_of_bounds(i, dim, shape[dim])
            del view[at]
            dim += 1
        elif isinstance(i, np.ndarray):  # numpy checks its bounds (see numpy_words)
            at += 1
            dim += 1
        else:  # a slice
            if masked and isinstance(i, slice):  # the size a later mask is told of
                view[at] = len(range(*i.indices(view[at])))
            dim += 1
            at += 1
    return index


def _one_ellipsis(items: tuple, ndim: int) -> tuple:
    """torch reads each ellipsis after the first as one more jump over the dims the first
    skipped: where that jump is 0 (the other items read every dim) or nothing follows the
    second ellipsis, the index is the one with its first ellipsis alone; otherwise torch
    reads what follows past the last dim (an error, or a slice it drops): refused."""
    taken = sum(_dims_taken(i) for i in items)
    first, second = [k for k, i in enumerate(items) if i is Ellipsis][:2]
    if taken < ndim and any(i is not Ellipsis for i in items[second:]):
        raise IndexError(
            "an index with two ellipses ('...') and an index after the second: torch applies "
            "that index past the tensor's last dimension (an error, or a slice it ignores); "
            "write the index with one ellipsis")
    return items[:first + 1] + tuple(i for i in items[first + 1:] if i is not Ellipsis)


def _check_mask(mask: np.ndarray, view: list, at: int) -> None:
    for j, (m, n) in enumerate(zip(mask.shape, view[at:])):
        if m != n:
            raise IndexError(f"The shape of the mask {list(mask.shape)} at index {j} does not "
                             f"match the shape of the indexed tensor {view} at index {at + j}")


def numpy_words(error: IndexError) -> IndexError:
    """numpy's IndexError for an index array out of range, in torch's words."""
    return IndexError(str(error).replace(" axis ", " dimension "))


def _out_of_bounds(index, dim: int, size: int):
    raise IndexError(f"index {index} is out of bounds for dimension {dim} with size {size}")
