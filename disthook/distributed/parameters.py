"""``RemoteParameter``: a parameter of a deployed model, kept by its worker. On the client it
is an ``nn.Parameter`` whose storage is on the worker:

- what it is (shape, dtype, device, ``requires_grad``, ``is_leaf``) is known here, from the
  model's local twin, so metadata and factory functions (``.shape``, ``zeros_like``,
  ``new_empty``) cost no round trip;
- its value is fetched when something needs it: every read of ``_data`` (the slot every op
  reads; a local tensor's is set, so this costs them nothing) asks the owner once, and a
  method call (``p.sum()``, ``p * 2``, ``print(p)``) works on one fetched copy. The fetched
  array is read-only: writing into a copy would change nothing on the worker, so it raises
  instead of passing silently;
- a gradient that client code computes through it (``F.linear(x, p)``, then backward) is
  added into its ``.grad`` on the worker, as a leaf's gradient accumulates in one process;
- every write runs on the owner: in-place methods (under ``no_grad()`` or through
  ``.data``), ``p[i] = v``, ``.data = t``, ``.grad = g``, ``requires_grad_``.

Its static methods step, zero and clip the gradients of many remote parameters at once,
where they live (the optimizers and ``nn.utils.clip_grad`` use them)."""
from __future__ import annotations

import copy
import functools
import inspect
import weakref
from typing import TYPE_CHECKING

import numpy as np

from disthook import _strides
from disthook._layout import contiguous_strides
from disthook.autograd import grad_mode
from disthook.autograd.graph import AccumulateGrad
from disthook.distributed import async_calls, post_accumulate, remote_grads
from disthook.distributed.view_writes import viewed
from disthook.nn.parameter import Parameter
from disthook.service import hook_kinds
from disthook.service.values import opaque_in, pack
from disthook.tensor import Tensor

if TYPE_CHECKING:
    from disthook.distributed.placed import RemoteHandle

__all__ = ["RemoteBuffer", "RemoteParameter", "RemoteStorage"]


_SLOT_DATA = Tensor.__dict__["_data"]  # the slot every tensor holds its array in
_SLOT_REQUIRES_GRAD = Tensor.__dict__["_requires_grad"]


# the in-place methods that may change a tensor's shape
_RESHAPING = frozenset({"as_strided_", "resize_", "resize_as_", "squeeze_", "swapaxes_",
                        "swapdims_", "t_", "transpose_", "unsqueeze_", "set_"})


@functools.cache
def _draws(op: str) -> bool:
    """Whether the in-place tensor method ``op`` draws random numbers (it takes a
    ``generator``: ``uniform_``, ``normal_``, ``bernoulli_``, ``random_`` ...)."""
    method = getattr(Tensor, op, None)
    try:
        return callable(method) and "generator" in inspect.signature(method).parameters
    except (TypeError, ValueError):
        return False


def meta_array(array: np.ndarray) -> np.ndarray:
    """An array with ``array``'s shape and dtype and one element of memory: what a tensor
    whose value lives on a worker keeps here, to answer ``.shape`` and ``.dtype``."""
    return np.broadcast_to(np.zeros((), array.dtype), array.shape)


