"""Hooks on a worker's stages: registering and removing them, and the stubs that run a
client's hook by sending the event to the client and waiting for its answer.

A client hook fires inside the job of a forward or backward; its stub sends a
``hook_event`` to the client that registered it and sleeps until the answer comes (the
worker serves other requests meanwhile), the client goes away, or the hook deadline passes.
The answer is used as torch would use the hook's return value.
"""
from __future__ import annotations

import contextlib

import numpy as np

import disthook
from disthook.autograd import grad_mode, inference
from disthook.service import hook_kinds, worker_hooks
from disthook.service.values import argument_number, custom_view, pack, tensors_in, unpack
from workers import attr_changes, form
from workers.speculation import HookRecord

__all__ = ["HookHandlers"]

# a hook's tag and a capture's buffer name are names: kept with each hook (4096 a client),
# a name of 1 MiB each made a worker hold 4 GiB for one client, past every cap by bytes
MAX_HOOK_NAME_CHARS = 256



def _marks(originals: list) -> dict:
    """What a hook event says of its tensors where one process would show it (each field a
    list, one entry per tensor, None where it does not apply; sent only where one does):
    "arguments", the number of the call's argument a tensor is, unchanged (the client's
    hook gets the program's own tensor); "views", ``[output_nr, name]`` of a custom
    Function's view output (a full backward hook's wrapping of a module's output), which
    the client's tensor makes refuse an in-place change as one process does."""
    marks = {}
    for field, of in (("arguments", argument_number), ("views", custom_view)):
        found = [of(t) for t in originals]
        if any(v is not None for v in found):
            marks[field] = found
    return marks

