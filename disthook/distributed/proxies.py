"""Proxies of a deployed model's parts on the client: ``RemoteModule`` (a submodule by its
path, taking hooks that fire on its worker) and ``RemoteHandle`` (removes a client hook);
``RemoteParameter`` (an ``nn.Parameter`` whose storage is on its worker) is in
``parameters``. Hooks go through the table of hook kinds (``hook_kinds``)."""
from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING

import numpy as np

from disthook.distributed import hook_kinds, module_refs
from disthook.distributed.containers import container_reads, container_writes
from disthook.distributed.parameters import RemoteParameter
from disthook.distributed.values import opaque_in, pack
from disthook.nn.modules.module import Module, checked_state_value, note_unexpected
from disthook.tensor import Tensor
from disthook.utils.hooks import RemovableHandle

if TYPE_CHECKING:
    from disthook.distributed.remote import RemoteModel

__all__ = ["RemoteHandle", "RemoteModule", "RemoteParameter"]


class RemoteHandle(RemovableHandle):
    """Removes a client hook from the worker that fires it (idempotent, a context manager);
    a ``RemovableHandle`` like any other, so tools that check for one accept it."""

    def __init__(self, model: RemoteModel, hook_id: int, path: str):
        self.id, self._model, self._path = hook_id, model, path
        self.hooks_dict_ref, self.extra_dict_ref = _no_dict, ()

    def remove(self) -> None:
        self._model._remove_hooks([self.id])

    def __enter__(self) -> RemoteHandle:
        return self

    def __exit__(self, *exc) -> None:
        self.remove()


def _no_dict():
    return None