class RemoteStorage:
    """What a tensor whose storage is on a worker does (``RemoteParameter``,
    ``RemoteBuffer``; see the module's doc). Its slot ``_data`` holds a ``meta_array`` of
    its shape and dtype; ``__dict__`` says where it lives: ``_model`` (the deployment),
    ``_path`` (its name in the model), ``_is_data`` (a ``.data`` view of a parameter)."""

    __slots__ = ()

    # ---- what it is, without a round trip --------------------------------------------------
    @property
    def _twin(self) -> Tensor:
        """A local tensor of its shape and dtype (no value: one element of memory)."""
        return Tensor._make(_SLOT_DATA.__get__(self), None, 0)

    @property
    def shape(self):
        return self._twin.shape

    def size(self, dim=None):
        return self._twin.size(dim) if dim is not None else self._twin.size()

    @property
    def dtype(self):
        return self._twin.dtype

    @property
    def device(self):
        return self._twin.device

    @property
    def ndim(self) -> int:
        return self._twin.dim()

    def dim(self) -> int:
        return self._twin.dim()

    ndimension = dim

    def numel(self) -> int:
        return self._twin.numel()

    nelement = numel

    def element_size(self) -> int:
        return self._twin.element_size()

    def is_floating_point(self) -> bool:
        return self._twin.is_floating_point()

    def is_contiguous(self, memory_format=None) -> bool:
        # (its value lies in C order on the worker: a channels_last format asks of that)
        return _strides.lies_as(self.shape, contiguous_strides(self.shape), memory_format)

    def stride(self, dim=None):  # contiguous, as is_contiguous says (the meta array's are 0)
        strides = contiguous_strides(self.shape)
        return strides if dim is None else strides[self._twin._dim(dim)]

    def data_ptr(self) -> int:
        """One address per worker tensor (tied parameters and a ``.data`` share it; a new one
        once ``unshare`` gave its value new memory), as tools that find shared storage need."""
        ptrs = self._model.__dict__.setdefault("_data_ptrs", {})
        return id(ptrs.setdefault(self._path, object()))

    def __len__(self) -> int:
        return len(self._twin)

    # ---- reading: the current value from the worker -----------------------------------------
    @property
    def _data(self) -> np.ndarray:
        """The worker's current value (read-only: a write goes through the tensor)."""
        fetched = self._model.__dict__.get("_fetched")
        if fetched is not None and self._path in fetched:
            arr = np.array(fetched[self._path])
        else:
            arr = np.array(self._model._states(names=[self._path])["state"][self._path])
        arr.flags.writeable = False
        return arr

    @_data.setter
    def _data(self, value: np.ndarray) -> None:
        self._set_value(Tensor._make(np.asarray(value), None, 0), f"{self._path} = ...")

    def _snapshot(self) -> Tensor:
        """A local tensor with the current value that stands for this tensor in a graph."""
        return Tensor._make(self._data, None, 0)

    def detach(self) -> Tensor:
        """A local tensor holding the current value (read-only: in one process it would
        share the tensor's memory; change the tensor itself instead)."""
        return Tensor._make(self._data, None, 0)

    @staticmethod
    def _read_together(tensors: list) -> list[Tensor]:
        """Local tensors holding the current values of placed ``tensors``, asked of each
        worker once, side by side (``swa_utils`` reads a model's every step)."""
        names: dict = {}  # (deployment, worker address) -> paths
        for t in tensors:
            names.setdefault((t._model, t._model._owner(t._path)), []).append(t._path)
        values = {}
        for model in dict.fromkeys(m for m, _ in names):
            asked = [(a, {"names": paths}) for (m, a), paths in names.items() if m is model]
            for reply in model._hub.request_all(asked, "get_state", what="get_state"):
                values.update({(model, k): v for k, v in reply["result"]["state"].items()})
        return [Tensor._make(np.array(values[t._model, t._path]), None, 0) for t in tensors]

    def _set_value(self, value: Tensor, what: str) -> None:
        if isinstance(value, RemoteStorage):
            value = value.detach()
        if value.shape != self.shape:
            raise RuntimeError(f"a deployed tensor keeps its shape: {self._path} is "
                               f"{list(self.shape)}, the new data is {list(value.shape)}")
        dtype = _SLOT_DATA.__get__(self).dtype
        self._model._hub.write_all([(self._model._owner(self._path), "set_state", {
            "state": {self._path: value.detach()._data.astype(dtype)}})], what=what)

    def numpy(self, *, force: bool = False) -> np.ndarray:
        if self.requires_grad and not force and grad_mode.is_grad_enabled():
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. Use "
                               "tensor.detach().numpy() instead.")
        return self._data

    # ---- writing: in place, on the worker ------------------------------------------------------
    def _inplace(self, op: str, args: tuple, kwargs: dict):
        if (op != "requires_grad_" and not self._is_data and self.requires_grad
                and grad_mode.is_grad_enabled()):
            raise RuntimeError("a leaf Variable that requires grad is being used in an "
                               "in-place operation.")
        args = tuple(a.detach() if isinstance(a, RemoteStorage) else a for a in args)
        kwargs = {k: a.detach() if isinstance(a, RemoteStorage) else a
                  for k, a in kwargs.items()}
        if op in _RESHAPING and self.__dict__.get("_is_data"):
            raise RuntimeError(
                f"{self._path}.data.{op}(): the .data of a deployed parameter keeps the "
                "parameter's shape and layout (in one process this would change only the "
                f".data tensor's view, not {self._path}); take a view instead: "
                f"{self._path}.data.{op[:-1]}(...)")
        if _draws(op) or op in _RESHAPING or opaque_in([args, kwargs]):
            # computed here and the value written there: a draw (uniform_, normal_ ...)
            # from this process's stream, as in one process (nn.init after the deploy gives
            # one process's values, and the stream goes on from where it would); a shape
            # change (t_, unsqueeze_ ...), which _set_value refuses, since a deployed tensor
            # keeps its shape; arguments that cannot travel (apply_'s function)
            value = Tensor._make(np.array(self._data), None, 0)
            with grad_mode.no_grad():
                getattr(value, op)(*args, **kwargs)
            self._set_value(value, f"{self._path}.{op}()")
            return self
        self._model._hub.write_all([(self._model._owner(self._path), "param_op", {
            "name": self._path, "op": op, "args": pack(list(args)), "kwargs": pack(kwargs)})],
            what=f"{self._path}.{op}()")
        return self

    def __getitem__(self, index) -> Tensor:
        """``t[i]``, fetched; a view's in-place changes reach the worker (view_writes)."""
        return viewed(self, index, self._snapshot()[index])

    def __setitem__(self, index, value) -> None:
        """``t[i] = v`` (under ``no_grad()`` or on ``.data``): the new value, made here from
        the current one, is copied into the worker's tensor."""
        if not self._is_data and self.requires_grad and grad_mode.is_grad_enabled():
            raise RuntimeError("a leaf Variable that requires grad is being used in an "
                               "in-place operation.")
        new = Tensor._make(self._data.copy(), None, 0)
        with grad_mode.no_grad():
            new[index] = value.detach() if isinstance(value, RemoteStorage) else value
        self._inplace("copy_", (new,), {})

    def __deepcopy__(self, memo):
        """A copy is a local tensor (a parameter stays a parameter) with the current value."""
        if id(self) in memo:
            return memo[id(self)]
        value = Tensor._make(self._data.copy(), None, 0)
        if isinstance(self, Parameter) and not self._is_data:
            copied = Parameter(value, self.requires_grad)
            grad = self._grad
            if grad is not None:
                copied._grad = Tensor._make(grad._data.copy(), None, 0)
        else:
            copied = value
        memo[id(self)] = copied
        return copied

    def __reduce_ex__(self, protocol):
        """Pickled as the local tensor it holds (its value fetched)."""
        return copy.deepcopy(self).__reduce_ex__(protocol)


