"""A deployed model is the user's own model, placed: ``deploy`` leaves every module and
tensor object where the program holds it and gives each placed module a placement (the
``nn.Module`` interface ``Placement``) and each of its parameters and buffers a storage on
its worker (``adopting.adopt``). Nothing else of the model changes: its classes, its
identities, its plain attributes, its hook dicts.

- ``PartPlacement``: a module that lives on a worker, with everything under it. Calling it
  runs it there (``glue.call_placed``); the hooks in its own dicts are registered there too
  (``sync_hooks``: registering and removing them as the program does, through its handles,
  or by editing the dicts, is carried there before the next call); writes (attributes,
  buffers, mode, state) are carried out there; what would change its children refuses.
- ``RootPlacement``: the model itself. Its hooks fire here; its forward is the chain of
  stages, the part placed whole, or its own forward run here (each placed part on its
  worker), as the deployment decided; the deployment's methods (``save``, ``train_step``,
  ``workers``, ``close`` ...) are answered on it where its class has no such name.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from disthook.autograd import grad_mode
from disthook.distributed import async_calls, attr_changes, code_changes, state_entries
from disthook.distributed.adopting import adopt_buffer, retype
from disthook.distributed.data_views import unshare
from disthook.distributed.hook_sync import sync_all, sync_hooks
from disthook.distributed.own_tensors import set_deployed
from disthook.distributed.parameters import RemoteStorage
from disthook.nn.modules.module import (
    HOOK_DICTS,
    Module,
    Placement,
    checked_state_value,
    note_unexpected,
    placement_of,
)
from disthook.service.values import opaque_in, pack
from disthook.tensor import Tensor
from disthook.utils.hooks import RemovableHandle

if TYPE_CHECKING:
    from disthook.distributed.deployment import Deployment
    from disthook.distributed.placing import _Children

__all__ = ["PartPlacement", "RemoteHandle", "RootPlacement", "deployment_of"]

# what a deployed model answers for its deployment (where its class has no such name)
DEPLOYMENT_API = frozenset({
    "save", "load_checkpoint", "recover", "train_step", "close", "workers", "to_local",
    "named_gradients", "step_stats", "stats"})


def deployment_of(module) -> Deployment | None:
    """The deployment ``module`` belongs to (placed part or model), or None."""
    placement = placement_of(module)
    return placement.deployment if isinstance(placement, _Placed) else None


class _Placed(Placement):
    def __init__(self, deployment: Deployment, path: str, aliases: tuple = ()):
        self.deployment, self.path = deployment, path
        self.aliases = aliases  # the other paths the module is reached under (Sequential's)
        self.here: set[str] = set()  # what was set here that its worker's copy lacks

    def swapped(self, module: Module, name: str, swapped: bool) -> None:
        """functional_call's tensor in place of ``name``: the forward runs here meanwhile."""
        self._mark(f"{name} (swapped by functional_call)", swapped)

    def children_changed(self, children: _Children) -> None:
        """The module's children are no longer (or again) those it was deployed with: its
        forward runs here, a child set here runs here, the deployed ones on their workers."""
        now, was = list(children.items()), list(children.original.items())
        self._mark("its children", len(now) != len(was) or any(
            a != b or m is not n for (a, m), (b, n) in zip(now, was)))

    def change_structure(self, module: Module, what: str) -> None:
        """A parameter registered, replaced or deleted here (``what``): the module's forward
        runs here from now on, with the tensor here (see ``forward_for``)."""
        self._mark(what, True)

    def _mark(self, name: str, changed: bool) -> None:
        """``name`` of this module is (or is no longer) set here in a form its worker's copy
        lacks; the deployment keeps the paths that have one (``changed_here``)."""
        (self.here.add if changed else self.here.discard)(name)
        paths = self.deployment.__dict__.setdefault("_changed_here", set())
        for path in (self.path, *self.aliases):  # a parent calling it by another name
            (paths.add if self.here else paths.discard)(path)

    def detached(self, module: Module, state: dict) -> dict:
        state.pop("_placement", None)
        return state

    def loading(self, module: Module):
        """A load_state_dict is one write (one commit), where writes are numbered."""
        from disthook.distributed.pinning import one_write

        return one_write(self.deployment)

    def __deepcopy__(self, memo):
        return None

    def __reduce__(self):
        return (type(None), ())

    def __repr__(self) -> str:
        return f"<placed {self.path or 'model'} of {self.deployment._model_id}>"