class RemoteModule:
    """A submodule of a deployed model, by its path; hooks registered here fire on its
    worker and run here, with exactly the signatures and return rules of one process.

    A proxy is an instance of its module's own class too (a ``RemoteModule`` subclass made
    per class: the proxy of a ``Linear`` is an ``nn.Linear`` and an ``nn.Module``), so code
    that walks ``named_modules()`` and picks modules by type finds them; there is one proxy
    per path and model, so it can key a dict and keep attributes set on it. Its parameters
    are ``RemoteParameter``s and its children proxies; calling it runs it alone on its
    worker; what would change it here (moving it, setting its mode) says what to do."""

    def __new__(cls, model: RemoteModel, path: str):
        cached = model.__dict__.setdefault("_proxies", {}).get(path)
        if cached is not None:
            return cached
        kind = type(model._local.get_submodule(path))
        proxy = object.__new__(_proxy_class(kind) if cls is RemoteModule else cls)
        model._proxies[path] = proxy
        return proxy

    def __init__(self, model: RemoteModel, path: str):
        object.__setattr__(self, "_model", model)
        object.__setattr__(self, "_path", path)
        # state-dict hooks run here, as remote.state_dict() and load_state_dict() walk the
        # tree (module hooks that fire inside forward and backward are the workers')
        for name in _STATE_DICT_HOOKS:
            if name not in self.__dict__:
                object.__setattr__(self, name, OrderedDict())

    @property
    def _twin(self):
        return self._model._local.get_submodule(self._path)

    # ---- the module's structure, as proxies (what nn.Module's own methods walk) -------------
    @property
    def _modules(self) -> dict:
        return {name: RemoteModule(self._model, f"{self._path}.{name}")
                for name in self._twin._modules}

    @property
    def _parameters(self) -> dict:
        return {name: RemoteParameter(self._model, f"{self._path}.{name}")
                for name, p in self._twin._parameters.items() if p is not None}

    @property
    def _buffers(self) -> dict:
        names = [f"{self._path}.{n}" for n, b in self._twin._buffers.items() if b is not None]
        state = self._model._states(names=names)["state"] if names else {}
        return {n.rsplit(".", 1)[1]: Tensor._make(np.array(state[n]), None, 0) for n in names}

    @property
    def _non_persistent_buffers_set(self) -> set:
        return self._twin._non_persistent_buffers_set

    # the hooks the client registered on this module, by id, as a module's own dicts read
    # (tools check len(module._backward_hooks)); changing them goes through the register
    # methods and handles
    def _client_hooks(self, *kinds: str) -> dict:
        return {hook_id: fn for hook_id, (fn, kind, _, fields) in self._model._hub.hooks.items()
                if kind in kinds and fields["path"] == self._path}

    @property
    def _forward_pre_hooks(self) -> dict:
        return self._client_hooks("forward_pre")

    @property
    def _forward_hooks(self) -> dict:
        return self._client_hooks("forward")

    @property
    def _backward_hooks(self) -> dict:
        return self._client_hooks("full_backward", "backward")

    @property
    def _backward_pre_hooks(self) -> dict:
        return self._client_hooks("full_backward_pre")

    @property
    def _is_full_backward_hook(self) -> bool | None:
        kinds = {kind for _, kind, _, fields in self._model._hub.hooks.values()
                 if fields["path"] == self._path}
        if "backward" in kinds:
            return False
        return True if "full_backward" in kinds else None

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        twin = self._twin
        if name in twin._parameters:
            return RemoteParameter(self._model, f"{self._path}.{name}")
        if name in twin._modules:
            return RemoteModule(self._model, f"{self._path}.{name}")
        if name in twin._buffers:  # a buffer's current value (running stats change remotely)
            return self._buffers[name]
        if name == "training":
            return self._model.training
        if name in twin.__dict__ and not callable(twin.__dict__[name]) \
                and not name.startswith("_"):
            # a plain attribute (in_features, eps, a dict of hook points: the deployed ones)
            return module_refs.translated(self, name, twin.__dict__[name])
        raise AttributeError(f"'{type(twin).__name__}' object (remote, at {self._path!r}) "
                             f"has no attribute '{name}'")

    def __setattr__(self, name: str, value) -> None:
        """A buffer takes the new tensor on the worker (as ``register_buffer``); a plain
        attribute the module had when deployed (``inplace``, ``eps``: its forward may read
        it) is set on the worker too when it can travel (numbers, strings, tensors and
        lists of them); any other plain attribute is the client's, kept on this module."""
        twin = self._twin
        if name in twin._buffers and (value is None or isinstance(value, Tensor)):
            self.register_buffer(name, value,
                                 persistent=name not in twin._non_persistent_buffers_set)
            return
        if name in twin._parameters or name in twin._modules or name in twin._buffers:
            raise NotImplementedError(
                f"assigning {name!r} of the deployed module at {self._path!r} here: load new "
                "values with load_state_dict, or change it in place under no_grad() "
                f"({self._path}.{name}.copy_(t))")
        if name in twin.__dict__ and not name.startswith("_") and not opaque_in(value):
            self._module_op("set_attr", name, pack(value))
            twin.__dict__[name] = value  # what the client reads (see __getattr__)
            self.__dict__.pop(name, None)
            return
        object.__setattr__(self, name, value)  # the client's own, kept on this proxy

    def __delattr__(self, name: str) -> None:
        """An attribute the client set goes; a plain attribute or buffer of the deployed
        module goes on its worker too, as ``del module.x`` in one process."""
        if name in self.__dict__:
            object.__delattr__(self, name)
            return
        twin = self._twin
        if name in twin._parameters or name in twin._modules:
            raise NotImplementedError(
                f"deleting {name!r} of the deployed module at {self._path!r}: its parameters "
                "and submodules stay as they were deployed")
        if name not in twin._buffers and (name not in twin.__dict__ or name.startswith("_")):
            raise AttributeError(f"'{type(twin).__name__}' object (remote, at {self._path!r}) "
                                 f"has no attribute '{name}'")
        self._module_op("del_attr", name)
        delattr(twin, name)

    def register_buffer(self, name: str, tensor, persistent: bool = True) -> None:
        """Register (or replace) a buffer on the module's worker, with ``nn.Module``'s checks
        and errors: the forward there, ``named_buffers()`` and ``state_dict()`` see it."""
        twin = self._twin
        old = twin._buffers.get(name, _NONE)
        was_persistent = name not in twin._non_persistent_buffers_set
        if isinstance(tensor, Tensor):
            tensor = tensor.detach().clone()  # a fetched copy of a remote one, too
        twin.register_buffer(name, tensor, persistent)  # torch's checks, the client's copy
        try:
            self._module_op("register_buffer", name, pack(tensor), persistent=persistent)
        except BaseException:
            if old is _NONE:
                del twin._buffers[name]
            else:
                twin._buffers[name] = old
            (twin._non_persistent_buffers_set.discard if was_persistent
             else twin._non_persistent_buffers_set.add)(name)
            raise

    def _module_op(self, op: str, name: str, value=None, persistent: bool | None = None):
        self._model._hub.request(self._model._owner(self._path), "module_op", {
            "path": self._path, "op": op, "name": name, "value": value,
            "persistent": persistent}, what=f"{op} {name!r} of {self._path!r}")

    def __dir__(self):
        return sorted({*dir(type(self._twin)), *self._twin.__dict__, *self.__dict__})

    def __call__(self, *args, **kwargs):
        """Run this submodule alone on its worker (one tensor in, one out), as calling it in
        one process would; its output's backward goes back to that worker."""
        from disthook.distributed.glue import call_placed

        return call_placed(self._model, self._path, args, kwargs)

    def train(self, mode: bool = True):
        raise NotImplementedError(
            f"train()/eval() of the submodule at {self._path!r} alone: set the mode of the "
            "deployed model (remote.train() or remote.eval())")

    def eval(self):
        return self.train(False)

    def to(self, *args, **kwargs):
        raise NotImplementedError(f"moving or casting the submodule at {self._path!r} of a "
                                  "deployed model: its workers keep it as it was deployed")

    def get_submodule(self, target: str):
        return self._model.get_submodule(f"{self._path}.{target}" if target else self._path)

    def get_parameter(self, target: str):
        return self._model.get_parameter(f"{self._path}.{target}")

    def state_dict(self, *args, destination=None, prefix: str = "", keep_vars: bool = False):
        """The submodule's parameters and buffers, fetched from its worker, with its and its
        children's state-dict hooks run as ``nn.Module.state_dict`` runs them."""
        model = self._model
        if model.__dict__.get("_fetched") is not None:  # inside remote.state_dict()
            return Module.state_dict(self, *args, destination=destination, prefix=prefix,
                                     keep_vars=keep_vars)
        names = [f"{self._path}.{n}" for n in self._twin.state_dict()]
        with model._fetching(model._states(names=names)["state"] if names else {}):
            return Module.state_dict(self, *args, destination=destination, prefix=prefix,
                                     keep_vars=keep_vars)

    def _save_to_state_dict(self, destination, prefix: str, keep_vars: bool) -> None:
        """Its own parameters and persistent buffers, from what was fetched (a parameter
        itself, with keep_vars, is its ``RemoteParameter``)."""
        fetched, twin = self._model.__dict__["_fetched"], self._twin
        for name, p in twin._parameters.items():
            if p is not None:
                full = f"{self._path}.{name}"
                destination[prefix + name] = (RemoteParameter(self._model, full) if keep_vars
                                              else Tensor._make(np.array(fetched[full]), None,
                                                                0))
        for name, b in twin._buffers.items():
            if b is not None and name not in twin._non_persistent_buffers_set:
                destination[prefix + name] = Tensor._make(
                    np.array(fetched[f"{self._path}.{name}"]), None, 0)

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        """Copy tensors into the submodule's parameters and buffers on its worker, with
        torch's checks, hooks and errors."""
        return Module.load_state_dict(self, state_dict, strict=strict, assign=assign)

    def _load_from_state_dict(self, state_dict, prefix: str, local_metadata, strict: bool,
                              missing_keys: list, unexpected_keys: list,
                              error_msgs: list) -> None:
        """As ``nn.Module``'s for its own parameters and persistent buffers, checked against
        their shapes here and copied on its worker in one request."""
        # assign=True: the values land on the worker, as a load; the parameters keep their
        # requires_grad, as torch's assign keeps them (see docs/distributed.md for the rest)
        assign = local_metadata.get("assign_to_params_buffers", False)
        for hook in tuple(self._load_state_dict_pre_hooks.values()):
            hook(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                 error_msgs)
        twin = self._twin
        local = {n: t for n, t in (*twin._parameters.items(), *twin._buffers.items())
                 if t is not None and n not in twin._non_persistent_buffers_set}
        values = {}
        for name, t in local.items():
            key = prefix + name
            if key not in state_dict:
                if strict:
                    missing_keys.append(key)
                continue
            value = state_dict[key]
            if isinstance(value, RemoteParameter):
                value = value.detach()
            value = checked_state_value(value, key, t, error_msgs)
            if value is not None and assign and value.dtype != t.dtype:
                error_msgs.append(  # assign would change the dtype, which a worker keeps
                    f"assign=True for {key}: the deployed parameter or buffer is "
                    f"{t.dtype} on its worker, the checkpoint's is {value.dtype}; a deployed "
                    "model keeps its dtypes (cast the state dict first, or assign=False)")
                continue
            if value is not None:
                values[f"{self._path}.{name}"] = value.detach()._data.astype(t._data.dtype)
        if values:
            self._model._hub.request(self._model._owner(self._path), "set_state",
                                     {"state": values}, what=f"load_state_dict of {self._path!r}")
        if strict:
            note_unexpected(state_dict, prefix, local, twin._modules, unexpected_keys)

    def zero_grad(self, set_to_none: bool = True) -> None:
        params = list(self.parameters())
        if set_to_none:
            RemoteParameter._grad_op(params, "set", grads=[None] * len(params))
        else:
            RemoteParameter._grad_op(params, "scale", 0.0)

    def named_buffers(self, prefix: str = "", recurse: bool = True,
                      remove_duplicate: bool = True):
        """The buffers' current values, fetched (fresh tensors: no two are the same)."""
        mods = self.named_modules(prefix=prefix) if recurse else [(prefix, self)]
        for path, module in mods:
            for name, value in module._buffers.items():
                yield (f"{path}.{name}" if path else name), value

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
        return f"Remote({self._path}: {self._twin!r})"

    __hash__ = object.__hash__
    __eq__ = object.__eq__