class HookHandlers:
    """The hook requests of ``Worker`` and its client-hook stubs (a mixin)."""

    def on_add_hooks(self, job):
        """Register hooks on the stage, all or none: a worker hook runs here, any other is a
        stub that runs the client's hook when it fires here."""
        st = self._stage(job)
        client = job.client  # the connection it came on (reply_to is checked against it)
        self.check_hooks(st, client, len(job.msg["hooks"]))  # workers.limits
        added = []
        try:
            for entry in job.msg["hooks"]:  # wire.RECORDS["hook_entry"], checked on arrival
                self._add_hook(st, entry, client)
                added.append(entry.hook)
        except BaseException:
            self._remove_hooks(st, client, added)
            raise

    def _add_hook(self, st, entry, client: bytes) -> None:
        kind, path, hook_id = entry.kind, entry.path, entry.hook
        hook_kind = hook_kinds.KINDS[kind]
        spec = entry.get("worker_hook")
        options = (spec or {}).get("options")
        for what, name in (("tag", entry.get("tag")),
                           ("buffer", options.get("buffer") if isinstance(options, dict)
                            else None)):
            if isinstance(name, str) and len(name) > MAX_HOOK_NAME_CHARS:
                raise ValueError(f"a hook's {what} is a name of at most {MAX_HOOK_NAME_CHARS} "
                                 f"characters, got {len(name)}: use a shorter one")
        if spec is not None:  # runs here, without a round trip
            stub = worker_hooks.build(spec, kind, path, self.captures, self.allow_hook_modules,
                                      client)
        else:
            # its answers are always waited for (never run ahead): where asked, and for a
            # post-accumulate hook, which reads what the event does not carry (the
            # parameter's .grad, its value), as they are when it fires
            if entry.get("waits") or kind == "post_accumulate":
                for fired_as in (kind, "leaf_hook"):
                    st.record(client, hook_id, fired_as).steers = True
            record = st.record(client, hook_id, kind)
            if kind == "post_accumulate":
                stub = self._post_accumulate_stub(hook_id, path, client, record)
            elif hook_kind.on == "tensor":
                stub = self._tensor_stub(hook_id, path, client, kind, record)
            else:
                stub = self._module_stub(kind, hook_id, path, client, record)
        target = (st.module.get_parameter(path) if hook_kind.on == "tensor"
                  else st.module.get_submodule(path))
        handle = hook_kinds.register(target, kind, _only_for(self, client, stub),
                                     entry.options)
        # by (client, id): each client numbers its hooks from 1
        st.hooks[(client, hook_id)] = handle
        st.hook_info[(client, hook_id)] = {"hook": hook_id, "kind": kind, "path": path,
                                           "tag": entry.get("tag"),
                                           "runs": "client" if spec is None else "worker"}

    def on_list_hooks(self, job):
        """The hooks the asking client registered on this stage: [{"hook", "kind", "path",
        "tag", "runs"}], where runs is "client" (a stub that calls the client) or "worker"
        (a worker hook). Other clients' hooks are theirs."""
        return [info for (who, _), info in self._stage(job).hook_info.items()
                if who == job.client]

    def on_captured(self, job):
        """The asking client's capture buffer ``name``: [{"order", "path", "kind",
        "micro_batch", "value"}] (another client's buffer of that name is its own)."""
        msg = job.msg
        return [{"order": list(order), "path": path, "kind": kind, "micro_batch": mb,
                 "value": pack(value)}
                for order, path, kind, mb, value in self.captures.take(job.client, msg["name"],
                                                                       msg.get("clear", True))]

    def on_remove_hooks(self, job):
        self._remove_hooks(self._stage(job), job.client, job.msg["hooks"])

    @staticmethod
    def _remove_hooks(st, client: bytes, hook_ids) -> None:
        """Remove ``client``'s hooks ``hook_ids`` (an id not held, removed before, is no
        error)."""
        for hook_id in hook_ids:
            st.hook_info.pop((client, hook_id), None)
            for key in [k for k in st.hook_records if k[:2] == (client, hook_id)]:
                del st.hook_records[key]
            handle = st.hooks.pop((client, hook_id), None)
            if handle is not None:
                handle.remove()

    def _module_stub(self, kind: str, hook_id: int, path: str, client: bytes,
                     record: HookRecord):
        """The worker-side body of a client module hook: the event crosses, the answer comes
        back and is returned to the module machinery as the client's hook returned it. In a
        forward or backward run ahead of its hooks' answers (``workers/speculation.py``) a
        hook that only looked so far does not wait for its answer."""
        worker = self
        forward_kind = kind in ("forward_pre", "forward")

        def stub(module, *args):
            originals = list(tensors_in(args))
            answer = worker._fire(
                record, client, hook_id, kind, path, args, originals,
                forward_kind and grad_mode.is_grad_enabled(),
                lambda later: worker._use_answer(later, originals, client, hook_id, path))
            if answer is None:  # ran ahead: its answer is taken when the pass ends
                return None
            return worker._use_answer(answer, originals, client, hook_id, path)

        stub.__name__ = f"client_hook_{hook_id}"  # how engine errors name the hook
        return stub

    def _fire(self, record: HookRecord, client: bytes, hook_id: int, kind: str, path: str,
              args, originals: list, diff: bool = False, use=None):
        """Send the event of one firing of ``client``'s hook ``hook_id`` (given ``args``,
        whose tensors are ``originals``) and return its answer; in a pass that runs ahead
        (``job.spec``) the answer recorded for it in an earlier run of the pass, or None when
        the firing runs ahead (``use(answer)`` then does what an answer that changed nothing
        asks, when it comes)."""
        job = self.current_job()
        spec = job.spec
        ids = self._names_of(job, originals)
        marks = _marks(originals)
        if spec is None:
            self.captures.count("client")
            return self._call_client(client, hook_id, kind, path, [pack(a) for a in args],
                                     diff=diff, ids=ids, marks=marks)

        def send(ahead: bool):
            self.captures.count("client")
            return self._send_event(client, hook_id, kind, path, spec.pack(args, ahead),
                                    diff, spec.round, ahead, ids, marks)

        return spec.fire(record, hook_id, originals, send,
                         lambda wait: self._answer_of(wait, kind, path),
                         use or (lambda later: None))

    def _names_of(self, job, originals: list) -> list[str]:
        """The names of a firing's tensors (``originals``): one per tensor, the same in
        every event of ``job`` that sends it, so that the client's hooks see one object for
        it, as hooks in one process do (a layer's output is the next layer's input, one
        input of two layers is one object). The version counts: a tensor the pass changed
        in place since an event sent it is that object, changed (see
        ``disthook.distributed.given_tensors``)."""
        named = job.named
        ids = []
        for t in originals:
            seen = named.get(id(t))
            if seen is None or seen[0] is not t:  # (held, so its id is not reused meanwhile)
                seen = named[id(t)] = (t, f"{self.state.worker_id}/{next(self._tensor_ids)}",
                                       0)
            ids.append(f"{seen[1]}@{t._vc[0] + seen[2]}")
        return ids

    @staticmethod
    def output_names(job, outs: list) -> list | None:
        """The names of a call's outputs (``outs``) that an event of ``job`` sent to a
        client hook, None for the others: the client's call then returns the hook's tensor
        for each (``disthook.distributed.given_tensors.become_output``); None where none."""
        names = []
        for t in outs:
            seen = job.named.get(id(t))
            names.append(None if seen is None or seen[0] is not t
                         else f"{seen[1]}@{t._vc[0] + seen[2]}")
        return names if any(names) else None

    @staticmethod
    def name_as(job, t, name: str) -> None:
        """Name ``t`` (a stage's input) in ``job``'s events as the tensor it came from (the
        previous stage's output, ``name`` as that stage's events name it): in one process
        the two are one object."""
        tensor, _, version = name.rpartition("@")
        job.named[id(t)] = (t, tensor, int(version) - t._vc[0])

    def _use_answer(self, answer, originals: list, client: bytes, hook_id: int, path: str):
        """Do what the answer of a client module hook given ``originals`` asks; the value the
        module machinery is to use (None: keep its own)."""
        _apply_changes(answer, originals, self, client, hook_id, path)
        key = answer.get("key")
        job = self.current_job()
        for i in answer.get("taps") or ():  # the client may want their gradients later
            job.taps[f"{key}#{i}"] = _original(originals, i, path)
        for i in answer.get("watch") or ():  # the client's hook hooked these tensors
            _original(originals, i, path).register_hook(self._tensor_stub(
                hook_id, f"{key}#{i}", client, "leaf_hook",
                job.stage.record(client, hook_id, "leaf_hook")))
        for i in answer.get("retain") or ():  # ... or asked them to retain their grads
            _original(originals, i, path).retain_grad()
            job.retained.append((client, hook_id, f"{key}#{i}", originals[i]))
        data = answer.get("result")
        if data is None:
            return None
        return _unpack_result(data, originals, self, client, hook_id)

    def _tensor_stub(self, hook_id: int, path: str, client: bytes, kind: str,
                     record: HookRecord):
        worker = self

        def stub(grad):
            answer = worker._fire(record, client, hook_id, kind, path, [grad], [grad])
            if answer is None:  # ran ahead: its answer is taken when the backward ends
                return None
            _apply_changes(answer, [grad], worker, client, hook_id, path)
            data = answer.get("result")
            return None if data is None else _unpack_result(data, [grad], worker, client,
                                                            hook_id)

        stub.__name__ = f"client_hook_{hook_id}"
        return stub

    def _post_accumulate_stub(self, hook_id: int, path: str, client: bytes,
                              record: HookRecord):
        """A client's post-accumulate-grad hook on the parameter at ``path``: it fires once
        the parameter's ``.grad`` was updated here, and the client runs it on the parameter
        as it knows it (reading and writing it here meanwhile); nothing comes back."""
        worker = self

        def stub(param):
            worker._fire(record, client, hook_id, "post_accumulate", path, [], [])

        stub.__name__ = f"client_hook_{hook_id}"
        return stub

    def _call_client(self, client: bytes, hook_id: int, kind: str, path: str, args: list,
                     diff: bool = False, ids: list | None = None, marks=None):
        """Send a hook event to ``client`` and sleep until its answer comes; the answer (a
        ``hook_reply`` message)."""
        return self._answer_of(self._send_event(client, hook_id, kind, path, args, diff,
                                                ids=ids, marks=marks), kind, path)

    def _send_event(self, client: bytes, hook_id: int, kind: str, path: str, args: list,
                    diff: bool = False, spec: str | None = None, ahead: bool = False,
                    ids: list | None = None, marks: dict | None = None):
        """Send a hook event to ``client``; the wait for its answer (one the job goes on
        past when ``ahead``). ``spec``: the round of a pass run ahead; ``ids``: the names
        of the tensors of ``args`` (see _names_of); ``marks``: fields saying what some of
        them are (see _marks)."""
        job = self.current_job()
        self.announce_wait(job)  # the later stages keep their weights for its call
        req = next(self._event_ids)
        what = f"the client's answer to its {kind} hook on {path!r}"
        wait = (self.state.expect_from_client if ahead else self.state.wait_for_client)(
            job, client, req, what)
        fields = {"hook": hook_id, "kind": kind, "path": path, "args": args, "diff": diff,
                  "spec": spec, "attrs": attr_changes.seen(job), "ids": ids,
                  "forms": None if job.stage is None else form.forms(job.stage, job)}
        fields.update(marks or {})  # (only where one is: a client before them refuses them)
        self.reply(self.router, client, req, "hook_event", fields, ctx=job.msg.ctx)
        return wait

    def _answer_of(self, wait, kind: str, path: str):
        """Sleep until the answer of ``wait`` comes; the error of the client's ``kind`` hook
        on ``path`` raised here."""
        msg = self.sleep_on(wait)
        if msg.type == "error":
            raise RuntimeError(f"the client's {kind} hook on {path!r} raised "
                               f"{msg['kind']}: {msg['message']}")
        return msg


