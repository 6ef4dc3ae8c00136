"""The requests that read or change a stage's parameters, buffers and optimizer shares."""
from __future__ import annotations

import time

import numpy as np

import disthook
from disthook import wire
from disthook.optim.optimizer import differentiating_step
from disthook.service.loop import NO_REPLY
from disthook.service.values import unpack
from workers import attr_changes, form
from workers.versions import note_pins, note_write

__all__ = ["ParamHandlers"]


class ParamHandlers:
    """Parameter, state and optimizer requests of ``Worker`` (a mixin)."""

    def on_get_state(self, job):
        """The stage's parameters and buffers, and the parameters' gradients, by full name."""
        st = self._stage(job)
        names = job.msg.get("names")
        state = {name: t.detach()._data for name, t in st.module.state_dict().items()
                 if names is None or name in names}
        if names is not None:  # asked by name: non-persistent buffers too
            state.update({name: t.detach()._data for name, t in st.module.named_buffers()
                          if name in names and name not in state})
        grads = {name: p.grad.detach()._data for name, p in st.module.named_parameters()
                 if p.grad is not None and (names is None or name in names)}
        unknown = [] if names is None else [n for n in names if n not in state]
        if unknown:
            raise KeyError(f"{st.name} has no parameters or buffers {unknown}")
        return {"stage": st.index, "state": state, "grads": grads}

    def on_form(self, job):
        """What the stage is beyond its weights' values (``workers.form.describe``)."""
        return form.describe(self._stage(job))

    def on_param_op(self, job):
        """An in-place method of a parameter (``fill_``, ``copy_``, ``requires_grad_``, ...),
        run without autograd as ``p.data.<op>(*args)`` would run in one process."""
        return self._param_op(self._stage(job), job, job.msg)

    def _param_op(self, st, job, msg):
        op = msg["op"]
        if not (op.endswith("_") and not op.startswith("_")
                and callable(getattr(disthook.Tensor, op, None))):
            raise ValueError(f"{op!r} is not an in-place tensor method")
        check = st.check_form if op == "requires_grad_" else st.check_write
        check(job.client, f"{msg['name']}.{op}(...)")
        param = _tensor_at(st.module, msg["name"])
        args, kwargs = unpack(msg["args"]), unpack(msg["kwargs"])
        if op == "requires_grad_":
            param.requires_grad_(*args, **kwargs)
            st.form += 1
            return
        note_write(st, self.state, job)
        data, acc = param._data, param._grad_acc  # (set_, resize_ replace them)
        with disthook.no_grad():
            getattr(param, op)(*args, **kwargs)
        made = param._data
        if made.shape != data.shape or made.dtype != data.dtype:
            param._data, param._grad_acc = data, acc  # as it was: every copy mirrors it
            raise RuntimeError(
                f"a deployed tensor keeps its shape and dtype: {msg['name']} is "
                f"{list(data.shape)} {data.dtype}, {op} made it {list(made.shape)} "
                f"{made.dtype}; every client's copy of the model has its shape and dtype "
                "(change a dtype with the module's to(dtype), double(), half())")

    def on_module_op(self, job):
        """A change one process allows to the module at ``path`` (see wire's module_op): a
        buffer registered, a plain attribute set or deleted, as the client's code did it."""
        st, msg = self._stage(job), job.msg
        st.check_form(job.client, f"{msg['op']} {msg['name']!r} of {msg['path']!r}")
        module = st.module.get_submodule(msg["path"])
        name, value = msg["name"], unpack(msg.get("value"))
        if msg["op"] == "register_buffer":
            module.register_buffer(name, value, persistent=msg.get("persistent", True))
        elif msg["op"] == "set_attr":
            setattr(module, name, value)
        elif msg["op"] == "convert":
            _convert(module, value)
        elif msg["op"] == "extend_attr":
            _extend(module, msg["path"], name, value)
        elif msg["op"] == "client_modes":  # the deployer's modules on its client
            if not (isinstance(value, dict) and all(
                    isinstance(k, str) and isinstance(v, bool) for k, v in value.items())):
                raise ValueError("client_modes: a map of module paths to bools")
            st.client_modes = value
        elif msg["op"] == "train":
            if not isinstance(value, bool):
                raise ValueError(f"train of {msg['path']!r}: the mode must be a bool, got "
                                 f"{value!r}")
            module.train(value)
        else:
            delattr(module, name)
        if msg["op"] in ("set_attr", "extend_attr", "del_attr"):
            st.share_attr(module, name)  # (every client's, as the deployer set it)
        attr_changes.forget(module)  # its attributes changed outside a pass
        st.versions.reset()  # a buffer may have come or gone
        st.form += 1

    def on_grad_op(self, job):
        """Gradients of named parameters of the stage, where they live (see wire's grad_op):
        "norm" answers each one's norm (None for no gradient); "scale", "clamp" and "set"
        change them in place, as ``clip_grad_norm_``, ``clip_grad_value_`` and ``p.grad =``
        do in one process; "add" accumulates gradients the client computed (a leaf's
        backward)."""
        st, msg = self._stage(job), job.msg
        params = dict(st.module.named_parameters())
        unknown = [n for n in msg["names"] if n not in params]
        if unknown:
            raise KeyError(f"{st.name} has no parameters {unknown}")
        targets = [params[n] for n in msg["names"]]
        op, value = msg["op"], msg.get("value")
        if op not in ("set", "add") and value is None:
            raise ValueError(f"grad_op {op!r} needs a value")
        with disthook.no_grad():
            if op == "norm":
                return [None if p.grad is None else float(p.grad.norm(value).item())
                        for p in targets]
            if op in ("set", "add"):
                grads = msg.get("grads")
                if grads is None or len(grads) != len(targets):
                    raise ValueError(f"grad_op {op}: one gradient (or None) per name, got "
                                     f"{'none' if grads is None else len(grads)} for "
                                     f"{len(targets)}")
                for p, g in zip(targets, grads):
                    if g is not None:
                        g = disthook.from_numpy(np.array(g) if op == "set"
                                                else np.array(g, p.dtype.np))
                    if op == "set" or p.grad is None:
                        p.grad = g
                    elif g is not None:
                        p.grad = p.grad + g
                return None
            for p in targets:
                if p.grad is None:
                    continue
                if op == "scale":
                    p.grad.mul_(disthook.tensor(value, dtype=p.grad.dtype))
                else:  # clamp
                    p.grad.clamp_(min=-value, max=value)
        return None

    def on_step(self, job):
        """The stage's share of an optimizer (made on first use), or the stage's zero_grad.

        ``optimizer``: {"id", "class" (a name in disthook.optim), "kwargs", "params" (full
        names), "action": "step" | "zero_grad" | "state" | "load", "set_to_none", "state"}.
        "state" returns the share's state by parameter name ({"state": {name: {key: value}},
        "param_groups": [hyperparameters]}); "load" restores such a state.
        """
        return self._step(self._stage(job), job, job.msg)

    def _step(self, st, job, msg):
        spec = msg.get("optimizer")
        if spec is None:
            if msg.get("zero_grad"):
                st.module.zero_grad()  # the client's own gradients (Stage.use_client)
            return None
        return self._optimizer_action(st, spec, job.client)

    def _optimizer_action(self, st, spec, client: bytes):
        """Run ``spec.action`` on ``client``'s share of its optimizer ``spec.id`` on the
        stage (``spec``: a wire.RECORDS["optimizer_call"], checked on arrival). A step or a
        load changes weights: only a client that may write does."""
        if not st.first_time(client, spec.get("call")):
            return None  # it rode with a forward that failed later on, and ran here then
        if spec["action"] in ("step", "load"):
            st.check_write(client, f"an optimizer {spec['action']}")
            note_write(st, self.state, self.current_job())
        opt = st.optimizers.get((client, spec["id"]))
        groups = spec.get("groups")  # the client's param groups, as far as they are here
        if opt is None:
            module = spec["class"].partition(":")[0] if ":" in spec["class"] else "disthook"
            if not self.model_module_allowed(module):
                raise PermissionError(
                    f"the optimizer class {spec['class']!r} is not importable here: this "
                    "worker takes classes only from disthook and its --allow-model-module "
                    "list")
            if module != "disthook" and client != st.owner and not st.writable:
                raise PermissionError(
                    f"the optimizer class {spec['class']!r} would be imported for a client "
                    f"that may not change {st.name}: it may use disthook.optim's optimizers")
            self.check_optimizers(st, client)
            cls = _optimizer_class(spec["class"])
            params = dict(st.module.named_parameters())
            missing = [n for n in spec["params"] if n not in params]
            if missing:
                raise KeyError(f"{st.name} has no parameters {missing}")
            if groups is None:
                opt = cls([params[n] for n in spec["params"]], **spec["kwargs"])
            else:  # the client's defaults, as far as the constructor takes them by name
                opt = cls([{**g.hyper, "params": [params[n] for n in g.params]}
                           for g in groups], **_accepted(cls, spec["kwargs"]))
            st.optimizers[(client, spec["id"])] = opt
        elif groups is not None:  # the groups as they are now (a scheduler moves lr)
            _follow_groups(opt, groups, st.module)
        if spec["action"] == "step":
            with disthook.autograd.refuse_differentiation(
                    differentiating_step(type(opt).__name__)):
                opt.step()
        elif spec["action"] == "zero_grad":
            opt.zero_grad(set_to_none=spec.get("set_to_none", True))
        elif spec["action"] == "state":
            saved = opt.state_dict()
            names = spec["params"]  # one group: ids 0..n-1 are these names in order
            return {"state": {names[i]: {k: v.detach()._data if isinstance(v, disthook.Tensor)
                                         else v for k, v in s.items()}
                              for i, s in saved["state"].items()},
                    "param_groups": [{k: list(v) if isinstance(v, tuple) else v
                                      for k, v in g.items() if k != "params"}
                                     for g in saved["param_groups"]]}
        elif spec["action"] == "load":
            names, given = spec["params"], spec["state"]
            unknown = [n for n in given["state"] if n not in names]
            if unknown:
                raise KeyError(f"{st.name}: optimizer state for parameters it does not step: "
                               f"{unknown}")
            state = {names.index(n): {k: disthook.from_numpy(np.array(v))
                                      if isinstance(v, np.ndarray) else v
                                      for k, v in s.items()}
                     for n, s in given["state"].items()}
            if groups is None:
                groups = [{**g, "params": list(range(len(names)))}
                          for g in given["param_groups"]]
            else:
                groups = [{**g.hyper, "params": [names.index(n) for n in g.params]}
                          for g in groups]
            opt.load_state_dict({"state": state, "param_groups": groups})
        else:
            raise ValueError(f"unknown optimizer action {spec['action']!r}")
        return

    def on_train(self, job):
        st = self._stage(job)
        if st.module.training != job.msg["mode"]:  # the mode is the model's, for everyone
            st.check_form(job.client, "train()/eval()")
        if any(m.training != job.msg["mode"] for m in st.module.modules()):
            st.form += 1
        st.module.train(job.msg["mode"])

    def on_set_state(self, job):
        """Copy arrays into the stage's parameters and buffers by full name (no_grad, in place)."""
        return self._set_state(self._stage(job), job, job.msg)

    def _set_state(self, st, job, msg):
        st.check_write(job.client, "load_state_dict")
        own = st.module.state_dict(keep_vars=True)
        unknown = [n for n in msg["state"] if n not in own]
        if unknown:
            raise KeyError(f"{st.name} has no parameters or buffers {unknown}")
        note_write(st, self.state, job)
        with disthook.no_grad():
            for name, arr in msg["state"].items():
                own[name].copy_(disthook.from_numpy(np.array(arr)))

    def on_commit(self, job):
        """The client's numbered writes up to ``seq`` of a tree-placed model are on every
        worker they went to: its forwards that start here from now on count them
        (workers/versions.py)."""
        st = self._stage(job)
        st.check_write(job.client, "a commit of its writes")
        seq = job.msg["seq"]
        st.versions.commit(job.client.hex(), seq, time.monotonic())

    def on_write(self, job):
        """A write of a chain model's weights (load_state_dict, an in-place parameter
        method, an optimizer step or load) that travels the pipeline from the first stage,
        behind the calls sent on before it (workers/versions.py): each stage runs its own
        parts as the messages they stand for, then passes the write on, with the calls of
        others it found on its way (``pins``: they keep the weights they started with on the
        later stages). The last stage with a part answers the client."""
        msg = job.msg
        try:
            st = self._stage(job)
            parts = msg["parts"]
            if not isinstance(parts, list) or len(parts) <= st.index:
                raise ValueError(f"write: parts must hold one list per stage; this is "
                                 f"{st.name}, it has {len(parts) if isinstance(parts, list) else 0}")
            st.check_write(job.client, "a write of its weights")  # before it goes on
            # every part from here on is checked before this stage's change anything
            mine, *later = [[wire.write_part(p, st.model) for p in stage_parts or ()]
                            for stage_parts in parts[st.index:]]
            note_pins(st, self.state, job)
            for inner in mine:
                getattr(self, f"_{inner.type}")(st, job, inner)
            later = [p for p in later if p]
            nxt = st.neighbours.get("next")
            if later and nxt is None:
                raise RuntimeError(f"write: {st.name} is the last stage; the write has parts "
                                   "for stages after it")
            if later:
                nxt.send_multipart(wire.encode("write", {
                    "model": st.model, "stage": st.index + 1, "parts": parts,
                    "reply_to": job.client.hex(), "pins": [list(p) for p in job.pins]},
                    req=msg.req, ctx=msg.ctx), copy=False)
            else:
                self._to_client(job, "ok", {"result": None})
        # (the client, not the previous stage, hears it; sys.exit in a part: error_reply)
        except (Exception, SystemExit) as exc:  # noqa: BLE001
            self._to_client(job, "error", self.error_reply(exc, job))
        return NO_REPLY


