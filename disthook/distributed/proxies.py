"""Proxies of a deployed model's parts on the client: ``RemoteModule`` (a submodule by its
path, taking hooks that fire on its worker), ``RemoteParameter`` (a parameter living on its
worker: reads fetch its value, in-place edits run there) and ``RemoteHandle`` (removes a
client hook). Hooks go through the table of hook kinds (``hook_kinds``)."""
from __future__ import annotations

import itertools
from collections import OrderedDict
from typing import TYPE_CHECKING

import numpy as np

from disthook.autograd import grad_mode
from disthook.distributed import hook_kinds
from disthook.distributed.values import pack
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
            return twin.__dict__[name]  # a plain attribute (in_features, eps, ...)
        raise AttributeError(f"'{type(twin).__name__}' object (remote, at {self._path!r}) "
                             f"has no attribute '{name}'")

    def __setattr__(self, name: str, value) -> None:
        twin = self._twin
        if name in twin._parameters or name in twin._modules or name in twin._buffers:
            raise NotImplementedError(
                f"assigning {name!r} of the deployed module at {self._path!r} here: load new "
                "values with load_state_dict, or change it in place under no_grad() "
                f"({self._path}.{name}.copy_(t))")
        object.__setattr__(self, name, value)  # a plain attribute, kept on this proxy

    def __delattr__(self, name: str) -> None:
        object.__delattr__(self, name)

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
        if local_metadata.get("assign_to_params_buffers", False):
            raise NotImplementedError(
                f"load_state_dict(assign=True) on the deployed module at {self._path!r}: its "
                "parameters live on its worker; load values (assign=False)")
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

    def __getitem__(self, idx):
        """A child by position (``blocks[2]``, ``blocks[-1]``), by name (a ModuleDict's
        ``layers["fc"]``), or a list of them by slice."""
        names = list(self._twin._modules)
        if isinstance(idx, str):
            if idx not in names:
                raise KeyError(idx)
            return RemoteModule(self._model, f"{self._path}.{idx}")
        if isinstance(idx, slice):
            return [RemoteModule(self._model, f"{self._path}.{n}") for n in names[idx]]
        return RemoteModule(self._model, f"{self._path}.{names[idx]}")

    def __len__(self) -> int:
        return len(self._twin._modules)

    def __iter__(self):
        return iter(list(self._modules.values()))

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
                    "__qualname__": f"RemoteModule[{kind.__qualname__}]"})
        _PROXY_CLASSES[kind] = cls
    return cls


