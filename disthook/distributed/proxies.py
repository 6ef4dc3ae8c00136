"""Proxies of a deployed model's parts on the client: ``RemoteModule`` (a submodule by its
path, taking hooks that fire on its worker), ``RemoteParameter`` (a parameter living on its
worker: reads fetch its value, in-place edits run there) and ``RemoteHandle`` (removes a
client hook). Hooks go through the table of hook kinds (``hook_kinds``)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from disthook.autograd import grad_mode
from disthook.distributed import hook_kinds
from disthook.distributed.values import pack
from disthook.tensor import Tensor

if TYPE_CHECKING:
    from disthook.distributed.remote import RemoteModel

__all__ = ["RemoteHandle", "RemoteModule", "RemoteParameter"]


class RemoteHandle:
    """Removes a client hook from the worker that fires it (idempotent, a context manager)."""

    def __init__(self, model: RemoteModel, hook_id: int, path: str):
        self.id, self._model, self._path = hook_id, model, path

    def remove(self) -> None:
        self._model._remove_hooks([self.id])

    def __enter__(self) -> RemoteHandle:
        return self

    def __exit__(self, *exc) -> None:
        self.remove()


class RemoteModule:
    """A submodule of a deployed model, by its path; hooks registered here fire on its
    worker and run here, with exactly the signatures and return rules of one process."""

    def __init__(self, model: RemoteModel, path: str):
        self._model, self._path = model, path

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        target = f"{self._path}.{name}"
        twin = self._model._local.get_submodule(self._path)
        if name in twin._parameters:
            return RemoteParameter(self._model, target)
        if name in twin._modules:
            return RemoteModule(self._model, target)
        if name in twin._buffers:  # a buffer's current value (running stats change remotely)
            state = self._model._states(names=[target])["state"]
            return Tensor._make(np.array(state[target]), None, 0)
        if name == "training":
            return self._model.training
        if name in twin.__dict__ and not callable(twin.__dict__[name]):
            return twin.__dict__[name]  # a plain attribute (in_features, eps, ...)
        raise AttributeError(f"'{type(twin).__name__}' object (remote, at {self._path!r}) "
                             f"has no attribute '{name}'")

    def __getitem__(self, idx) -> RemoteModule:
        names = list(self._model._local.get_submodule(self._path)._modules)
        return RemoteModule(self._model, f"{self._path}.{names[idx]}")

    def _register(self, kind: str, hook, **options) -> RemoteHandle:
        return self._model._add_hook(kind, self._path, hook, self,
                                     **hook_kinds.options(kind, options))

    def register_forward_pre_hook(self, hook, *, prepend: bool = False,
                                  with_kwargs: bool = False) -> RemoteHandle:
        return self._register("forward_pre", hook, prepend=prepend, with_kwargs=with_kwargs)

    def register_forward_hook(self, hook, *, prepend: bool = False, with_kwargs: bool = False,
                              always_call: bool = False) -> RemoteHandle:
        return self._register("forward", hook, prepend=prepend, with_kwargs=with_kwargs,
                              always_call=always_call)

    def register_full_backward_hook(self, hook, prepend: bool = False) -> RemoteHandle:
        return self._register("full_backward", hook, prepend=prepend)

    def register_backward_hook(self, hook) -> RemoteHandle:
        """The legacy hook: sees the gradients of the last op of the module's forward."""
        return self._register("backward", hook)

    def register_full_backward_pre_hook(self, hook, prepend: bool = False) -> RemoteHandle:
        return self._register("full_backward_pre", hook, prepend=prepend)

    def __repr__(self) -> str:
        local = self._model._local.get_submodule(self._path)
        return f"Remote({self._path}: {local!r})"