def _accepted(cls: type, kwargs: dict) -> dict:
    """The entries of ``kwargs`` that ``cls(params, ...)`` takes (an optimizer's defaults
    may hold more than its constructor's arguments, as AdamW's do)."""
    import inspect

    params = inspect.signature(cls.__init__).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return dict(kwargs)
    return {k: v for k, v in kwargs.items() if k in params and k not in ("self", "params")}


def _extend(module, path: str, name: str, value) -> None:
    """The list ``module.name`` grown at its end by the client's program (``value``: [its
    length before, the items]), as the client has it."""
    start, items = value if isinstance(value, list) and len(value) == 2 else (None, None)
    have = module.__dict__.get(name)
    if not isinstance(start, int) or not isinstance(items, list) or not isinstance(
            have, list) or len(have) != start:
        raise ValueError(f"extend {path}.{name}: the client's list grew from {start!r} items; "
                         f"here it is {type(have).__name__} "
                         f"{len(have) if isinstance(have, list) else ''}".rstrip())
    have.extend(items)


def _follow_groups(opt, groups, module) -> None:
    """The share's param groups as the client's are now: their hyperparameters, and the
    groups the client added since the share was made (``add_param_group``: progressive
    unfreezing), which it steps from now on."""
    for mine, given in zip(opt.param_groups, groups):
        if len(mine["params"]) != len(given.params):
            raise ValueError(
                f"param group {given.index} of the optimizer holds {len(given.params)} of "
                f"this stage's parameters, where its first step had {len(mine['params'])}: a "
                "group's parameters cannot change after the first step here; add a new group "
                "with add_param_group(), or make the optimizer again")
        mine.update(given.hyper)
    if len(groups) > len(opt.param_groups):
        params = dict(module.named_parameters())
        for given in groups[len(opt.param_groups):]:
            opt.add_param_group({**given.hyper, "params": [params[n] for n in given.params]})


