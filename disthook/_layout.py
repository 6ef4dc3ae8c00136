"""``torch.layout``: how a tensor's elements are laid out. disthook tensors are dense and
strided; the other layouts exist as names so programs can compare against them."""
from __future__ import annotations

import numpy as np


class layout:
    """A tensor layout, printed as torch prints it (``torch.strided``)."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"torch.{self.name}"

    def __reduce__(self):
        return (_by_name, (self.name,))


def _by_name(name: str) -> layout:
    return LAYOUTS[name]


LAYOUTS = {name: layout(name) for name in (
    "strided", "sparse_coo", "sparse_csr", "sparse_csc", "sparse_bsr", "sparse_bsc", "_mkldnn",
    "jagged")}
strided = LAYOUTS["strided"]


def contiguous_strides(shape) -> tuple:
    """torch's strides (in elements) of a contiguous tensor of ``shape``: each the product of
    the later sizes, a size 0 counting as 1 (``empty(0, 3)`` has ``(3, 1)``)."""
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def empty_laid_out(array: np.ndarray) -> np.ndarray:
    """``array``, an empty one with torch's contiguous strides where numpy gave it none (numpy
    makes every stride of a new empty array 0): numpy's views of it (a permute, a select, a
    slice) then carry the strides torch's views of it have."""
    if array.size or not array.ndim or any(array.strides):
        return array
    return restrided(array, contiguous_strides(array.shape))


def restrided(array: np.ndarray, strides: tuple) -> np.ndarray:
    """A view of ``array``'s memory with its shape and ``strides`` (in elements), whose numpy
    base is the memory's outermost array, as any other view's (in-place ops on views and
    torch.save find the memory they share through it)."""
    root = array
    while isinstance(root.base, np.ndarray):
        root = root.base
    item = array.itemsize
    strides = tuple(s * item for s in strides)
    offset = array.__array_interface__["data"][0] - root.__array_interface__["data"][0]
    if not root.flags.c_contiguous or not 0 <= offset <= root.nbytes or (
            not array.size and offset):  # (an empty view past its memory's end, as torch's)
        return np.lib.stride_tricks.as_strided(array, strides=strides)
    out = np.ndarray(array.shape, array.dtype, buffer=root, offset=offset, strides=strides)
    if not array.flags.writeable:
        out.flags.writeable = False
    return out