class RemoteParameter:
    """A parameter of a deployed model, living on its worker. It reads like a tensor (each
    read fetches the current value), takes tensor hooks that fire on the worker, and takes
    in-place updates that run on the worker: under ``no_grad()`` or through ``.data``, as for
    a local parameter (``p.copy_(t)``, ``p.data.fill_(0)``, ``p.requires_grad_(False)``)."""

    def __init__(self, model: RemoteModel, path: str, *, _data: bool = False):
        self._model, self._path, self._is_data = model, path, _data

    # ---- what it is, without a round trip (from the model's local twin) --------------------
    @property
    def _twin(self):
        return self._model._local.get_parameter(self._path)

    @property
    def shape(self):
        return self._twin.shape

    @property
    def dtype(self):
        return self._twin.dtype

    @property
    def device(self):
        return self._twin.device

    @property
    def requires_grad(self) -> bool:
        return False if self._is_data else self._twin.requires_grad

    @requires_grad.setter
    def requires_grad(self, requires_grad: bool) -> None:
        self.requires_grad_(requires_grad)

    @property
    def is_leaf(self) -> bool:
        return True

    def size(self, dim=None):
        return self._twin.size(dim) if dim is not None else self._twin.size()

    def dim(self) -> int:
        return self._twin.dim()

    @property
    def ndim(self) -> int:
        return self._twin.dim()

    def numel(self) -> int:
        return self._twin.numel()

    def __len__(self) -> int:
        return len(self._twin)

    # ---- reading: the current value from the worker -----------------------------------------
    def detach(self) -> Tensor:
        """A local tensor holding the parameter's current value."""
        state = self._model._states(names=[self._path])
        return Tensor._make(np.array(state["state"][self._path]), None, 0)

    @property
    def data(self) -> RemoteParameter:
        """The parameter without autograd: reads fetch, in-place ops write to the worker."""
        return RemoteParameter(self._model, self._path, _data=True)

    @property
    def grad(self) -> Tensor | None:
        """A local copy of the gradient on the worker: change it through the parameter
        (``p.grad = g``, ``p.grad = None``, the clipping utilities), not in place."""
        grads = self._model._states(names=[self._path])["grads"]
        arr = grads.get(self._path)
        return None if arr is None else Tensor._make(np.array(arr), None, 0)

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
            value = value.detach()._data
        RemoteParameter._grad_op([self], "set", grads=[value])

    @grad.deleter
    def grad(self) -> None:
        self.grad = None

    # ---- gradients of many parameters at once, where they live (nn.utils.clip_grad) ------------
    @staticmethod
    def _grad_op(params: list, op: str, value: float | None = None, grads=None) -> list:
        """Run ``grad_op`` on the workers holding ``params`` (RemoteParameters of one or
        more models): per model one request per worker, sent together; the results in the
        order of ``params``."""
        results: list = [None] * len(params)
        models: dict[int, tuple] = {}  # id(model) -> (model, {address: [indices]})
        for i, p in enumerate(params):
            model, owners = models.setdefault(id(p._model), (p._model, {}))
            owners.setdefault(model._owner(p._path), []).append(i)
        for model, owners in models.values():
            calls = []
            for address, indices in owners.items():
                fields = {"names": [params[i]._path for i in indices], "op": op,
                          "value": value}
                if grads is not None:
                    fields["grads"] = [grads[i] for i in indices]
                calls.append((address, fields))
            replies = model._hub.request_all(calls, "grad_op", what=f"{op} of gradients")
            for indices, reply in zip(owners.values(), replies):
                for i, result in zip(indices, reply["result"] or [None] * len(indices)):
                    results[i] = result
        return results

    @staticmethod
    def _grad_norms(params: list, norm_type: float) -> list:
        """Each parameter's gradient norm (a 0-d tensor of its dtype; None: no gradient)."""
        norms = RemoteParameter._grad_op(params, "norm", float(norm_type))
        return [None if n is None else Tensor._make(np.array(n, p._twin._data.dtype), None, 0)
                for p, n in zip(params, norms)]

    @staticmethod
    def _scale_grads(params: list, factor: Tensor) -> None:
        RemoteParameter._grad_op(params, "scale", float(factor.item()))

    @staticmethod
    def _clamp_grads(params: list, clip_value: float) -> None:
        RemoteParameter._grad_op(params, "clamp", float(clip_value))

    def numpy(self) -> np.ndarray:
        if self.requires_grad and grad_mode.is_grad_enabled():
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. Use "
                               "tensor.detach().numpy() instead.")
        return self.detach()._data

    def __array__(self, dtype=None, copy=None):
        arr = self.detach()._data
        return arr if dtype is None else arr.astype(dtype)

    def register_hook(self, hook) -> RemoteHandle:
        return self._model._add_hook("tensor", self._path, hook, self,
                                     **hook_kinds.options("tensor"))

    # ---- in place, on the worker ---------------------------------------------------------------
    def requires_grad_(self, requires_grad: bool = True) -> RemoteParameter:
        self._inplace("requires_grad_", (bool(requires_grad),), {})
        self._twin.requires_grad_(bool(requires_grad))
        return self

    def _inplace(self, op: str, args: tuple, kwargs: dict) -> RemoteParameter:
        if (op != "requires_grad_" and not self._is_data and self.requires_grad
                and grad_mode.is_grad_enabled()):
            raise RuntimeError("a leaf Variable that requires grad is being used in an "
                               "in-place operation.")
        args = tuple(a.detach() if isinstance(a, RemoteParameter) else a for a in args)
        kwargs = {k: a.detach() if isinstance(a, RemoteParameter) else a
                  for k, a in kwargs.items()}
        self._model._hub.request(self._model._owner(self._path), "param_op", {
            "name": self._path, "op": op, "args": pack(list(args)), "kwargs": pack(kwargs)},
            what=f"{self._path}.{op}()")
        return self

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        attr = getattr(Tensor, name, None)
        if attr is None:
            raise AttributeError(f"'RemoteParameter' object has no attribute '{name}'")
        if name.endswith("_") and callable(attr):  # an in-place method: runs on the worker
            return lambda *args, **kwargs: self._inplace(name, args, kwargs)
        return getattr(self.detach(), name)  # anything else reads a local copy

    def __repr__(self) -> str:
        return f"RemoteParameter({self._path}, shape={tuple(self.shape)})"


def _reading(name: str):
    def method(self, *args):
        args = tuple(a.detach() if isinstance(a, RemoteParameter) else a for a in args)
        return getattr(self.detach(), name)(*args)  # the operators take no keywords

    method.__name__ = name
    return method


for _name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__",
              "__truediv__", "__rtruediv__", "__matmul__", "__rmatmul__", "__pow__", "__neg__",
              "__abs__", "__getitem__", "__eq__", "__ne__", "__lt__", "__le__", "__gt__",
              "__ge__", "__float__", "__int__", "__bool__", "__iter__"):
    setattr(RemoteParameter, _name, _reading(_name))
RemoteParameter.__hash__ = object.__hash__  # __eq__ compares values; identity stays hashable

