"""A deployed model whose forward is its own (any class but ``nn.Sequential`` and its
subclasses that keep its forward): the model's forward code runs here, on the client, as
written, once per call, from the first call on; each placed part runs on its worker when
that code calls it, and functional code between them (``F.relu``, ``torch.flatten``, a
residual ``x + h``) runs here. Nothing is run to find out what a model does.

The client holds the model's own tree (``placed``): calling a placed part sends the
arguments (tensors and plain values, positional and keyword) to the worker holding that
part, which runs it alone and answers with its output (a tensor, or tuples, lists and dicts
of them), whose ``grad_fn`` (a ``RemoteBackward0``) sends the gradients back to that worker.
A module whose parts are on several workers ("split") is the program's own module here: its
forward runs here, its own parameters stay here, and its hooks fire here, as in one
process; so do modules kept on the client whole (stateless ones between placed parts, or
those a placement leaves out).
"""
from __future__ import annotations

import uuid
import warnings
import weakref
from collections import OrderedDict
from typing import TYPE_CHECKING

import numpy as np

from disthook import _dtype, random, wire
from disthook.amp import autocast_mode
from disthook.autograd import grad_mode
from disthook.autograd.saved_hooks import current_pair
from disthook.distributed import (
    async_calls,
    attr_changes,
    changed_args,
    given_tensors,
    remote_values,
)
from disthook.distributed.autograd_node import RemoteBackward0
from disthook.nn.modules.module import Module
from disthook.service.values import custom_view, opaque_in, tensors_in, unpack
from disthook.tensor import Tensor
from disthook.utils.checkpoint import _Frame
from disthook.utils.hooks import RemovableHandle

if TYPE_CHECKING:
    from disthook.distributed.deployment import Deployment

__all__ = ["call_placed", "call_remote", "carry_hooks", "refuse_saved_tensors_hooks",
           "route_node_hooks", "run_until"]


class _Stopped(Exception):
    """Ends a forward once the placed part ``run_until`` asked for answered."""

    def __init__(self, output):
        super().__init__("the forward stopped after the part run_until asked for")
        self.output = output


def run_until(model: Deployment, x: Tensor, path: str):
    """``hooks.run_until`` on a model whose forward runs here: the forward, ended as soon as
    the module at ``path`` gave its output (later parts are not called). A module that runs
    here ends it with a forward hook, as in one process; a placed part, when its call
    answers here. A module inside a placed part runs within that part's call on its worker,
    which cannot stop half way: ``NotImplementedError`` naming the part."""
    from disthook.hooks import stop_after

    stage = model._layout.stage_of(path)
    if stage is None:
        return stop_after(model, path, x)
    part = next(p for p in model._layout.stages[stage] if path == p or path.startswith(p + "."))
    if part != path:
        raise NotImplementedError(
            f"run_until({path!r}): {path!r} runs inside {part!r}, which "
            f"{model._class_name}.forward calls whole on its worker "
            f"({model._owner_name(part)}), so the forward can stop after {part!r} but not "
            f"inside it: run_until(model, x, {part!r}), or deploy with a placement that "
            f"places {path!r} itself")
    object.__setattr__(model, "_stop_at", path)
    try:
        model._local(x)
    except _Stopped as stopped:
        return stopped.output
    finally:
        object.__setattr__(model, "_stop_at", None)
    raise RuntimeError(f"run_until: {path!r} did not run in the forward of "
                       f"{model._class_name}")


# ---- legacy backward hooks on the root -----------------------------------------------------