_NONE = object()  # no buffer of that name before
_STATE_DICT_HOOKS = ("_state_dict_pre_hooks", "_state_dict_hooks",
                     "_load_state_dict_pre_hooks", "_load_state_dict_post_hooks")
_PROXY_CLASSES: dict[type, type] = {}


class _ProxyType(type):
    """The type of a proxy class: it compares and hashes as the module class it stands for,
    and prints as it, so that tools that pick modules by exact type (``type(m) in
    {nn.ReLU: rule}``, ``type(m) == nn.ReLU``, ``"nn.modules.container" in str(type(m))``:
    Captum's DeepLift) treat a deployed part as its module. ``is`` still tells them apart."""

    def __eq__(cls, other):
        return other is cls or other is cls._kind

    def __hash__(cls):
        return hash(cls._kind)

    def __repr__(cls):
        return repr(cls._kind)


def _proxy_class(kind: type) -> type:
    """The proxy class of a module class: ``RemoteModule`` first (it decides what runs
    where), then the class itself (for isinstance and its plain methods)."""
    cls = _PROXY_CLASSES.get(kind)
    if cls is None:
        meta = type(kind)
        if meta is not type:  # a module class with a metaclass of its own: keep it
            meta = _ProxyType if issubclass(_ProxyType, meta) else meta
        else:
            meta = _ProxyType
        cls = meta(kind.__name__, (RemoteModule, kind),
                   {"__module__": __name__, "_kind": kind,
                    "__qualname__": f"RemoteModule[{kind.__qualname__}]",
                    **container_reads(kind), **container_writes(kind)})
        _PROXY_CLASSES[kind] = cls
    return cls
