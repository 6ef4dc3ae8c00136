"""A deployed model whose forward does more than chain its children: the root's own forward
runs here, on the client, unchanged; each of its children (placed on the workers as usual)
runs on its worker when the forward calls it, and functional code between them (``F.relu``,
``torch.flatten``, a residual ``x + h``) runs here.

Inside the root's forward, ``self.conv1`` is a ``PlacedCall``: calling it sends the tensor
to the worker holding ``conv1``, which runs that submodule alone and answers with its output,
whose ``grad_fn`` (a ``RemoteBackward0``) sends the gradient back to that worker. Nested
parts are reached the same way (``self.blocks[2]``, ``self.transformer.h``). Hooks on the
children fire on their workers; hooks on the whole model fire here, as in one process.
"""
from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

import numpy as np

from disthook.autograd import grad_mode
from disthook.distributed.autograd_node import RemoteBackward0
from disthook.tensor import Tensor

if TYPE_CHECKING:
    from disthook.distributed.remote import RemoteModel

__all__ = ["PlacedCall", "needs_glue", "run_root_forward"]


def needs_glue(module, args: tuple, kwargs: dict) -> bool:
    """Whether ``module``'s forward must run here: it takes other than one tensor, or it
    does more than chain its children (see ``placement.check_chain``)."""
    from disthook.distributed.placement import check_chain

    if kwargs or len(args) != 1 or not isinstance(args[0], Tensor):
        return True
    try:
        check_chain(module, args[0])
    except RuntimeError:
        return True
    return False


def run_root_forward(model: RemoteModel, args: tuple, kwargs: dict):
    """The root module's forward, run here with its children standing for their workers."""
    return _root_class(type(model._local)).forward(_as_root(model), *args, **kwargs)


class _Root:
    """``self`` inside the root's forward: an instance of the root's own class (so methods,
    properties, ``super()`` and ``isinstance`` work), whose children are ``PlacedCall``s
    (also as ``self._modules``, so ``self.children()`` runs them on their workers) and whose
    plain attributes are the root's."""

    @property
    def _modules(self) -> dict:
        return {name: PlacedCall(self._model, name) for name in self._model._local._modules}

    @property
    def _parameters(self) -> dict:
        return {}  # deploy refuses a root with parameters of its own

    @property
    def _buffers(self) -> dict:
        return {}

    def __getattr__(self, name: str):
        twin = self._model._local
        if name in twin._modules:
            return PlacedCall(self._model, name)
        if name == "training":
            return self._model.training
        if name in twin.__dict__:
            return twin.__dict__[name]
        raise AttributeError(f"'{type(twin).__name__}' object has no attribute '{name}'")

    def __setattr__(self, name: str, value) -> None:
        """A forward that keeps something on self (``self.input = x``) keeps it here."""
        if name in self._model._local._modules:
            raise NotImplementedError(f"the forward assigns the child {name!r} of a "
                                      "deployed model; its children stay where they are")
        object.__setattr__(self._model._local, name, value)


_ROOT_CLASSES: dict[type, type] = {}


def _root_class(kind: type) -> type:
    cls = _ROOT_CLASSES.get(kind)
    if cls is None:
        cls = _ROOT_CLASSES[kind] = type(kind.__name__, (_Root, kind), {
            "__module__": __name__, "__qualname__": f"_Root[{kind.__qualname__}]"})
    return cls


def _as_root(model: RemoteModel):
    root = object.__new__(_root_class(type(model._local)))
    object.__setattr__(root, "_model", model)
    return root


class PlacedCall:
    """A submodule of a deployed model, inside the root's forward: calling it runs it on its
    worker; its own children are reached by attribute, index or iteration."""

    def __init__(self, model: RemoteModel, path: str):
        self._model, self._path = model, path

    @property
    def _twin(self):
        return self._model._local.get_submodule(self._path)

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        twin = self._twin
        if name in twin._modules:
            return PlacedCall(self._model, f"{self._path}.{name}")
        if name in twin._parameters or name in twin._buffers:
            return getattr(self._model.get_submodule(self._path), name)
        if name in twin.__dict__ and not callable(twin.__dict__[name]):
            return twin.__dict__[name]
        raise AttributeError(f"'{type(twin).__name__}' object (deployed, at {self._path!r}) "
                             f"has no attribute '{name}' here")

    def __len__(self) -> int:
        return len(self._twin._modules)

    def __iter__(self):
        for name in self._twin._modules:
            yield PlacedCall(self._model, f"{self._path}.{name}")

    def __getitem__(self, idx):
        names = list(self._twin._modules)
        if isinstance(idx, slice):
            return [PlacedCall(self._model, f"{self._path}.{n}") for n in names[idx]]
        if isinstance(idx, str):
            return PlacedCall(self._model, f"{self._path}.{idx}")
        return PlacedCall(self._model, f"{self._path}.{names[idx]}")

    def __call__(self, *args, **kwargs):
        return call_placed(self._model, self._path, args, kwargs)

    def __repr__(self) -> str:
        return f"PlacedCall({self._path}: {type(self._twin).__name__})"


def call_placed(model: RemoteModel, path: str, args: tuple, kwargs: dict) -> Tensor:
    """Run the submodule at ``path`` on its worker with one tensor; its output, whose
    backward goes to that worker."""
    if kwargs or len(args) != 1 or not isinstance(args[0], Tensor):
        got = ", ".join([type(a).__name__ for a in args] + [f"{k}=" for k in kwargs])
        raise NotImplementedError(
            f"the deployed submodule {path!r} is called with ({got}); a placed submodule "
            "takes one tensor: call it with one, or keep that part in the root's forward")
    (x,) = args
    stage = model._stage_of(path)
    grad = grad_mode.is_grad_enabled()
    ctx_id = uuid.uuid4().hex
    (reply,) = model._hub.request_all(
        [(model._addresses[stage], {"stage": stage, "inputs": [x._data], "grad_enabled": grad,
                                    "requires_grad": [x._requires_grad],
                                    "reply_to": model._hub.reply_to, "path": path}, ctx_id)],
        "forward", what=f"forward of {path!r}")
    result = reply["result"]
    out = np.array(result["output"])
    if grad and result["requires_grad"]:
        return Tensor._make(out, RemoteBackward0(model, [ctx_id], x, None, stage), 0)
    return Tensor._make(out, None, 0)