def route_node_hooks(model: Deployment) -> None:
    """A legacy backward hook on the model runs after the node of the last op of its forward
    (``Module.__call__`` registers it on the output's ``grad_fn``). Where the output is a
    placed part's, that op ran on the part's worker, inside the part's call: a legacy hook
    on every placed part (registered once, before the call), fired there, runs the hooks
    registered on the call's node here (``RemoteBackward0.register_hook``) with that op's
    gradients, as in one process. Not on a part with full backward hooks (a module takes
    one kind or the other): a hook on such a part's call node is refused there
    (``RemoteBackward0.register_hook``), where in one process it sits on another module."""
    if model.__dict__.get("_node_routes") is not None or not model._local._backward_hooks:
        return
    routes = _NodeRoutes([p for paths in model._layout.stages for p in paths
                          if model._local.get_submodule(p)._is_full_backward_hook is not True])

    def run_node_hooks(module, grad_input, grad_output):
        node = routes.nodes.get(model._hub.firing_ctx)  # the call this firing belongs to
        changed = None
        for fn in list(node._routed_hooks.values()) if node is not None else ():
            result = fn(grad_input if changed is None else changed, grad_output)
            if result is not None:
                changed = result
        return changed

    model._add_hooks([("backward", path, run_node_hooks, model.get_submodule(path), {})
                      for path in sorted(routes.paths)])
    object.__setattr__(model, "_node_routes", routes)


def check_full_hooks(model: Deployment, module: Module, path: str) -> None:
    """A full backward hook on a part that runs the model's legacy hooks for it (routed at
    the model's first call, ``route_node_hooks``): the part's worker holds a legacy hook
    there, and a module there takes one kind or the other. Refused with what to do."""
    routes = model.__dict__.get("_node_routes")
    if routes is None or path not in routes.paths or module._is_full_backward_hook is not True:
        return
    module.__dict__["_is_full_backward_hook"] = None  # as before (its handle is removed)
    raise NotImplementedError(
        f"register_full_backward_hook on the deployed part {path!r} after the model was "
        "called with a legacy register_backward_hook on it: that legacy hook runs on the "
        f"worker of {path!r} as a legacy hook of the part, which then cannot take full "
        "backward hooks (in one process the two are on different modules). Register the "
        "part's full backward hooks before the model's first call, or use "
        "register_full_backward_hook on the model too")


class _NodeRoutes:
    """The parts whose worker runs node hooks for the client, and the nodes of their calls
    that hold such hooks, by context (collected with the nodes)."""

    def __init__(self, paths: list[str]):
        self.paths = frozenset(paths)
        self.nodes: weakref.WeakValueDictionary = weakref.WeakValueDictionary()

    def add(self, node: RemoteBackward0, fn) -> RemovableHandle:
        hooks = node.__dict__.setdefault("_routed_hooks", OrderedDict())
        handle = RemovableHandle(hooks)
        hooks[handle.id] = fn
        (ctx_id,) = node._ctx_ids
        self.nodes[ctx_id] = node
        return handle


# ---- hooks registered before the deploy ---------------------------------------------------

# a parameter's hook dicts that go to its worker with it, and the kind each holds
CARRIED_KINDS = (("_backward_hooks", "tensor"), ("_post_acc_hooks", "post_accumulate"))


def carry_hooks(model: Deployment, root: Module) -> None:
    """Tensor hooks and post-accumulate-grad hooks registered before the deploy on the
    parameters now on workers are registered there again, in their order, so that they
    fire there for the client as before. (A placed module's own hooks are carried by its
    placement: ``placed``.)"""
    entries = []
    for path, module in root.named_modules():
        if model._layout.stage_of(path) is None and not (path == "" and model._whole):
            continue
        for p in module._parameters.values():
            for slot, kind in CARRIED_KINDS if p is not None else ():
                for hook_id, fn in (p.__dict__.get(slot) or {}).items():
                    entries.append((hook_id, kind, fn, p))
    if entries:
        from disthook.service import hook_kinds

        # under their handles' ids: a handle taken before removes it there too (hook_sync)
        model._add_hooks([(kind, p._path, fn, p, hook_kinds.options(kind, {}))
                          for _, kind, fn, p in entries], ids=[i for i, *_ in entries])
        carried = model.__dict__.setdefault("_carried_hooks", {})
        for hook_id, _, _, p in entries:
            carried.setdefault(id(p), (weakref.ref(p), set()))[1].add(hook_id)


