"""The functions a torch pickle calls to rebuild tensors, on disthook's tensors.

A file names them by torch's names (``torch._utils._rebuild_tensor_v2`` ...); ``names`` maps
those names here. Each checks what the file declares against the storage it names before
making anything: a tensor is a numpy view of its storage (so tensors saved as views of one
storage stay views of one array), and a view that reaches past its storage is refused.
"""
from __future__ import annotations

from collections import OrderedDict

import numpy as np

MAX_DIMS = 64
_MAX_BYTES = 2**63 - 1  # what numpy lets an array's dimensions multiply to, in bytes


def too_large(size, itemsize: int) -> str | None:
    """Why an array of ``size`` cannot be made here, or None. An empty tensor's other
    dimensions may be any size in torch (``torch.empty(0, 2**62)`` saves and loads), but
    numpy refuses dimensions whose product (zeros left out) passes 2**63 - 1 bytes: a file
    holding one made numpy's bare ``ValueError``, or 'the pickle is malformed'."""
    total = itemsize
    for n in size:
        total *= n or 1
    if total <= _MAX_BYTES:
        return None
    return (f"its dimensions {list(size)} multiply (zeros left out) to more than "
            f"2**63 - 1 bytes of {itemsize}-byte elements, past what an array here may "
            "declare: torch holds such an empty tensor, disthook cannot")


class CheckpointError(RuntimeError):
    """The file declares something it does not hold, or that disthook cannot hold."""


class StorageType:
    """What a storage's class in a torch pickle (``torch.FloatStorage``) stands for."""

    __slots__ = ("dtype", "name")

    def __init__(self, name: str, dtype: str | None) -> None:
        self.name = name  # torch's class name
        self.dtype = dtype  # numpy dtype name of its elements; None: held nowhere here

    def __repr__(self) -> str:
        return f"torch.{self.name}"


class Storage:
    """A storage read from a file: a flat numpy array, shared by every tensor viewing it."""

    __slots__ = ("array", "key")

    def __init__(self, array: np.ndarray, key: str) -> None:
        self.array = array
        self.key = key

    # what a ``map_location`` callable may call on it (``lambda storage, loc: storage.cpu()``)
    def cpu(self) -> Storage:
        return self

    def cuda(self, *args, **kwargs):
        raise no_cuda()

    def nbytes(self) -> int:
        return self.array.nbytes

    def size(self) -> int:
        return self.array.size

    def __len__(self) -> int:
        return self.array.size


def no_cuda() -> RuntimeError:
    """torch's error for a storage sent to a GPU in a process that has none."""
    return RuntimeError("Attempting to deserialize object on a CUDA device but "
                        "torch.cuda.is_available() is False. If you are running on a "
                        "CPU-only machine, please use torch.load with "
                        "map_location=torch.device('cpu') to map your storages to the CPU.")


def _ints(value, what: str) -> tuple:
    if isinstance(value, (tuple, list)) and all(type(v) is int for v in value):
        return tuple(value)
    raise CheckpointError(f"a tensor's {what} is {value!r}, not a tuple of ints")


def view(storage, offset, size, stride, dtype: np.dtype | None = None) -> np.ndarray:
    """The numpy view that ``(offset, size, stride)`` declares on ``storage``, after checking
    that it lies inside it (nothing is allocated)."""
    if not isinstance(storage, Storage):
        raise CheckpointError(f"a tensor's storage is {type(storage).__name__}, not a storage "
                              "record of the file")
    size, stride = _ints(size, "size"), _ints(stride, "stride")
    if len(size) != len(stride) or len(size) > MAX_DIMS:
        raise CheckpointError(f"a tensor has size {size} and stride {stride}: they must have "
                              f"the same length, at most {MAX_DIMS}")
    if type(offset) is not int or offset < 0 or any(s < 0 for s in size + stride):
        raise CheckpointError(f"a tensor has offset {offset!r}, size {size}, stride {stride}: "
                              "they must not be negative")
    array = storage.array
    if dtype is not None and dtype != array.dtype:  # an untyped (byte) storage seen as dtype
        if array.dtype != np.uint8:
            raise CheckpointError(f"a {dtype} tensor over a {array.dtype} storage")
        usable = array.size - array.size % dtype.itemsize
        array = array[:usable].view(dtype)
    if 0 not in size:
        last = offset + sum((n - 1) * s for n, s in zip(size, stride))
        if last >= array.size:
            raise CheckpointError(
                f"a tensor of size {list(size)} (stride {list(stride)}, offset {offset}) "
                f"reaches element {last} of storage {storage.key!r}, which holds "
                f"{array.size}: the file declares more than it holds")
    elif offset > array.size:
        raise CheckpointError(f"an empty tensor starts at {offset}, past the end of storage "
                              f"{storage.key!r} ({array.size} elements)")
    why = too_large(size, array.itemsize)
    if why is not None:
        raise CheckpointError(f"a tensor of storage {storage.key!r} cannot be loaded: {why}")
    # a view whose base is the storage itself, so that the tensor's storage_offset() and
    # untyped_storage() are the storage's, as torch.load gives them
    item = array.itemsize
    return np.ndarray(size, array.dtype, buffer=array, offset=offset * item,
                      strides=tuple(s * item for s in stride))


