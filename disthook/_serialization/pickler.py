"""Pickles objects in torch's layout, so that real ``torch.load`` reads what we save.

A tensor becomes ``torch._utils._rebuild_tensor_v2(storage, offset, size, stride, ...)`` over
a storage saved once as a raw record; tensors that view one numpy buffer (a state dict's
tensors and the model's parameters, ``w`` and ``w[1]``, ``w.t()``) keep one storage, as
torch keeps them. disthook's classes, functions and dtypes are written under the names torch
knows them by (``names.torch_name``); everything else is pickled as Python pickles it.
"""
from __future__ import annotations

import pickle
from collections import OrderedDict
from typing import ClassVar

import numpy as np

from disthook._layout import contiguous_strides
from disthook._serialization import names, rebuild

_STORAGE_OF = {"float32": "FloatStorage", "float64": "DoubleStorage", "float16": "HalfStorage",
               "int64": "LongStorage", "int32": "IntStorage", "int16": "ShortStorage",
               "int8": "CharStorage", "uint8": "ByteStorage", "bool": "BoolStorage",
               "complex64": "ComplexFloatStorage", "complex128": "ComplexDoubleStorage",
               "bfloat16": "BFloat16Storage"}  # (numpy names ml_dtypes' bfloat16 so)


class _StorageRef:
    __slots__ = ("array", "key")

    def __init__(self, key: str, array: np.ndarray) -> None:
        self.key, self.array = key, array


class _TensorOf:
    """The plain tensor inside a Parameter, as ``_rebuild_parameter`` takes it."""

    __slots__ = ("tensor",)

    def __init__(self, tensor) -> None:
        self.tensor = tensor


def _root(array: np.ndarray) -> np.ndarray:
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array


def _address(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


def _user_attributes(t) -> dict:
    """The attributes a user set on a tensor (``t.tag = ...``); disthook's own are private."""
    return {k: v for k, v in t.__dict__.items() if not k.startswith("_")}


class TorchPickler(pickle._Pickler):
    """Python's pickler with tensors as storages and disthook's names as torch's."""

    dispatch: ClassVar[dict] = dict(pickle._Pickler.dispatch)

    def __init__(self, file, protocol: int = 2) -> None:
        super().__init__(file, protocol)
        self.storages: dict = {}  # id(root buffer) -> _StorageRef
        self.records: list = []  # (key, contiguous array) in key order

    # ---- storages ---------------------------------------------------------------------------
    def _storage(self, array: np.ndarray) -> tuple:
        """(storage, offset, stride) for ``array``: a view of a buffer already saved when it
        is one, else a buffer of its own."""
        root = _root(array)
        item = array.itemsize
        shared = (root.dtype == array.dtype and root.flags.c_contiguous
                  and all(s >= 0 and s % item == 0 for s in array.strides))
        if shared:
            offset, rem = divmod(_address(array) - _address(root), item)
            shared = rem == 0 and 0 <= offset <= root.size
        if not shared:
            root = np.ascontiguousarray(array).reshape(array.shape)  # (a 0-d stays 0-d)
            offset = 0
            stride = contiguous_strides(root.shape)
            if root.ndim == 0:
                root = root.reshape(1)
            return self._ref(root), offset, stride
        stride = tuple(s // item for s in array.strides)
        return self._ref(root), offset, stride

    def _ref(self, root: np.ndarray) -> _StorageRef:
        ref = self.storages.get(id(root))
        if ref is None:
            if root.dtype.name not in _STORAGE_OF:
                raise TypeError(f"torch.save cannot store a tensor of numpy dtype {root.dtype}")
            ref = self.storages[id(root)] = _StorageRef(str(len(self.records)), root)
            self.records.append((ref.key, root.reshape(-1)))
        return ref

    def persistent_id(self, obj):
        if type(obj) is _StorageRef:
            kind = names.STORAGE_TYPES[_STORAGE_OF[obj.array.dtype.name]]
            return ("storage", kind, obj.key, "cpu", int(obj.array.size))
        return None

    # ---- objects ----------------------------------------------------------------------------
    def _tensor_args(self, t) -> tuple:
        array = np.asarray(t._data)
        if array.dtype.byteorder == ">":
            array = array.astype(array.dtype.newbyteorder("="))
        ref, offset, stride = self._storage(array)
        return (ref, offset, tuple(array.shape), stride, bool(t._requires_grad), OrderedDict())

    def reducer_override(self, obj):
        from disthook.nn.parameter import Parameter
        from disthook.tensor import Size, Tensor, device

        kind = type(obj)
        if kind in (int, str, float, bool, type(None), tuple, list, dict, bytes):
            return NotImplemented
        if kind is _TensorOf:
            t = obj.tensor
            return (rebuild._rebuild_tensor_v2, self._tensor_args(t)[:4] + (False, OrderedDict()))
        if isinstance(obj, Parameter):
            args = (_TensorOf(obj), bool(obj._requires_grad), OrderedDict())
            state = _user_attributes(obj)
            if state:
                return (rebuild._rebuild_parameter_with_state, (*args, state))
            return (rebuild._rebuild_parameter, args)
        if isinstance(obj, Tensor):
            state = _user_attributes(obj)
            if state:  # attributes the user set on the tensor travel with it, as in torch
                return (rebuild._rebuild_from_type_v2,
                        (rebuild._rebuild_tensor_v2, Tensor, self._tensor_args(obj), state))
            return (rebuild._rebuild_tensor_v2, self._tensor_args(obj))
        if kind is Size:
            return (Size, (tuple(obj),))
        if kind is device:
            return (device, (obj.type,) if obj.index is None else (obj.type, obj.index))
        if kind is not OrderedDict and names.torch_name(obj) is not None:
            return "torch-name"  # written by save_global below
        return NotImplemented

    def save_global(self, obj, name=None):
        found = names.torch_name(obj)
        if found is None:
            return super().save_global(obj, name)
        module, qualname = found
        self.write(pickle.GLOBAL + f"{module}\n{qualname}\n".encode())
        self.memoize(obj)

    dispatch[type(save_global)] = save_global  # functions, as Python's pickler dispatches them