def _optimizer_class(name: str) -> type:
    """The optimizer class a client names: one of disthook.optim by its name, or any
    subclass of disthook.optim.Optimizer by "package.module:Qualified.Name"."""
    import importlib

    if ":" not in name:
        cls = getattr(disthook.optim, name, None)
    else:
        module, _, qualname = name.partition(":")
        if module in ("__main__", "__mp_main__"):
            raise ValueError(f"the optimizer class {name!r} is defined in the client's main "
                             "script: define it in a module the workers can import")
        try:
            cls = importlib.import_module(module)
            for part in qualname.split("."):
                cls = getattr(cls, part)
        except (ImportError, AttributeError) as exc:
            raise ValueError(f"cannot find the optimizer class {name!r} here: {exc}; install "
                             "its module where the workers run") from None
    if not (isinstance(cls, type) and issubclass(cls, disthook.optim.Optimizer)):
        raise ValueError(f"{name!r} is not an optimizer (a disthook.optim.Optimizer subclass)")
    return cls


def _convert(module, dtypes) -> None:
    """``module.to(dtype)``, ``double()``, ``half()`` ... as the client's code ran it, for the
    tensors ``dtypes`` names ({name under the module: dtype name}): in place, as
    ``nn.Module._apply`` converts them (a parameter stays the same object, its ``.data``
    and its ``.grad`` converted; a buffer replaced)."""
    if not isinstance(dtypes, dict):
        raise ValueError(f"convert: a dict of tensor names and dtypes, got {dtypes!r}")
    for name, dtype_name in dtypes.items():
        dtype = getattr(disthook, str(dtype_name), None)
        if not isinstance(dtype, disthook.dtype) or not (dtype.is_floating_point
                                                         or dtype.is_complex):
            raise ValueError(f"convert {name!r}: {dtype_name!r} is not a floating or complex "
                             "dtype")
        path, _, leaf = name.rpartition(".")
        owner = module.get_submodule(path)
        with disthook.no_grad():
            if owner._parameters.get(leaf) is not None:
                param = owner._parameters[leaf]
                param.data = param.data.to(dtype)
                if param.grad is not None:
                    param.grad.data = param.grad.to(dtype)
            elif owner._buffers.get(leaf) is not None:
                owner._buffers[leaf] = owner._buffers[leaf].to(dtype)
            else:
                raise AttributeError(f"{name!r} is not a parameter or buffer of this stage")


def _tensor_at(module, name: str):
    """The parameter or buffer at dotted ``name`` of ``module``."""
    path, _, leaf = name.rpartition(".")
    owner = module.get_submodule(path)
    found = owner._parameters.get(leaf)
    if found is None:
        found = owner._buffers.get(leaf)
    if found is None:
        raise AttributeError(f"{name!r} is not a parameter or buffer of this stage")
    return found