def _tensor(data: np.ndarray, requires_grad) -> object:
    from disthook.tensor import Tensor

    if type(requires_grad) is not bool:
        raise CheckpointError(f"a tensor's requires_grad is {requires_grad!r}, not a bool")
    t = Tensor._make(data, None, 0)
    t._requires_grad = requires_grad
    return t


def _no_hooks(backward_hooks) -> None:
    if backward_hooks is not None and len(backward_hooks):
        raise CheckpointError("a tensor was saved with backward hooks; disthook.load does not "
                              "restore hooks (they are code): remove them before saving")


# ---- torch._utils' rebuild functions, by their torch names -----------------------------------

def _rebuild_tensor(storage, storage_offset, size, stride):
    return _tensor(view(storage, storage_offset, size, stride), False)


def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks,
                       metadata=None):
    _no_hooks(backward_hooks)
    return _tensor(view(storage, storage_offset, size, stride), requires_grad)


def _rebuild_tensor_v3(storage, storage_offset, size, stride, requires_grad, backward_hooks,
                       dtype, metadata=None):
    from disthook import _dtype

    _no_hooks(backward_hooks)
    if not isinstance(dtype, _dtype.dtype):
        raise CheckpointError(f"a tensor's dtype is {dtype!r}")
    return _tensor(view(storage, storage_offset, size, stride, dtype.np), requires_grad)


def _rebuild_parameter(data, requires_grad, backward_hooks):
    from disthook.nn.parameter import Parameter
    from disthook.tensor import Tensor

    _no_hooks(backward_hooks)
    if not isinstance(data, Tensor) or type(requires_grad) is not bool:
        raise CheckpointError("a Parameter is rebuilt from a tensor and a bool")
    return Parameter(data, requires_grad)


def set_state(obj, state, what: str) -> None:
    """Python attributes saved with a tensor or Parameter; only public names are set."""
    if state is None:
        return
    if isinstance(state, tuple) and len(state) == 2:  # (dict state, slots state)
        state = {**(state[0] or {}), **(state[1] or {})}
    if not isinstance(state, dict):
        raise CheckpointError(f"a {what}'s saved attributes are {type(state).__name__}")
    for name, value in state.items():
        if not isinstance(name, str) or name.startswith("_") or hasattr(type(obj), name):
            raise CheckpointError(f"a {what} was saved with attribute {name!r}; disthook.load "
                                  "sets only public attributes of the user's own on tensors")
        setattr(obj, name, value)


def _rebuild_parameter_with_state(data, requires_grad, backward_hooks, state):
    param = _rebuild_parameter(data, requires_grad, backward_hooks)
    set_state(param, state, "Parameter")
    return param


def _rebuild_from_type_v2(func, new_type, args, state):
    from disthook.nn.parameter import Parameter
    from disthook.tensor import Tensor

    if not any(func is f for f in REBUILD_FUNCTIONS.values()) or not isinstance(args, tuple):
        raise CheckpointError(f"a tensor subclass is rebuilt by {func!r}")
    out = func(*args)
    if new_type is Parameter and type(out) is Tensor:
        out = Parameter(out, out.requires_grad)
    elif new_type is not type(out):
        name = getattr(new_type, "__qualname__", repr(new_type))
        raise CheckpointError(f"the file holds a tensor of class {name}; disthook.load "
                              "rebuilds torch.Tensor and torch.nn.Parameter")
    set_state(out, state, "tensor")
    return out


REBUILD_FUNCTIONS = {f.__name__: f for f in (
    _rebuild_tensor, _rebuild_tensor_v2, _rebuild_tensor_v3, _rebuild_parameter,
    _rebuild_parameter_with_state)}

# torch's rebuild functions for tensors that disthook has no counterpart of
UNSUPPORTED_REBUILDS = {
    "_rebuild_qtensor": "a quantized tensor",
    "_rebuild_sparse_tensor": "a sparse tensor",
    "_rebuild_nested_tensor": "a nested tensor",
    "_rebuild_meta_tensor_no_storage": "a tensor on the meta device (it has no values)",
    "_rebuild_wrapper_subclass": "a tensor subclass",
    "_rebuild_device_tensor_from_numpy": "a tensor on an accelerator",
    "_rebuild_xla_tensor": "an XLA tensor",
    "_rebuild_mtia_tensor": "an MTIA tensor",
}


def empty_hooks() -> OrderedDict:
    return OrderedDict()