# ---- one placed part's call ----------------------------------------------------------------

def _fill_inline(output_data, refs: dict) -> None:
    """The small values an answer carried, into the client's tensors that wait for them."""
    if isinstance(output_data, dict):
        if isinstance(output_data.get("kept"), str):
            ref = refs.get(output_data["kept"])
            if ref is not None and ref.value is None:
                ref.value = remote_values.inline_value(output_data)
            return
        for v in output_data.values():
            _fill_inline(v, refs)
    elif isinstance(output_data, list):
        for v in output_data:
            _fill_inline(v, refs)

def call_placed(model: Deployment, path: str, args: tuple, kwargs: dict):
    """Run the part at ``path`` on its worker with these arguments; its output, whose
    tensors' values stay on that worker (``remote_values``) and whose backward goes there."""
    opaque = opaque_in((args, kwargs))
    if opaque:
        raise TypeError(
            f"the deployed module at {path!r} is called with {opaque}, which cannot go to its "
            f"worker ({model._owner_name(path)}): the arguments of a placed module must be "
            "tensors, numbers, strings, None, or tuples, lists and str-keyed dicts of them")
    return call_remote(model, model._addresses[model._stage_of(path)], list(args), kwargs,
                       path=path, what=f"forward of {path!r}")


def refuse_saved_tensors_hooks(what: str) -> None:
    """A placed part's ops run on its worker and save their tensors there, out of reach of the
    ``pack`` and ``unpack`` of a ``saved_tensors_hooks`` context here: they would silently not
    be called where one process calls them, so the call is refused. ``save_on_cpu`` (a copy
    of each tensor on the CPU, where they are anyway) and ``checkpoint``'s own hooks (carried
    to the worker, or its rerun's) are not refused: disthook's hooks that keep the values as
    they are say so with ``keeps_values``."""
    pair = current_pair()
    if pair is None or not grad_mode.is_grad_enabled():
        return
    if isinstance(getattr(pair[0], "__self__", None), _Frame) or \
            getattr(pair[0], "keeps_values", False):
        return
    raise NotImplementedError(
        f"{what} runs on a worker inside saved_tensors_hooks({_name(pair[0])}, "
        f"{_name(pair[1])}): the tensors its ops save stay on the worker, where those hooks "
        "cannot be called (in one process they would be, once per saved tensor). Call the "
        "deployed model outside the saved_tensors_hooks context (the ops that run here can "
        "stay inside it); save_on_cpu() and torch.utils.checkpoint work with deployed parts.")


def _name(fn) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)


def _checkpointing() -> dict | None:
    """Inside ``torch.utils.checkpoint.checkpoint(..., use_reentrant=False)`` (not its rerun):
    how the part is to run checkpointed on its worker, as it would here (its saved tensors
    dropped and recomputed in the backward, its hooks firing again up to the last of them,
    with the random stream it had). The reentrant checkpoint needs nothing: its forward runs
    under no_grad, and its backward calls the function again."""
    pair = current_pair()
    frame = getattr(pair[0], "__self__", None) if pair is not None else None
    if not isinstance(frame, _Frame):
        return None
    return {"early_stop": frame.early_stop, "rng": frame.rng_state is not None}