def _only_for(worker, client: bytes, hook):
    """``hook`` as it fires for ``client``'s own calls only: a client's hooks never see (or
    change) another client's forward or backward."""
    def for_its_client(*args, **kwargs):
        job = getattr(worker._local, "job", None)
        if job is not None and job.client != client:
            return None
        return hook(*args, **kwargs)

    for_its_client.__name__ = getattr(hook, "__name__", "hook")
    return for_its_client


def _apply_changes(answer, originals: list, worker, client: bytes, hook_id: int,
                   path: str) -> None:
    """What the client's hook changed in place in the tensors it was given, done to this
    worker's tensors in place too: recorded by autograd where the tensor is part of a graph
    (its gradient then flows back through the client's change), as in one process; its
    version counter moves as far as the client's did. A change to the call's own argument
    (the worker's copy of the caller's tensor) goes back with the call's answer
    (``given_args.changed_arguments``)."""
    for change in answer.get("changed") or ():
        target = _original(originals, change.arg, path)
        value = _unpack_result(change.value, originals, worker, client, hook_id)
        if not isinstance(value, disthook.Tensor) or value.shape != target.shape:
            raise RuntimeError(f"the client's hook on {path!r} changed tensor {change.arg} in "
                               f"place to something that is not a tensor of its shape "
                               f"{tuple(target.shape)}")
        # (an inference tensor whose copy on the client took the change, which it refuses
        # outside inference_mode as one process does: here too, inside the mode; one the
        # client's copy of is plain, a gradient a hook made there, is checked here)
        with (disthook.inference_mode() if change.get("inference")
              and type(target._vc) is inference.InferenceVersion
              else contextlib.nullcontext()):
            if value.requires_grad and grad_mode.is_grad_enabled():
                target.copy_(value)
            else:
                with disthook.no_grad():
                    target.copy_(value)
            target._vc[0] += max(int(change.get("moved") or 1), 1) - 1  # (copy_ moved one)


