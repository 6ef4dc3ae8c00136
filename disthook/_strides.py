"""Memory layouts as torch chooses them: which strides ``clone()``, ``contiguous()`` and the
``*_like`` factories give their new tensor (``memory_format=``), and which layout
``is_contiguous(memory_format=...)`` asks about.

torch's rule for ``preserve_format`` (every one's default): a source that is dense and
non-overlapping keeps its strides exactly; any other source (expanded, sliced with steps)
gets dense strides that keep the order of its dimensions in memory. Strides here are in
elements, as ``Tensor.stride()`` gives them."""
from __future__ import annotations

import numpy as np

from disthook import _blas
from disthook._layout import contiguous_strides
from disthook._limits import channels_last, channels_last_3d, contiguous_format, memory_format

# channels_last's dimension order from the fastest: C, then the spatial dimensions, then N
_LAST_ORDER = {channels_last: (4, (1, 3, 2, 0)), channels_last_3d: (5, (1, 4, 3, 2, 0))}


def held(t) -> np.ndarray | None:
    """Tensor ``t``'s own array, read without fetching: a deployed model's parameter holds a
    stand-in there (strides 0, giving C order, as its value lies on its worker); None for
    anything else, or a tensor whose array was never set."""
    from disthook.tensor import Tensor

    if not isinstance(t, Tensor):
        return None
    try:
        return Tensor.__dict__["_data"].__get__(t)
    except AttributeError:
        return None


def element_strides(data: np.ndarray) -> tuple:
    return tuple(s // data.itemsize for s in data.strides)


def _dense(shape, strides) -> bool:
    """Non-overlapping and dense: the elements fill one block with no gap and no repeat
    (dimensions of size 0 or 1 do not count, as in torch)."""
    order = sorted((d for d in range(len(shape)) if shape[d] > 1), key=lambda d: strides[d])
    if any(n == 0 for n in shape):
        return True
    need = 1
    for d in order:
        if strides[d] != need:
            return False
        need *= shape[d]
    return True


def _inferred(shape, strides) -> tuple:
    """Dense strides keeping the memory order of ``strides``' dimensions: the fastest first,
    a tie broken by size, a zero stride leaving a dimension where it is (torch's order)."""
    ndim = len(shape)
    perm = list(range(ndim - 1, -1, -1))

    def compare(a, b):
        if strides[a] == 0 or strides[b] == 0:
            return 0
        if strides[a] != strides[b]:
            return -1 if strides[a] < strides[b] else 1
        return 1 if shape[a] > shape[b] else 0

    for i in range(1, ndim):  # an insertion sort that stops at an undecided pair
        j = i
        for k in range(i - 1, -1, -1):
            c = compare(perm[k], perm[j])
            if c > 0:
                perm[k], perm[j] = perm[j], perm[k]
                j = k
            elif c < 0:
                break
    out, step = [0] * ndim, 1
    for d in perm:
        out[d] = step
        step *= max(shape[d], 1)
    return tuple(out)


def _format_strides(shape, fmt) -> tuple | None:
    """The strides ``fmt`` (channels_last or channels_last_3d) gives ``shape``; None for a
    contiguous layout."""
    if fmt not in _LAST_ORDER:
        return None
    rank, order = _LAST_ORDER[fmt]
    if len(shape) != rank:
        name = "channels_last" if rank == 4 else "channels_last_3d"
        raise RuntimeError(f"required rank {rank} tensor to use {name} format")
    out, step = [0] * rank, 1
    for d in order:
        out[d] = step
        step *= max(shape[d], 1)
    return tuple(out)


def _strided_empty(shape, strides, dtype) -> np.ndarray:
    if strides == contiguous_strides(shape):
        return _blas.empty(shape, dtype)
    numel = int(np.prod(shape, dtype=np.int64))
    flat = _blas.empty((numel,), dtype)
    return np.ndarray(shape, dtype, buffer=flat, strides=[s * dtype.itemsize for s in strides])


def new_like(data, shape, dtype, fmt=None) -> np.ndarray:
    """A new (unfilled) array of ``shape`` and ``dtype`` laid out as torch lays out a new
    tensor made from ``data`` under memory format ``fmt`` (None: preserve_format). ``data``
    is the source's array, or None where only its shape is known (C order then)."""
    if fmt is not None and not isinstance(fmt, memory_format):
        raise TypeError(f"memory_format must be torch.memory_format, not {type(fmt).__name__}")
    dtype = np.dtype(dtype)
    shape = tuple(shape)
    last = _format_strides(shape, fmt)
    if last is not None:
        return _strided_empty(shape, last, dtype)
    if fmt == contiguous_format or data is None or (
            data.flags.c_contiguous and data.size and 1 not in shape):
        return _blas.empty(shape, dtype)
    strides = element_strides(data)
    if any(s < 0 for s in strides) or data.shape != shape:  # (torch has no negative strides: its copies are C order)
        return _blas.empty(shape, dtype)
    keep = strides if _dense(shape, strides) else _inferred(shape, strides)
    return _strided_empty(shape, keep, dtype)


def is_contiguous_as(data: np.ndarray, fmt) -> bool:
    """``is_contiguous(memory_format=fmt)`` of array ``data``."""
    if fmt not in _LAST_ORDER:
        return bool(data.flags.c_contiguous)
    return lies_as(data.shape, element_strides(data), fmt)


def lies_as(shape, strides, fmt) -> bool:
    """Whether ``strides`` (in elements) are ``fmt``'s order for ``shape``: C order, or
    channels_last's for a tensor of its rank (False for any other rank); dimensions of size 1
    do not count."""
    if fmt not in _LAST_ORDER:
        return 0 in shape or all(
            a == b for a, b, n in zip(strides, contiguous_strides(shape), shape) if n != 1)
    rank, order = _LAST_ORDER[fmt]
    if len(shape) != rank:
        return False
    need = 1
    for d in order:
        if shape[d] != 1:
            if strides[d] != need:
                return False
            need *= shape[d]
    return True


def exactly(data: np.ndarray, fmt) -> bool:
    """Whether ``data`` has the very strides a new tensor in format ``fmt`` gets (size-1
    dimensions included)."""
    shape = data.shape
    return element_strides(data) == (_format_strides(shape, fmt) or contiguous_strides(shape))


def suggested(data: np.ndarray):
    """The memory format ``data``'s strides look like (torch's ``suggest_memory_format``):
    channels_last (or _3d) where the channel dimension is the fastest and the rest follow in
    that format's order, an ambiguous case counting as C order; else contiguous_format."""
    for fmt, (rank, order) in _LAST_ORDER.items():
        if data.ndim == rank and _strides_like(data.shape, element_strides(data), order):
            return fmt
    return contiguous_format


def _strides_like(shape, strides, order) -> bool:
    least = 0
    if strides[1] == 0:
        return False
    for d in order:
        if shape[d] == 0 or strides[d] < least or d == 0 and least == strides[1]:
            return False
        least = strides[d] * max(shape[d], 1)
    return True


def relaid(source, array: np.ndarray, fmt=None) -> np.ndarray:
    """``array`` (new, C order, shaped as ``source``) moved into the layout torch gives a
    ``*_like`` of tensor ``source`` under ``fmt`` (``rand_like``'s values, drawn in C order)."""
    data = held(source)
    if (fmt is None or fmt is contiguous_format) and (
            data is None or data.flags.c_contiguous and data.size):
        return array
    out = new_like(data, array.shape, array.dtype, fmt)
    np.copyto(out, array)
    return out