class RemoteParameter(RemoteStorage, Parameter):
    """A parameter of a deployed model, living on its worker (see the module's doc). It is
    the model's own ``Parameter`` object, placed (``adopt``); its ``.data`` is one more
    object per parameter. ``RemoteParameter(deployment, name)`` finds it by name."""

    def __new__(cls, model=None, path=None, *args, _data: bool = False, **kwargs):
        if not hasattr(model, "_canonical"):  # type(p)(data, requires_grad), as library
            # code makes a new parameter like an old one: a plain one, as in one process
            return Parameter(model, *((path,) if path is not None else ()), *args, **kwargs)
        path = model._canonical.get(path, path)  # tied names are one parameter
        cache = model.__dict__.setdefault("_param_proxies", {})
        proxy = cache.get((path, _data))
        if proxy is None:
            if not _data:
                raise KeyError(f"{path!r} is not a parameter placed on a worker")
            main = cache[(path, False)]
            proxy = cache[(path, True)] = object.__new__(cls)
            _SLOT_DATA.__set__(proxy, _SLOT_DATA.__get__(main))
            _SLOT_REQUIRES_GRAD.__set__(proxy, False)
            proxy._grad_fn, proxy._output_nr, proxy._vc = None, 0, [0]
            proxy.__dict__.update(_model=model, _path=path, _is_data=True, _main=main,
                                  _accumulator=main._accumulator)
        return proxy

    def __init__(self, *args, **kwargs) -> None:
        pass  # made by adopt (or __new__, for .data)

    @property
    def _requires_grad(self) -> bool:  # the slot the engine reads
        return False if self._is_data else _SLOT_REQUIRES_GRAD.__get__(self)

    @_requires_grad.setter
    def _requires_grad(self, value: bool) -> None:
        self.requires_grad_(bool(value))

    @property
    def requires_grad(self) -> bool:
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, requires_grad: bool) -> None:
        self.requires_grad_(requires_grad)

    def _snapshot(self) -> Tensor:
        """A local tensor with the current value that stands for this parameter in a graph:
        gradients that reach it are added into the worker's ``.grad``."""
        t = Tensor._make(self._data, None, 0)
        if self._requires_grad:
            t._requires_grad = True
            t._grad_acc = weakref.ref(self._accumulator)
        return t

    @property
    def _grad_acc(self):
        return weakref.ref(self._accumulator)

    def _reach_from(self, nodes: set, create_graph: bool) -> None:
        """A backward naming this parameter among its inputs, over a graph of ``nodes``:
        where code here used it, its accumulator is among them already;
        where its worker did, the nodes standing for that worker's part give it an edge
        (``RemoteBackward0.wants_parameter``), and the worker sends its gradient. Used in
        both places, it gets both gradients, summed, as in one process."""
        for n in nodes:
            if getattr(n, "wants_parameter", None) is not None:
                n.wants_parameter(self)

    def _graph_elsewhere(self) -> str | None:
        """Why a backward naming it finds no graph, if its worker holds that graph."""
        from disthook.distributed.graph_grads import graph_elsewhere

        return graph_elsewhere(self)

    @_grad_acc.setter
    def _grad_acc(self, value) -> None:
        pass  # its accumulator is fixed: the worker's .grad

    @property
    def data(self) -> RemoteParameter:
        """The parameter without autograd: reads fetch, in-place ops write to the worker."""
        return RemoteParameter(self._model, self._path, _data=True)

    @data.setter
    def data(self, value) -> None:
        """``p.data = t``: the worker's parameter takes ``t``'s values (its shape and dtype
        stay what they were deployed with)."""
        if not isinstance(value, Tensor):
            raise TypeError(f"data must be a Tensor, got {type(value).__name__}")
        from disthook.distributed import data_views

        data_views.unshare([self])  # a .data taken before keeps the old values
        self._set_value(value, f"{self._path}.data = ...")

    @property
    def _grad(self) -> Tensor | None:
        fetched = self._model.__dict__.get("_fetched_grads")
        if fetched is not None:
            arr = fetched.get(self._path)
        else:
            arr = self._model._states(names=[self._path])["grads"].get(self._path)
        if arr is None:
            return None
        arr = np.array(arr)
        arr.flags.writeable = False
        return Tensor._make(arr, None, 0)

    @_grad.setter
    def _grad(self, value) -> None:
        from disthook.distributed.state_entries import freeze_grads

        freeze_grads([self])  # (a kept p.grad is no longer the gradient: it keeps its value)
        remote_grads.grad_op([self], "set",
                             grads=[None if value is None else value.detach()._data])

    @property
    def grad(self) -> Tensor | None:
        """The gradient on the worker, as a tensor whose storage is there
        (``state_entries.GradEntry``): a kept ``g = p.grad`` reads what a later backward
        added; an in-place write into it (``p.grad.zero_()``, ``p.grad.data.clamp_(-1,
        1)``) is made here and sent to the worker's gradient."""
        from disthook.distributed.state_entries import grad_entry

        kept = self._model.__dict__.get("_graph_grads", {}).get(self._path)
        if kept is not None:  # made by backward(create_graph=True): with its graph, there
            return kept
        grad = self._grad
        return None if grad is None else grad_entry(self, _SLOT_DATA.__get__(grad))

    @grad.setter
    def grad(self, value) -> None:
        """``p.grad = g`` (a tensor of the parameter's shape) or ``p.grad = None``, on the
        worker, with the errors torch gives."""
        if value is not None:
            if not isinstance(value, Tensor):
                raise TypeError(f"assigned grad expected to be a Tensor or None but got grad "
                                f"of type {type(value).__name__}")
            if value.shape != self.shape:
                raise RuntimeError(f"attempting to assign a gradient of size "
                                   f"'{list(value.shape)}' to a tensor of size "
                                   f"'{list(self.shape)}'. Please ensure that the gradient "
                                   "and the tensor are the same size")
        self._grad = value

    @grad.deleter
    def grad(self) -> None:
        self.grad = None

    def register_hook(self, hook) -> RemoteHandle:
        """A tensor hook that fires on the worker, when the gradient of the parameter there
        is computed (it runs here)."""
        return self._model._add_hook("tensor", self._path, hook, self,
                                     **hook_kinds.options("tensor"))

    def register_post_accumulate_grad_hook(self, hook) -> RemoteHandle:
        """``hook(param)`` fires on the worker once ``.grad`` was updated there, and runs
        here with this parameter (``post_accumulate``)."""
        return post_accumulate.register(self, hook)

    def requires_grad_(self, requires_grad: bool = True) -> RemoteParameter:
        main = self.__dict__.get("_main", self)
        RemoteStorage._inplace(main, "requires_grad_", (bool(requires_grad),), {})
        async_calls.forget(main._model)  # the parts' outputs' flags may change with it
        _SLOT_REQUIRES_GRAD.__set__(main, bool(requires_grad))
        return self

    def __repr__(self) -> str:
        """As torch prints a parameter (its current value, fetched): a program prints what
        it prints in one process (``workers()`` of its deployment says where it lives)."""
        try:
            value = self.detach()
        except Exception:
            return f"RemoteParameter({self._path}, shape={tuple(self.shape)}, unreachable)"
        return f"Parameter containing:\n{value.requires_grad_(self.requires_grad)!r}"