class PartPlacement(_Placed):
    """A module that lives on a worker (see the module's doc). ``shared``: the plain
    attributes its worker's copy has (those it was deployed with, and those set since
    through it); any other attribute set here is the client's own."""

    def __init__(self, deployment: Deployment, path: str, shared: set | None = None,
                 aliases: tuple = ()):
        super().__init__(deployment, path, aliases)
        self.shared = set() if shared is None else shared

    def forward_for(self, module: Module, args: tuple = (), kwargs: dict | None = None):
        """The whole call runs on the worker (None), unless something the worker's copy
        lacks was set here on this module or one inside it: a forward
        (``module.forward = wrapper``, as accelerate and patching tools do) or a method
        its forward calls (``attn._attn = my_attention``), or a tensor put in place of one
        of its parameters or buffers by ``functional_call``. Then its forward runs here
        between its hooks, as in one process; what that calls of the module's own (its
        class's forward, its children) runs on their workers or reads from them. So does
        a call given an object that cannot travel (a generation loop's KV-cache object,
        whose ``update`` the layer calls): it stays the program's, changed where it is."""
        if changed_here(module) or opaque_in((args, kwargs or {})):
            return module.forward
        return None

    def call(self, module: Module, args: tuple, kwargs: dict):
        from disthook.distributed.glue import call_placed

        sync_all(self.deployment)
        return call_placed(self.deployment, self.path, args, kwargs)

    def hooks_changed(self, module: Module) -> None:
        from disthook.distributed.glue import check_full_hooks
        check_full_hooks(self.deployment, module, self.path)
        sync_hooks(self.deployment, module, self.path)

    def set_attr(self, module: Module, name: str, value) -> bool:
        d = module.__dict__
        if name in ("_modules", "_parameters", "_buffers"):
            self.change_structure(module, f"replacing {name}")
            return False
        if name in HOOK_DICTS or name == "_is_full_backward_hook":
            object.__setattr__(module, name, value)  # a hook dict replaced: what it holds
            sync_hooks(self.deployment, module, self.path)
            return True
        if name in d["_buffers"] and (value is None or isinstance(value, Tensor)):
            self.register_buffer(module, name, value,
                                 name not in d["_non_persistent_buffers_set"])
            return True
        if name in d["_modules"] or isinstance(value, Module):
            return False  # its children change (_Children): its forward runs here
        if name in d["_parameters"]:
            if value is not d["_parameters"][name]:  # a tensor of its own: used here
                self.change_structure(module, f"parameter {name!r}")
            return False
        if _set_by_class(module, name) and code_changes.changed(self.deployment, module):
            return False  # a property of the class it has now, not of its worker's copy
            # (register_parametrization's ``weight``): its setter runs here
        if name in self.shared or _on_class(module, name):  # what the worker's code reads
            if isinstance(value, Tensor) and value.grad_fn is not None:
                self._recomputed(module, name)
                return False  # kept here, with its graph
            if opaque_in(value) is None:
                self._module_op("set_attr", name, pack(value))
                object.__setattr__(module, name, value)
                self.shared.add(name)
                attr_changes.watch(self.deployment, module, name)  # (a list changed later)
                self._mark(name, False)
                return True
            self._mark(name, True)  # a function, say: the module's forward runs here now
        elif ((value is None or type(value) in (bool, int, float, str))
              and not self.deployment._hub.firing):
            # a flag of the program's (model.apply(fn), a named_modules() walk), which the
            # forward may read (getattr(self, name, default)): its worker's copy has it too
            # (a hook's bookkeeping while a call runs stays here, as on an attached model)
            if self.deployment._attached:
                attr_changes.flag_stays(self.deployment, name)
                return False
            self._module_op("set_attr", name, value)
            object.__setattr__(module, name, value)
            self.shared.add(name)
            return True
        elif (callable(value) and not self.deployment._hub.firing
              and code_changes.mentions(type(module), name)):
            self._mark(name, True)  # a function its code calls (getattr(self, name, f)),
            # which its worker's copy cannot hold: its forward runs here from now on
        return False  # the client's own (a new attribute, or one that cannot travel)

    def extend_attr(self, name: str, start: int, items: list) -> None:
        """The list ``name`` the worker's copy shares grew here from ``start`` items."""
        self._module_op("extend_attr", name, pack([start, items]))

    def _recomputed(self, module: Module, name: str) -> None:
        """``name`` is set here to a tensor with a graph (a reparametrization's forward
        pre-hook: weight_norm, spectral_norm, pruning), which cannot go to the worker with
        it: the module's forward runs here from now on, where that graph is."""
        there = not changed_here(module)
        self._mark(name, True)
        if there and self.deployment._hub.firing:
            raise RuntimeError(
                f"a hook set {name!r} of the deployed module at {self.path!r} to a tensor "
                "with a graph (as weight_norm's, spectral_norm's and pruning's hooks do) "
                "while the module computed on its worker, where that graph cannot go: this "
                "call would have used the value it had before and given it no gradient. The "
                "module computes here from now on: call the model again")

    def del_attr(self, module: Module, name: str) -> bool:
        d = module.__dict__
        if name in d["_parameters"]:
            self.change_structure(module, f"parameter {name!r}")
            return False
        if name in d["_modules"]:
            return False  # its children change (_Children): its forward runs here
        self._mark(name, False)
        if name in d["_buffers"]:
            self._module_op("del_attr", name)
            set_deployed(d["_buffers"], name)
            d["_non_persistent_buffers_set"].discard(name)
            return True
        if name in self.shared and name in d:
            self._module_op("del_attr", name)
            del d[name]
            self.shared.discard(name)
            return True
        return False

    def register_buffer(self, module: Module, name: str, tensor, persistent: bool) -> None:
        """The buffer goes to the module's worker (its value) and stays here placed."""
        if isinstance(tensor, RemoteStorage):
            tensor = tensor.detach()
        if isinstance(tensor, Tensor):
            tensor = tensor.detach().clone()
        self._module_op("register_buffer", name, pack(tensor), persistent=persistent)
        d = module.__dict__
        set_deployed(d["_buffers"], name, None if tensor is None else
                     adopt_buffer(tensor, self.deployment, self._full(name)))
        (d["_non_persistent_buffers_set"].discard if persistent
         else d["_non_persistent_buffers_set"].add)(name)

    def train(self, module: Module, mode: bool) -> None:
        self._module_op("train", "training", mode)
        for m in module.modules():
            m.__dict__["training"] = mode

    def apply(self, module: Module, fn) -> None:
        """``to(dtype)``, ``double()``, ``half()`` ...: the tensors whose dtype changes are
        converted on the worker, in place as in one process (``parameters.retype``). A
        module whose children or parameters changed here: its own tensors so, each child
        by its own ``_apply`` (those set here converted here)."""
        tensors = [*module.named_parameters(), *module.named_buffers()]
        if not all(isinstance(t, RemoteStorage) for _, t in tensors) or not all(
                isinstance(placement_of(m), PartPlacement)
                for m in module.modules()):
            d = module.__dict__
            mine = {n: t for n, t in (*d["_parameters"].items(), *d["_buffers"].items())
                    if t is not None}
            tensors = [(n, t) for n, t in mine.items() if isinstance(t, RemoteStorage)]
            Module._apply(_without_placement(module, mine), fn, recurse=False)
            for child in module.children():
                child._apply(fn)
        changes = {}
        for name, t in tensors:
            out = fn(Tensor._make(np.zeros(1, t._twin._data.dtype), None, 0))
            if out.dtype != t.dtype:
                changes[name] = (t, out._data.dtype)
        if changes:
            self._module_op("convert", "", pack({n: d.name for n, (_, d) in changes.items()}))
            for t, dtype in changes.values():
                retype(t, dtype)

    def save_state(self, module: Module, destination, prefix: str, keep_vars: bool) -> None:
        d = module.__dict__
        own = [(n, t) for n, t in d["_parameters"].items() if t is not None]
        own += [(n, t) for n, t in d["_buffers"].items()
                if t is not None and n not in d["_non_persistent_buffers_set"]]
        fetched = _fetched(self.deployment, [t._path for _, t in own if
                                             isinstance(t, RemoteStorage)])
        for name, t in own:
            if keep_vars:
                destination[prefix + name] = t
            elif isinstance(t, RemoteStorage):  # its storage: read from the worker, written
                destination[prefix + name] = state_entries.entry(t, fetched[t._path])  # there
            else:
                destination[prefix + name] = t.detach()
        if module._has_extra_state("get_extra_state"):
            destination[prefix + "_extra_state"] = module.get_extra_state()

    def load_state(self, module: Module, state_dict, prefix: str, local_metadata,
                   missing_keys: list, unexpected_keys: list, error_msgs: list,
                   strict: bool) -> None:
        """Its own parameters and persistent buffers, checked here against their shapes and
        copied on its worker in one request (``assign=True`` loads the values there: the
        deployed tensors keep their dtypes and ``requires_grad``, as torch's assign keeps
        ``requires_grad``)."""
        assign = local_metadata.get("assign_to_params_buffers", False)
        d = module.__dict__
        local = {n: t for n, t in (*d["_parameters"].items(), *d["_buffers"].items())
                 if t is not None and n not in d["_non_persistent_buffers_set"]}
        values = {}
        for name, t in local.items():
            key = prefix + name
            if key not in state_dict:
                if strict:
                    missing_keys.append(key)
                continue
            value = state_dict[key]
            if isinstance(value, RemoteStorage):
                value = value.detach()
            value = checked_state_value(value, key, t, error_msgs)
            if value is not None and assign and value.dtype != t.dtype:
                error_msgs.append(
                    f"assign=True for {key}: the deployed parameter or buffer is {t.dtype} on "
                    f"its worker, the checkpoint's is {value.dtype}; a deployed model keeps its "
                    "dtypes (cast the state dict first, or assign=False)")
                continue
            if value is not None and not isinstance(t, RemoteStorage):  # set here
                with grad_mode.no_grad():
                    t.copy_(value)
            elif value is not None:
                values[self._full(name)] = value.detach()._data.astype(
                    t._twin._data.dtype)
        if values:
            if assign:  # the tensors take new memory in one process: a .data taken before
                unshare([t for n, t in local.items() if self._full(n) in values])
            dep = self.deployment
            dep._hub.write_all([(dep._owner(self.path), "set_state", {"state": values})],
                               what=f"load_state_dict of {self.path!r}")
        if strict:
            note_unexpected(state_dict, prefix, local, d["_modules"], unexpected_keys)

    def _full(self, name: str) -> str:
        """The model's name of the module's own ``name`` (the module may be the model)."""
        return f"{self.path}.{name}" if self.path else name

    def _module_op(self, op: str, name: str, value=None, persistent: bool | None = None):
        dep = self.deployment
        async_calls.forget(dep)  # an answer's form may change with the module
        dep._hub.request(dep._owner(self.path), "module_op", {
            "path": self.path, "op": op, "name": name, "value": value,
            "persistent": persistent}, what=f"{op} {name!r} of {self.path!r}")


