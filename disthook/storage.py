"""``torch.UntypedStorage`` / ``torch.TypedStorage``: the memory a tensor views, as torch
exposes it (its address, its size, its elements). A storage here wraps the flat numpy array
at the root of a tensor's views; it answers questions about that memory and reads it, so
that programs checking whether two tensors share memory (``a.untyped_storage().data_ptr()
== b.untyped_storage().data_ptr()``) or how large a storage is work as in torch."""
from __future__ import annotations

import numpy as np


class UntypedStorage:
    """The bytes under a tensor."""

    def __init__(self, root: np.ndarray):
        self._root = root

    def data_ptr(self) -> int:
        return self._root.__array_interface__["data"][0]

    def nbytes(self) -> int:
        return self._root.nbytes

    def size(self) -> int:
        return self._root.nbytes

    def __len__(self) -> int:
        return self._root.nbytes

    def element_size(self) -> int:
        return 1

    @property
    def device(self):
        from disthook.tensor import device

        return device("cpu")

    def is_shared(self) -> bool:
        return False

    def share_memory_(self) -> UntypedStorage:
        return self

    def cpu(self) -> UntypedStorage:
        return self

    def tolist(self) -> list:
        return list(self._bytes())

    def _bytes(self) -> np.ndarray:
        return self._root.reshape(-1).view(np.uint8)

    def __getitem__(self, i):
        return int(self._bytes()[i])

    def __eq__(self, other) -> bool:
        return isinstance(other, UntypedStorage) and self.data_ptr() == other.data_ptr()

    def __hash__(self) -> int:
        return self.data_ptr()

    def __repr__(self) -> str:
        return f"[torch.storage.UntypedStorage(device=cpu) of size {len(self)}]"


class TypedStorage(UntypedStorage):
    """The elements under a tensor, of its dtype."""

    @property
    def dtype(self):
        from disthook import _dtype

        return _dtype.from_numpy_dtype(self._root.dtype)

    def size(self) -> int:
        return self._root.size

    __len__ = size

    def element_size(self) -> int:
        return self._root.itemsize

    def untyped(self) -> UntypedStorage:
        return UntypedStorage(self._root)

    def tolist(self) -> list:
        return self._root.reshape(-1).tolist()

    def __getitem__(self, i):
        return self._root.reshape(-1)[i].item()

    def __repr__(self) -> str:
        body = "\n".join(f" {v}" for v in self.tolist())
        return f"{body}\n[torch.storage.TypedStorage(dtype={self.dtype}, device=cpu) of size " \
               f"{self.size()}]"