class RemoteAccumulateGrad(AccumulateGrad):
    """The sink of a remote parameter in a graph made here: the gradient is added into the
    parameter's ``.grad`` on its worker."""

    __slots__ = ()

    def accumulate(self, grad, fresh: bool = False) -> None:
        if grad is not None:
            remote_grads.grad_op([self.variable], "add", grads=[grad.detach()._data])
            post_accumulate.warn_unhooked(self.variable)


class RemoteBuffer(RemoteStorage, Tensor):
    """A buffer of a deployed model (running statistics, masks), living on its worker: the
    model's own ``Tensor`` object, placed (``adopt_buffer``); its value is fetched when read
    and its in-place changes run there."""

    def __new__(cls, *args, **kwargs):
        """``type(buffer)(data)``, as library code makes a tensor like another: a plain
        tensor, as in one process (a placed buffer is made by ``adopt_buffer``)."""
        return Tensor(*args, **kwargs)

    @property
    def _requires_grad(self) -> bool:
        return False

    @_requires_grad.setter
    def _requires_grad(self, value: bool) -> None:
        if value:
            raise RuntimeError(f"the buffer {self._path!r} of a deployed model cannot "
                               "require grad: only its parameters' gradients are kept")

    @property
    def requires_grad(self) -> bool:
        return False

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        self._requires_grad = value

    def requires_grad_(self, requires_grad: bool = True):
        self._requires_grad = requires_grad
        return self

    @property
    def data(self) -> RemoteBuffer:
        from disthook.distributed import data_views

        return data_views.buffer_data(self)

    @data.setter
    def data(self, value) -> None:
        if not isinstance(value, Tensor):
            raise TypeError(f"data must be a Tensor, got {type(value).__name__}")
        from disthook.distributed import data_views

        data_views.unshare([self])  # a .data taken before keeps the old values
        self._set_value(value, f"{self._path}.data = ...")

    @property
    def grad(self):
        return None

    def register_hook(self, hook):
        raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")

    def __repr__(self) -> str:
        try:
            return repr(self.detach())
        except Exception:
            return f"RemoteBuffer({self._path}, shape={tuple(self.shape)}, unreachable)"