def _on_class(module: Module, name: str) -> bool:
    """Whether ``name`` is an attribute of the module's class (a method, a default)."""
    return not name.startswith("__") and any(name in k.__dict__ for k in type(module).__mro__)


def _set_by_class(module: Module, name: str) -> bool:
    """Whether ``module.name = value`` runs code of the module's class (a property's
    setter, any data descriptor)."""
    for k in type(module).__mro__:
        if name in k.__dict__:
            return hasattr(type(k.__dict__[name]), "__set__")
    return False


def changed_here(module: Module) -> bool:
    """Whether ``module`` (the model, or a placed part) or a module inside it had something
    set here since the deploy that its worker's copy lacks (``PartPlacement.forward_for``):
    a forward, a method or value its forward reads that cannot travel, or a tensor that
    functional_call put in place of one of its own."""
    placement = placement_of(module)
    if placement is None:
        return False
    code_changes.check(placement.deployment)  # its class swapped or patched since
    changed = placement.deployment.__dict__.get("_changed_here")
    path = placement.path
    if not path:  # the model: its own forward set on it (it runs here), or any part's
        return bool(changed) or "forward" in module.__dict__
    return bool(changed) and any(p == path or p.startswith(path + ".") for p in changed)


class RootPlacement(_Placed):
    """The deployed model itself (see the module's doc)."""

    def forward_for(self, module: Module, args: tuple = (), kwargs: dict | None = None):
        dep = self.deployment
        sync_all(dep)
        dep.__dict__.pop("_legacy_now", None)  # (one an earlier call left: legacy_backward_hooks)
        if module._is_full_backward_hook is False and module._backward_hooks:
            dep._route_root_legacy_hooks()
        # its own forward here, each placed part on its worker: a model of its own forward,
        # or a chain where something its workers' copies lack was set on a module (a
        # forward, a method, functional_call's tensors: see PartPlacement's), which the
        # stages passing activations among themselves would not see
        if dep._glue or changed_here(module):
            from disthook.distributed.pinning import spanned

            if dep._attached:  # the deployer's modes of the modules whose forward runs here
                from disthook.distributed.shared_form import check

                check(dep)
            if dep._chunks > 1:
                from disthook.distributed.micro_batches import chunked_forward

                return spanned(dep, chunked_forward(dep, module.forward))
            return spanned(dep, module.forward)
        return dep.forward

    def legacy_backward_hooks(self, module: Module, hooks: list) -> list:
        """A chain's legacy hooks fire on the worker of its last op (routed), not here:
        those of this call, kept for its output's node (``Deployment.forward``)."""
        if self.deployment._glue:
            return hooks
        self.deployment.__dict__["_legacy_now"] = list(hooks)
        return []

    def register_buffer(self, module: Module, name: str, tensor, persistent: bool) -> None:
        if self.deployment._whole:
            PartPlacement(self.deployment, "").register_buffer(module, name, tensor,
                                                              persistent)
            return
        d = module.__dict__  # the model's own buffers stay here
        d["_buffers"][name] = tensor
        (d["_non_persistent_buffers_set"].discard if persistent
         else d["_non_persistent_buffers_set"].add)(name)

    def train(self, module: Module, mode: bool) -> None:
        self.deployment.train(mode)

    def apply(self, module: Module, fn) -> None:
        for child in module.children():
            child._apply(fn)
        if self.deployment._whole:
            PartPlacement(self.deployment, "").apply(module, fn)
            return
        d = module.__dict__
        detached = {k: v for k, v in d.items() if k != "_placement"}
        plain = object.__new__(type(module))
        plain.__dict__.update(detached)
        plain.__dict__["_modules"] = {}
        Module._apply(plain, fn)  # the model's own tensors are here: converted as usual
        d["_buffers"].update(plain.__dict__["_buffers"])

    def save_state(self, module: Module, destination, prefix: str, keep_vars: bool) -> None:
        if self.deployment._whole:
            PartPlacement(self.deployment, "").save_state(module, destination, prefix,
                                                          keep_vars)
            return
        plain = _without_placement(module)
        Module._save_to_state_dict(plain, destination, prefix, keep_vars)

    def load_state(self, module: Module, state_dict, prefix: str, local_metadata,
                   missing_keys: list, unexpected_keys: list, error_msgs: list,
                   strict: bool) -> None:
        if self.deployment._whole:
            PartPlacement(self.deployment, "").load_state(
                module, state_dict, prefix, local_metadata, missing_keys, unexpected_keys,
                error_msgs, strict)
            return
        plain = _without_placement(module)
        hooks = plain.__dict__["_load_state_dict_pre_hooks"]
        plain.__dict__["_load_state_dict_pre_hooks"] = {}  # they ran already
        try:
            Module._load_from_state_dict(plain, state_dict, prefix, local_metadata, strict,
                                         missing_keys, unexpected_keys, error_msgs)
        finally:
            plain.__dict__["_load_state_dict_pre_hooks"] = hooks

    def attribute(self, module: Module, name: str):
        if name in DEPLOYMENT_API:
            return getattr(self.deployment, name)
        raise AttributeError(name)