def _original(originals: list, i: int, path: str):
    """The i-th tensor a client hook was given, as its answer names it."""
    if not 0 <= i < len(originals):
        raise ValueError(f"the answer of the client's hook on {path!r} names its tensor {i}; "
                         f"the hook was given {len(originals)}")
    return originals[i]


_ALWAYS_WAITS = HookRecord(steers=True)
# what a result computed from the client's own tensors hangs on where it has no input here
# that requires grad: it takes no gradient
_OWN = disthook.zeros((), requires_grad=True)


class _ClientFunction(disthook.autograd.Function):
    """A tensor a client hook computed from tensors of this worker: its backward asks the
    client for the vector-Jacobian product of that computation."""

    @staticmethod
    def forward(ctx, worker, client, hook_id, key, value, *inputs):
        stand_in = len(inputs) == 1 and inputs[0] is _OWN
        ctx.call = (worker, client, hook_id, key, 0 if stand_in else len(inputs))
        return disthook.from_numpy(np.array(value))

    @staticmethod
    def backward(ctx, grad):
        worker, client, hook_id, key, n = ctx.call
        # a computation, never run ahead; in a pass that runs ahead it is answered stale
        # when an earlier answer changed something (its graph on the client stays unused)
        grads = unpack(worker._fire(_ALWAYS_WAITS, client, hook_id, "vjp", key, [grad],
                                    [grad]).get("result"))
        if len(grads) != n:
            raise RuntimeError(f"the client returned {len(grads)} gradients for {n} inputs")
        return (None, None, None, None, None, *(grads or [None]))  # (_OWN's: none)