# ---- the Tensor methods, over the worker's parameter ----------------------------------------
# in-place methods run on the worker; every other method works on one fetched copy (a method
# that reads the value many times fetches it once)
_OWN = {*RemoteStorage.__dict__, *RemoteParameter.__dict__, *RemoteBuffer.__dict__,
        "register_hook", "backward", "retain_grad", "type",
        "get_device", "is_complex", "new_zeros", "new_ones", "new_full",
        "new_empty", "new_tensor"}  # these need no value (or are the parameter's own)


def _in_place(name: str):
    def method(self, *args, **kwargs):
        return self._inplace(name, args, kwargs)

    method.__name__ = name
    return method


def _on_copy(name: str):
    def method(self, *args, **kwargs):
        return getattr(self._snapshot(), name)(*args, **kwargs)

    method.__name__ = name
    return method


def _tensor_methods() -> dict:
    methods = {}
    every = {}
    for klass in reversed(Tensor.__mro__[:-1]):  # the mixins' methods too (bernoulli_ ...)
        every.update(vars(klass))
    for name, attr in every.items():
        if name in _OWN or not callable(attr) or isinstance(attr, (staticmethod, classmethod,
                                                                   type)):
            continue
        if name.endswith("_") and not name.startswith("_"):
            methods[name] = _in_place(name)
        elif not name.startswith("_") or name in _READING_DUNDERS:
            methods[name] = _on_copy(name)
    return methods