def _without_placement(module: Module, local: dict | None = None) -> Module:
    """A view of ``module`` without its placement, sharing its dicts (its own tensors and
    children), for ``Module``'s default handling of what is here. ``local``: only those of
    its own tensors that are here (no children), each written back where it came from."""
    plain = object.__new__(type(module))
    plain.__dict__.update({k: v for k, v in module.__dict__.items() if k != "_placement"})
    if local is not None:
        d = module.__dict__
        plain.__dict__["_modules"] = {}
        plain.__dict__["_parameters"] = _Here(d["_parameters"], local)
        plain.__dict__["_buffers"] = _Here(d["_buffers"], local)
    return plain


class _Here(dict):
    """Of a module's own ``tensors``, those here (not on its worker); a write goes to the
    module's dict it came from (``Module._apply`` replaces buffers)."""

    def __init__(self, tensors: dict, local: dict):
        super().__init__({n: t for n, t in tensors.items() if n in local
                          and not isinstance(t, RemoteStorage)})
        self.source = tensors

    def __setitem__(self, name, value):
        super().__setitem__(name, value)
        self.source[name] = value


def _fetched(dep: Deployment, names: list[str]) -> dict:
    """Values of ``names`` (placed tensors of one module: one worker): from the state the
    deployment fetched for what is running now, else asked for in one request."""
    if not names:
        return {}
    cache = dep.__dict__.get("_fetched")
    if cache is not None and all(n in cache for n in names):
        return cache
    return dep._states(names=names)["state"]


class RemoteHandle(RemovableHandle):
    """Removes a client hook from the worker that fires it (idempotent, a context manager);
    a ``RemovableHandle`` like any other, so tools that check for one accept it."""

    def __init__(self, model: Deployment, hook_id: int, path: str):
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