class RemoteParameter:
    """A parameter of a deployed model, living on its worker. It reads like a tensor (each
    read fetches the current value), takes tensor hooks that fire on the worker, and takes
    in-place updates that run on the worker: under ``no_grad()`` or through ``.data``, as for
    a local parameter (``p.copy_(t)``, ``p.data.fill_(0)``, ``p.requires_grad_(False)``)."""

    def __new__(cls, model: RemoteModel, path: str, *, _data: bool = False):
        # one proxy per parameter (and one for its .data), as torch has one Parameter:
        # identity holds, and walks that skip what they saw by id() see each once
        path = model._canonical.get(path, path)  # tied names are one parameter
        cache = model.__dict__.setdefault("_param_proxies", {})
        proxy = cache.get((path, _data))
        if proxy is None:
            proxy = cache[(path, _data)] = object.__new__(cls)
        return proxy

    def __init__(self, model: RemoteModel, path: str, *, _data: bool = False):
        self._model, self._path, self._is_data = model, model._canonical.get(path, path), _data

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

    @data.setter
    def data(self, value) -> None:
        """``p.data = t``: the worker's parameter takes ``t``'s values (its shape and dtype
        stay what they were deployed with)."""
        if isinstance(value, RemoteParameter):
            value = value.detach()
        if not isinstance(value, Tensor):
            raise TypeError(f"data must be a Tensor, got {type(value).__name__}")
        if value.shape != self.shape:
            raise RuntimeError(f"a deployed parameter keeps its shape: {self._path} is "
                               f"{list(self.shape)}, the new data is {list(value.shape)}")
        self._model._hub.request(self._model._owner(self._path), "set_state", {
            "state": {self._path: value.detach()._data.astype(self._twin._data.dtype)}},
            what=f"{self._path}.data = ...")

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
    def _zero_grads(params: list, set_to_none: bool = True, optimizer=None) -> None:
        """``optimizer.zero_grad()`` of these parameters, on their workers: with the next
        forward where a step of ``optimizer`` made its shares (each share zeroes its own
        parameters), else at once."""
        now = params
        share_id = None if optimizer is None else optimizer.__dict__.get("_remote_share_id")
        if share_id is not None:
            later = set()
            for model, calls in RemoteParameter._share_calls(optimizer, "zero_grad"):
                if share_id in model._hub.made_shares:
                    later.add(id(model))
                    for call in calls.values():
                        call["set_to_none"] = set_to_none
                    model._hub.defer(calls)
            now = [p for p in params if id(p._model) not in later]
        if not now:
            return
        if set_to_none:
            RemoteParameter._grad_op(now, "set", grads=[None] * len(now))
        else:
            RemoteParameter._grad_op(now, "scale", 0.0)

    @staticmethod
    def _optimizer_share(optimizer, action: str, state: dict | None = None):
        """What a local optimizer (any ``disthook.optim.Optimizer``, param groups and all)
        does to its remote parameters: each worker keeps a share of it, made with the same
        class and defaults over the parameters it holds, and gets the groups' current
        hyperparameters with every call. ``action``: "step" (the first over a deployment
        makes the shares, the later ones ride with its next forward); "state" (each
        parameter's state: {parameter: {key: value}}); "load" (``state``, the same shape,
        into the shares)."""
        out = {}
        for model, calls in RemoteParameter._share_calls(optimizer, action):
            share_id = next(iter(calls.values()))["id"]
            if action == "step" and share_id in model._hub.made_shares:
                model._hub.defer(calls)
                continue
            if action == "load":
                for call in calls.values():
                    call["state"] = {"param_groups": [], "state": {
                        p._path: {k: _array_of(v) for k, v in value.items()}
                        for p, value in (state or {}).items()
                        if p._model is model and p._path in call["params"]}}
            replies = model._hub.request_all([(address, {"optimizer": call})
                                              for address, call in calls.items()],
                                             "step", what=f"optimizer {action}")
            if action in ("step", "load"):  # the shares exist now
                model._hub.made_shares.add(share_id)
            if action == "state":
                for reply in replies:
                    for path, value in reply["result"]["state"].items():
                        out[RemoteParameter(model, path)] = {
                            k: Tensor._make(np.array(v), None, 0) if isinstance(v, np.ndarray)
                            else v for k, v in value.items()}
        return out

    @staticmethod
    def _share_calls(optimizer, action: str) -> list[tuple]:
        """(model, {address: optimizer_call}) of ``action`` on the shares of ``optimizer``,
        per model of its remote parameters."""
        share_id = optimizer.__dict__.get("_remote_share_id")
        if share_id is None:
            share_id = optimizer._remote_share_id = next(_optimizer_share_ids)
        kind = type(optimizer)
        from disthook import optim

        name = kind.__name__ if getattr(optim, kind.__name__, None) is kind else \
            f"{kind.__module__}:{kind.__qualname__}"
        kwargs = {k: _hyperparameter(k, v) for k, v in optimizer.defaults.items()}
        models: dict[int, tuple] = {}  # id(model) -> (model, {address: (names, groups)})
        for index, group in enumerate(optimizer.param_groups):
            hyper = {k: _hyperparameter(k, v) for k, v in group.items()
                     if k not in ("params", "param_names")}
            for p in group["params"]:
                if not isinstance(p, RemoteParameter):
                    continue
                model, shares = models.setdefault(id(p._model), (p._model, {}))
                names, groups = shares.setdefault(model._owner(p._path), ([], []))
                if not groups or groups[-1]["index"] != index:
                    groups.append({"index": index, "params": [], "hyper": hyper})
                names.append(p._path)
                groups[-1]["params"].append(p._path)
        return [(model, {address: {"id": share_id, "class": name, "kwargs": kwargs,
                                   "params": names, "groups": groups, "action": action}
                         for address, (names, groups) in shares.items()})
                for model, shares in models.values()]

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
        """As torch prints a parameter (its current value, fetched): a program prints what
        it prints in one process (``remote.workers()`` says where each part lives)."""
        try:
            value = self.detach()
        except Exception:  # noqa: BLE001 - closed, or its worker is gone: say what it was
            return f"RemoteParameter({self._path}, shape={tuple(self.shape)}, unreachable)"
        return f"Parameter containing:\n{value.requires_grad_(self.requires_grad)!r}"


_optimizer_share_ids = itertools.count(1 << 20)  # apart from DistributedOptimizer's ids


def _hyperparameter(name: str, value):
    """A hyperparameter as it travels: numbers, bools, strings, None, and lists of them."""
    if value is None or type(value) in (bool, int, float, str):
        return value
    if isinstance(value, (tuple, list)) and all(
            v is None or type(v) in (bool, int, float, str) for v in value):
        return list(value)
    if isinstance(value, Tensor) and value.numel() == 1:
        return value.item()
    raise TypeError(f"the optimizer's {name!r} is a {type(value).__name__}; the workers that "
                    "step a deployed model's parameters take numbers, bools, strings and "
                    "lists of them")


def _array_of(value):
    return value.detach()._data if isinstance(value, Tensor) else value


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