_READING_DUNDERS = {
    "__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__",
    "__rtruediv__", "__floordiv__", "__rfloordiv__", "__mod__", "__rmod__", "__matmul__",
    "__rmatmul__", "__pow__", "__rpow__", "__neg__", "__pos__", "__abs__", "__getitem__",
    "__lt__", "__le__", "__gt__", "__ge__", "__eq__", "__ne__", "__float__", "__int__",
    "__bool__", "__iter__", "__array__", "__and__", "__or__", "__xor__",
    "__invert__", "__index__", "__contains__"}

# (not __format__: Tensor's, inherited, formats through repr(self), which prints a
# parameter as one: "Parameter containing:")
for _name, _method in _tensor_methods().items():
    setattr(RemoteStorage, _name, _method)
RemoteStorage.__hash__ = Tensor.__hash__  # __eq__ compares values; identity hashes


# what optimizers and the clipping utilities ask of a list of remote parameters

RemoteParameter._grad_op = staticmethod(remote_grads.grad_op)
RemoteParameter._zero_grads = staticmethod(remote_grads.zero_grads)
RemoteParameter._optimizer_share = staticmethod(remote_grads.optimizer_share)
RemoteParameter._optimizer_state = staticmethod(remote_grads.optimizer_state)
RemoteParameter._grad_norms = staticmethod(remote_grads.grad_norms)
RemoteParameter._scale_grads = staticmethod(remote_grads.scale_grads)
RemoteParameter._clamp_grads = staticmethod(remote_grads.clamp_grads)