def _one_more_in_checkpoint(model: Deployment, path: str) -> None:
    """A placed part's call inside the checkpoint running: at the second of one checkpointed
    call, say that their recomputations (each part's on its worker, in its own backward)
    fire the parts' hooks again otherwise than one process, which reruns the whole
    checkpointed function at once, when the backward first needs what it saved."""
    frame = current_pair()[0].__self__
    paths = frame.__dict__.setdefault("_placed_paths", [])
    paths.append(path)
    if len(paths) == 1:
        frame.after_forward.append(lambda: _not_rerun_here(model, frame, paths))
    if len(paths) == 2:
        warnings.warn(
            f"the placed parts {paths[0]!r} and {paths[1]!r} of a deployed model are called "
            "inside one torch.utils.checkpoint: each is recomputed on its own worker, in its "
            "own backward, so their forward hooks fire again in another order than in one "
            "process (which reruns the whole checkpointed function at once, when the backward "
            "first needs what it saved), with early stop not always the same of them, and a "
            "part whose forward changes its buffers recomputes from another state. "
            "Checkpoint each part on its own (checkpoint(layer.__call__, x)) to keep one "
            "process's order", RuntimeWarning, stacklevel=4)


def _not_rerun_here(model: Deployment, frame, paths: list) -> None:
    """The checkpointed function has run: where it is more than a placed part's own call
    and saved nothing here, its code here (the forward of the modules that run on the
    client, their hooks) is not run again in the backward, where one process reruns it;
    said where that code has hooks which one process's rerun fires again: forward
    pre-hooks, and forward hooks (under early stop, which ends the rerun once every saved
    tensor is back, only those with ``always_call``)."""
    from disthook.nn.modules import module as modules

    def again(m) -> bool:
        return bool(m._forward_pre_hooks or (
            m._forward_hooks_always_called if frame.early_stop else m._forward_hooks))

    fn = frame.function
    part = model._local.get_submodule(paths[0])
    if frame.weak_holders or fn is part or getattr(fn, "__self__", None) is part:
        return
    hooked = [repr(name) if name else "the model" for name, m in model._local.named_modules()
              if model._layout.stage_of(name) is None and again(m)]
    if modules._global_forward_pre_hooks or (modules._global_forward_hooks_always_called
                                             if frame.early_stop
                                             else modules._global_forward_hooks):
        hooked.append("the global module hooks")
    if not hooked:
        return
    what = f"a {type(fn).__name__}" if isinstance(fn, Module) else _name(fn)
    many = len(paths) > 1
    warnings.warn(
        f"torch.utils.checkpoint of {what} on a deployed model: of what is called inside "
        "one torch.utils.checkpoint, only the placed "
        f"part{'s' if many else ''} {', '.join(map(repr, dict.fromkeys(paths)))} will be "
        f"recomputed in the backward (on {'their workers' if many else 'its worker'}, "
        f"firing {'their' if many else 'its'} forward hooks again); the rest of the "
        "checkpointed function ran here and is not run again, so the forward hooks of the "
        f"modules on the client ({', '.join(hooked)}) may not fire again as one process's "
        "rerun fires them in the backward. Checkpoint the placed parts themselves "
        "(checkpoint(part, x)) to fire the same hooks as one process",
        RuntimeWarning, stacklevel=4)


