"""An attached client's model follows what its deployer changes beyond the weights' values:
each module's mode and plain attributes, each parameter's and buffer's dtype and
``requires_grad``, buffers registered or deleted (and their persistence). Only the deployer
may change these (docs/security.md); each change counts on the stage it touches
(``Stage.form``, see workers/form.py), and every answer of a forward, part call or
backward an attached client makes (and every hook event a stage sends it) carries the
revisions of the stages it passed. When one differs from the revision this client holds,
the client asks those stages for their form (``form``) and sets its model so before the
answer goes to the program (before the hook runs). At attach it takes the current form
(not the deploy's)."""
from __future__ import annotations

import numpy as np

import disthook
from disthook.distributed import async_calls
from disthook.distributed.adopting import adopt_buffer, retype
from disthook.distributed.own_tensors import set_deployed
from disthook.distributed.parameters import (
    _SLOT_DATA,
    _SLOT_REQUIRES_GRAD,
    RemoteBuffer,
    RemoteParameter,
)
from disthook.tensor import Tensor

__all__ = ["check", "follow", "refresh"]


def follow(dep) -> None:
    """``dep`` (an attached client's deployment) takes each stage's form now, and again
    whenever an answer says a stage changed (``Hub.on_forms``, after the request)."""
    hub = dep._hub
    hub.on_forms = lambda: refresh(dep, sorted(
        int(s) for s, rev in hub.forms.items() if hub.forms_held.get(s) != rev))
    refresh(dep, range(len(dep._addresses)))


def refresh(dep, stages) -> None:
    """Ask ``stages`` for their form and set the model here so (one request to each)."""
    stages = list(stages)
    if not stages:
        return
    hub = dep._hub
    async_calls.forget(dep)  # an answer's form may change with the model's
    replies = hub.request_all([(dep._addresses[i], {}) for i in stages], "form",
                              what="the shared model's mode, dtypes and buffers")
    for reply in replies:
        form = reply["result"]
        _apply(dep, form)
        key = str(form["stage"])
        hub.forms_held[key] = hub.forms[key] = form["revision"]


def check(dep) -> None:
    """Before a call whose forward runs here: the first stage's form, taken if it changed
    (the deployer's modules here may have changed mode since this client's last answer,
    and one of them may run before any placed part does). Asked only where the code of a
    module here reads a mode (``self.training``: a dropout's, a forward's own): the request
    waits for the calls in flight, which would otherwise run on without waiting."""
    from disthook.distributed.code_changes import mentions

    reads = dep.__dict__.get("_reads_modes")
    if reads is None:
        reads = dep.__dict__["_reads_modes"] = any(
            mentions(type(m), "training") for path, m in dep._local.named_modules()
            if dep._layout.stage_of(path) is None)
    if not reads:
        return
    hub = dep._hub
    form = hub.request(dep._addresses[0], "form", {},
                       what="the shared model's mode, dtypes and buffers")["result"]
    key = str(form["stage"])
    if hub.forms_held.get(key) != form["revision"]:
        async_calls.forget(dep)  # an answer's form may change with the model's
        _apply(dep, form)
        hub.forms_held[key] = hub.forms[key] = form["revision"]


def _apply(dep, form: dict) -> None:
    model, layout, stage = dep._local, dep._layout, form["stage"]
    modules = dict(model.named_modules(remove_duplicate=False))
    for path, mode in form["modes"].items():
        if path and path in modules and layout.stage_of(path) == stage:
            modules[path].__dict__["training"] = mode
    client = form.get("client") or {}
    if "" in form["modes"]:  # the model's mode (every stage's root has it), for those here
        for path, module in modules.items():  # (those the deployer sent modes of: below)
            if path == "" or (layout.stage_of(path) is None and not client):
                module.__dict__["training"] = form["modes"][""]
    if client:  # the deployer's modes of its modules here: those it changed since last seen
        seen = dep.__dict__.get("_client_modes_seen")
        for path, mode in client.items():
            if path in modules and layout.stage_of(path) is None and (
                    seen is None or seen.get(path) != mode):
                modules[path].__dict__["training"] = mode
        dep.__dict__["_client_modes_seen"] = dict(client)
    _apply_attrs(dep, modules, stage, form.get("attrs") or {})
    tensors = {**dict(model.named_buffers(remove_duplicate=False)),
               **dict(model.named_parameters(remove_duplicate=False))}
    for name, (dtype_name, shape, requires_grad, persistent) in form["tensors"].items():
        dtype = getattr(disthook, dtype_name).np
        t = tensors.get(name)
        if t is None:
            t = _new_buffer(dep, modules, name, dtype, shape)
        elif _SLOT_DATA.__get__(t).dtype != dtype:
            retype(t, dtype)
        if isinstance(t, RemoteParameter):
            _SLOT_REQUIRES_GRAD.__set__(t, bool(requires_grad))
        elif isinstance(t, RemoteBuffer):
            path, _, leaf = name.rpartition(".")
            gone = modules[path].__dict__["_non_persistent_buffers_set"]
            (gone.discard if persistent else gone.add)(leaf)
    for name, t in tensors.items():  # buffers deleted there
        if (isinstance(t, RemoteBuffer) and name not in form["tensors"]
                and layout.stage_of(name) == stage):
            path, _, leaf = name.rpartition(".")
            set_deployed(modules[path].__dict__["_buffers"], leaf)
            modules[path].__dict__["_non_persistent_buffers_set"].discard(leaf)


def _apply_attrs(dep, modules: dict, stage: int, attrs: dict) -> None:
    """The placed modules' plain attributes that changed there since the last form this
    client took (all of them at attach): a flag this client set on its own copy stays,
    unless the deployer changes it too."""
    before = dep.__dict__.setdefault("_form_attrs", {})
    last = before.get(stage)
    for path, values in attrs.items():
        module = modules.get(path)
        if module is None or dep._layout.stage_of(path) != stage:
            continue  # (a holder of placed parts: the model's own module is here)
        seen = {} if last is None else last.get(path, {})
        for name, value in values.items():
            if last is None or seen.get(name, _MISSING) != value:
                module.__dict__[name] = value
    before[stage] = attrs


_MISSING = object()


def _new_buffer(dep, modules: dict, name: str, dtype, shape) -> RemoteBuffer:
    """A buffer the deployer registered since: placed here as the others are."""
    path, _, leaf = name.rpartition(".")
    t = Tensor._make(np.broadcast_to(np.zeros((), dtype), tuple(shape)), None, 0)
    set_deployed(modules[path].__dict__["_buffers"], leaf, t)
    return adopt_buffer(t, dep, name)