def _refuse_post_hook(node, fn):
    """A post hook on the node of a result a client hook computed (a legacy backward hook
    of a module whose output a client forward hook replaced): in one process it sits on the
    node of the last op of that hook's computation and sees that op's grad_input, which
    this worker does not have (the computation ran on the client)."""
    module = fn.module() if getattr(fn, "with_module", False) else None
    what = ("grad_fn.register_hook" if module is None
            else f"a legacy register_backward_hook on {type(module).__name__} or on a "
            "module that returns its output")
    raise NotImplementedError(
        f"a backward hook ({what}) is put on the node of a tensor that a client hook of the "
        "deployed model computed (a forward hook that returned a new output): in one process "
        "it would see the grad_input of that computation's last op, which ran on the client, "
        "not on the worker. Use register_full_backward_hook (or a hook on the tensor) "
        "instead, or register the legacy hook where no client hook replaces the output")


_ClientFunction._backward_cls.register_hook = _refuse_post_hook

def _unpack_result(data, originals: list, worker, client: bytes, hook_id: int):
    """A client hook's result: ``{"same": i}`` is the i-th original tensor itself; a tensor
    with a ``vjp`` key was computed from the originals and stays differentiable."""
    if isinstance(data, dict) and "same" in data:
        return _original(originals, data["same"], "its module")
    if isinstance(data, dict) and "feed" in data:  # the client's own, requiring grad
        leaf = disthook.from_numpy(np.array(data["tensor"]))
        if grad_mode.is_grad_enabled():
            leaf.requires_grad_(True)
            worker.current_job().taps[data["feed"]] = leaf  # its gradient may be asked for
        return leaf
    if isinstance(data, dict) and data.get("inference"):  # made in inference_mode there
        return inference.made_inference(disthook.from_numpy(np.array(data["tensor"])))
    if isinstance(data, dict) and "vjp" in data:
        inputs = [t for t in originals if t.requires_grad]
        if data.get("own") and not inputs and grad_mode.is_grad_enabled():
            # computed from the client's own tensors that require grad (a steering vector
            # learned through a frozen model): it requires grad here too, so that the
            # backward reaches it and the client gives those tensors their gradients
            inputs = [_OWN]
        out = _ClientFunction.apply(worker, client, hook_id, data["vjp"], data["tensor"],
                                    *inputs)
        if "tap" in data and out.requires_grad:  # the client may differentiate to it
            worker.current_job().taps[data["tap"]] = out
        return out
    if isinstance(data, dict) and len(data) == 1 and next(iter(data)) in ("tuple", "list"):
        (tag, items), = data.items()
        out = [_unpack_result(v, originals, worker, client, hook_id) for v in items]
        return tuple(out) if tag == "tuple" else out
    if isinstance(data, dict) and len(data) == 1 and type(data.get("dict")) is dict:
        return {k: _unpack_result(v, originals, worker, client, hook_id)
                for k, v in data["dict"].items()}
    return unpack(data)