def call_remote(model: Deployment, address: str, args: list, kwargs: dict, *,
                path: str | None = None, op: str | None = None, params=None, what: str):
    """One call on the worker at ``address``: the part at ``path``, or the engine's op
    ``op`` with ``params`` (``remote_values.remote_apply``). The output's tensors are kept
    there; their backward goes there. The call returns before its answer where that
    answer's form is known (``async_calls``)."""
    refuse_saved_tensors_hooks(what)
    inputs = list(tensors_in((args, kwargs)))
    stage = model._addresses.index(address)
    grad = grad_mode.is_grad_enabled()
    hub = model._hub
    forms = model.__dict__.setdefault("_forms", async_calls.Forms())
    key = form = None
    region = autocast_mode.region_field()  # this thread's CPU autocast region, if any
    if async_calls.may_go_on(model):
        # (a call inside checkpoint answers in another form: its worker keeps no saved
        # output there)
        key = async_calls.call_key(address, path, op, params, grad, model.training,
                                   _dtype.get_default_dtype().name,
                                   region.get("autocast"),
                                   grad and _checkpointing() is not None, args=(args, kwargs))
        form = forms.get(key)
        if form is not None and form["rng"]:
            form = None  # it draws from the client's stream, which comes back with it
    versions, pin = hub.versions, {}
    if versions is not None:  # others may write it: one version per forward (pinning)
        if versions.writes_pending(hub):
            hub.flush_optimizer_calls()  # numbered writes, each its own
        if versions.before_call(pin):
            form = None  # the forward's first call: its answer pins the forward
    ctx_id = uuid.uuid4().hex
    if form is None:  # what a tensor a hook gets in this call is, or can be differentiated to
        hub.pending_inputs[ctx_id] = inputs
        if grad:
            hub.calls[ctx_id] = {"path": path, "inputs": inputs, "outs": []}
    # the optimizer calls not sent yet of this part's stage ride with it (those of the other
    # stages with their first part's call, or before any other request)
    carried = hub.optimizer_calls_to(address, stage, len(model._addresses))
    fields = {"stage": stage, "inputs": [], "grad_enabled": grad,
              "call": remote_values.pack_args((args, kwargs), address, model),
              "reply_to": hub.reply_to, "keep": True, "optimizer_calls": carried, **pin,
              **_dtype.default_dtype_field()}
    views = [custom_view(t) for t in inputs] if grad else ()
    if any(views):  # custom Functions' views (a full backward hook's): the worker's copy too
        fields["views"] = views
    if op is None:  # (an op on a kept value had its arguments cast here, as autocast casts)
        fields.update(region)
    if hub.firing and hub.firing_ctx is not None:  # from inside a hook of a call there
        fields["within"] = hub.firing_ctx
    if op is None:
        fields.update(path=path, rng=random._stream_state())  # (in eval mode too)
        if grad and (ckpt := _checkpointing()) is not None:
            fields["checkpoint"] = ckpt
            _one_more_in_checkpoint(model, path)
    else:
        fields.update(op=op, params=params)
    call = None
    if form is not None:  # the answer's form is known: go on without it
        made_refs: dict = {}

        def landed(reply):
            result = reply["result"]
            diff = async_calls.differs(form["output"], result["output"])
            if diff is None and result.get("rng") not in (None, fields.get("rng")):
                diff = "it drew random numbers this time"
            if diff is None and result.get("casts") != form.get("casts"):
                diff = "its autocast region cast other tensors this time"
            if diff is None and result.get("changed"):
                forms.put(key, None)  # (the next call with these shapes waits)
                diff = "it changed its arguments in place this time"
            if diff is not None:
                raise RuntimeError(
                    f"{what}: the worker's answer differs from the one the previous call "
                    f"with the same arguments' shapes gave, which the program went on "
                    f"with: {diff}. Values computed from it may be wrong")
            _fill_inline(result["output"], made_refs)
            if result.get("attrs"):  # (late: the next call with these shapes waits)
                forms.put(key, None)
                attr_changes.apply(model, result["attrs"], address=address)

        hub.send_async(address, "forward", fields, ctx_id, what, landed)
        result = {"output": async_calls.with_ids(form["output"], ctx_id),
                  "requires_grad": form["flags"], "casts": form.get("casts")}
    else:
        try:
            (reply,) = hub.request_all([(address, fields, ctx_id)], "forward", what=what,
                                       carries_optimizer_calls=True)
        finally:
            hub.pending_inputs.pop(ctx_id, None)
            call = hub.calls.pop(ctx_id, None)
        result = reply["result"]
        if versions is not None:
            versions.answered(result)
        if result.get("rng"):  # what the part drew (dropout) is drawn here too
            random._set_stream_state(result["rng"])
        if key is not None and not result.get("attrs") and not result.get("changed"):
            forms.put(key, {"output": async_calls.form_of(result["output"]),
                            "flags": result["requires_grad"], "casts": result.get("casts"),
                            "rng": result.get("rng") != fields.get("rng")})
    if carried is not None:
        hub.carried(address, carried[stage])
    flags = result["requires_grad"]
    node = None
    # the hooks' tensors for the outputs, where hooks here were given them as they are:
    # returned as the outputs themselves (one object each, as in one process)
    given = [given_tensors.stand_in_of(hub.stand_ins, ctx_id, name, as_given=True)
             for name in result.get("names") or ()] if grad and any(flags) else []
    given_tensors.drop_taps(hub.taps, ctx_id, given)
    if grad and any(flags):
        node = RemoteBackward0(model, [ctx_id], inputs, None, stage)
        node._path = path if op is None else f"<{op.rpartition('.')[2]}>"
        node._op_params = params
        node._mb = model.__dict__.get("_micro_batch")
        # what its region cast and kept (a weight there, a leaf of the program's): a second
        # call's backward that cast one of them too is refused (autocast_mode.check_one_cast)
        node._casts = [(id(model), address, k) if kind == "w" else ("arg", id(inputs[k]))
                       for kind, k in result.get("casts") or ()]
        node.unreached([result.get("unreached")])  # and parameters of the part
        for k in result.get("cut") or ():  # the part's graph misses its input there
            node.next_functions = (*node._edges[:k], (None, 0), *node._edges[k + 1:])
            node.needs_input_grad = (*node._needs[:k], False, *node._needs[k + 1:])
    else:
        hub.taps.pop(ctx_id, None)  # no graph: nothing to differentiate against
    made = []

    def output(record: dict):
        nr = len(made)
        tracked = node is not None and flags[nr]
        t = remote_values.from_record(model, address, record, node if tracked else None,
                                      nr if tracked else 0)
        if node is not None:
            node._output_meta.append((tuple(record["shape"]),
                                      wire.dtype_named(record["dtype"])))
            if tracked and type(node) is RemoteBackward0:
                node.made_by(record.get("grad_fn"))  # the worker's node's name, as grad_fn
        if form is not None:
            made_refs[record["kept"]] = t.__dict__["_ref"]
        if record.get("argument") is not None:  # the part returned its argument as it is
            t = inputs[record["argument"]]  # (nn.Identity): the program's own tensor
        elif tracked and nr < len(given) and (stand := given[nr]) is not None and (
                stand._data.shape == tuple(record["shape"])
                and stand._data.dtype == wire.dtype_named(record["dtype"])):
            t = given_tensors.become_output(stand, t)
            if record.get("saved"):
                node.saved_output(t, by_its_node=record["saved"] is True)
        made.append(t)
        return t

    out = unpack(result["output"], kept=output, classes=True)
    # what the part's code set on its modules there, its tensors with a graph outputs of
    # this call too (then the next call waits as well, so that the program reads them
    # after the call as in one process)
    attr_changes.apply(model, result.get("attrs"), kept=output)
    # the program's tensors the part changed in place (with a graph: outputs of the call too)
    changed_args.write_back(inputs, result.get("changed"), what, kept=output)
    for k in result.get("saved_args") or () if node is not None else ():
        node.saved_input(inputs[k], k)  # (saved on the worker: a change here is refused)
    if node is not None:
        node._output_meta = tuple(node._output_meta)
    for i, hooks, value in (call or {}).get("outs", ()):
        # tensor hooks the part's own forward hooks put on its output: on the output here
        if i >= len(made) or made[i].shape != value.shape or not np.array_equal(
                made[i]._data, value) or not made[i].requires_grad:
            raise NotImplementedError(
                f"a forward hook of the deployed module at {path!r} put a tensor hook on its "
                "output, and a later hook replaced that output: the hook cannot be kept on "
                "the tensor it was put on. Put it on the replacement (in the later hook)")
        for fn in hooks:
            made[i].register_hook(fn)
    if path is not None and model.__dict__.get("_stop_at") == path:  # run_until ends here
        raise _Stopped(out)
    return out
