"""Client hooks served on the client: a worker fires the stub of a hook registered on a
proxy, the event crosses here, the user's callable runs here with proxies of the worker's
tensors, and its result (None, a replacement, or a tensor computed from the hook's tensors,
whose vector-Jacobian product a later event asks for) crosses back. Warnings a worker raised
for the client are re-issued here too."""
from __future__ import annotations

import warnings
import weakref

import numpy as np
import zmq

from disthook import autograd as torch_autograd
from disthook import wire
from disthook.autograd import engine, grad_mode
from disthook.autograd.graph import _sequence
from disthook.distributed import attr_changes, given_tensors, post_accumulate
from disthook.distributed.hook_graphs import (
    _calls_apart,
    _reaches_own,
    _reaches_remote,
    _warn_fired_apart,
)
from disthook.distributed.hook_table import RemovedHooks
from disthook.distributed.micro_batches import note_hook_error
from disthook.distributed.tap_node import (
    RemoteTapBackward0,
    serving_vjp,
    unlinked_taps_refused,
    workers_keep,
)
from disthook.service import hook_kinds
from disthook.service.values import pack, unpack
from disthook.tensor import Tensor

__all__ = ["HookServer"]

_BROKEN_ROUNDS_KEPT = 1024  # a worker never sends a round's events after hearing its answers


def _hook_on_a_copy_refused(hook):
    """``register_hook`` on a tensor a client hook got in a forward that records no graph
    (no_grad) and that requires grad: the worker's copy of the call's own argument, a leaf
    as the program's tensor is. In one process the hook goes on the program's tensor and
    fires in a later backward from it; no backward reaches the worker's copy."""
    raise NotImplementedError(
        "a hook of a deployed model put a tensor hook on a tensor that requires grad in a "
        "forward run under no_grad (the call's own argument, of which the worker holds a "
        "copy): in one process it would go on the program's tensor and fire in a later "
        "backward from it, which never reaches the worker's copy. Register the hook on "
        "the tensor you passed, or call the model with grad enabled")


def _nothing() -> None:
    return None

class HookServer:
    """The client's hooks of one deployment and what their events left behind: the channel
    to the stages (``channel._Hub``) is one, and serves events while it waits for replies."""

    def __init__(self):
        # hook id -> (callable, kind, module proxy, its add_hook fields), in registration order
        self.hooks: dict[int, tuple] = {}
        # key -> (result tensor, bases, leaves, the hook in the user's words where the result
        # is computed from tensors of this process that require grad too) for "vjp" events
        self.vjps: dict[str, tuple] = {}
        self._packing = (0, "a hook")  # the hook answering now: (first node, its name)
        self.watched: dict[str, list] = {}  # key -> a hook's tensors that got tensor hooks
        # forward context -> [(key, tensor)]: tensors forward hooks were given that may be
        # differentiated against later; the context's RemoteBackward0 takes them (taps)
        self.taps: dict[str, list] = {}
        # forward context -> the call's inputs here, while its forward runs (what a tap's
        # RemoteTapBackward0 leads to)
        self.pending_inputs: dict[str, list] = {}
        # a call of one placed part from code running here (glue.call_placed), while it
        # runs: context -> its path, its inputs here, and tensor hooks its own forward hooks
        # put on its output, to go on the output here (see _relocate)
        self.calls: dict[str, dict] = {}
        self.hook_error: BaseException | None = None
        # the context of the event whose hook runs now (glue.route_node_hooks reads it)
        self.firing_ctx: str | None = None
        self.firing_at: zmq.Socket | None = None  # the socket its event came on
        self.firing = 0  # > 0 while a hook a worker fired runs here
        # a deployed parameter's tensor hook -> the backward it fired in last
        self._param_hook_fired: dict[int, tuple] = {}
        # hooks removed: id -> entry, for the firings the call running then had taken and
        # the graphs recorded before, while they live (hook_table.RemovedHooks)
        self.removed_while_firing: dict[int, tuple] = {}
        self.removed_newest = RemovedHooks(self.removed_while_firing)
        # rounds of passes run ahead whose later events are stale (see _serve_event)
        self._broken_rounds: dict[str, None] = {}
        # (round, writes made before it ran) of each hook running now, outermost first
        self._running: list[tuple] = []
        # id of a socket -> (the round of its latest event, the tensors its events sent)
        self._rounds: dict[int, tuple] = {}
        # socket -> the encoded answers to the events of its current burst, not sent yet
        self._outbox: dict[zmq.Socket, list] = {}
        # context -> a worker tensor's name -> (the one tensor its events give hooks here,
        # what that is computed from here, the versions): see given_tensors. A worker names
        # the tensors of one request's events (its job's): forgotten when the requests end
        self.given: dict[str, dict] = {}
        # "<context>|<worker tensor>" -> its hook's tensor, while alive (become_output)
        self.stand_ins: weakref.WeakValueDictionary = weakref.WeakValueDictionary()

    def _serve_event(self, sock: zmq.Socket, event: wire.Message) -> None:
        """Run the hook a worker asked for and answer it on the socket the event came on.

        An event of a pass (forward or backward) that runs ahead of its hooks' answers
        names its round (``spec``): once an answer of the round changed something or
        failed, the round's later events were made from values that change would alter,
        and are answered stale without running their hooks (the worker runs that pass
        again)."""
        spec = event.get("spec")
        try:  # a round's tensors are numbered whether its hooks run or not
            args = self._round_args(sock, spec, event["args"])
        except ValueError as exc:
            self._break_round(spec)
            self._answer(sock, wire.encode("error", {"kind": "ValueError",
                                                     "message": str(exc)},
                                           req=event.req, ctx=event.ctx))
            return
        if spec is not None and any(s == spec and w != self.writes for s, w in self._running):
            # served while a hook of its round waits on a write it made (a hook removed, a
            # weight set): that answer changes what follows, so this event is stale already
            self._break_round(spec)
        if spec is not None and spec in self._broken_rounds:
            self._answer(sock, wire.encode("hook_reply", {"hook": event["hook"],
                                                          "stale": True},
                                           req=event.req, ctx=event.ctx))
            return
        broken = False
        writes = self.writes
        self._running.append((spec, writes))
        try:
            if self.on_forms is not None and event.get("forms"):  # before its hook reads them
                self.forms.update(event["forms"])
                if self.forms != self.forms_held:
                    self.on_forms()
            with self.lock.lent():  # to the threads it starts (socket_lock.py)
                answer = self._run_hook(event, sock, args)
            if self.writes != writes:  # it wrote to the model (an attribute its module's
                answer["wrote"] = True  # forward reads, a weight): what follows may change
            # a hook's answer that changes something (a vjp's result changes nothing: it is
            # what the worker asked to compute)
            broken = event["kind"] not in ("vjp", "retained") and hook_kinds.steers(answer)
            frames = wire.encode("hook_reply", {"hook": event["hook"], **answer},
                                 req=event.req, ctx=event.ctx)
        except Exception as exc:
            entry = self.hooks.get(event["hook"])
            note_hook_error(exc, entry[2] if entry else None)
            self.hook_error = exc
            broken = True
            frames = wire.encode("error", {"kind": type(exc).__name__, "message": str(exc)},
                                 req=event.req, ctx=event.ctx)
        except KeyboardInterrupt:  # Ctrl-C while the hook ran: the worker's call must not
            self._break_round(spec)  # wait for its answer (every later call behind it)
            self._answer(sock, wire.encode(
                "error", {"kind": "RuntimeError",
                          "message": "the client was interrupted while its hook ran"},
                req=event.req, ctx=event.ctx))
            raise  # (the answer goes as the socket's burst ends: channel._take's caller)
        finally:
            self._running.pop()
        if broken:
            self._break_round(spec)
        self._answer(sock, frames)

    def _answer(self, sock: zmq.Socket, frames: list) -> None:
        """Queue the answer ``frames`` to an event that came on ``sock``: the answers to a
        burst of events go together (``flush_answers``), before anything else is sent on
        that socket."""
        queued = self._outbox.get(sock)
        if queued is None:
            queued = self._outbox[sock] = []
        queued.append(frames)

    def flush_answers(self, sock: zmq.Socket | None = None) -> None:
        """Send the queued answers (on ``sock``, or on every socket): one message as it is,
        several as one batch (``wire.encode_batch``)."""
        for each in ([sock] if sock is not None else list(self._outbox)):
            queued = self._outbox.pop(each, None)
            if queued:
                each.send_multipart(queued[0] if len(queued) == 1
                                    else wire.encode_batch(queued), copy=False)

    def _break_round(self, spec: str | None) -> None:
        """Round ``spec`` got an answer that changed something or failed: its later events
        are stale, and a result sent ahead of its answers does not stand."""
        if spec is not None:
            self._broken_rounds[spec] = None
            while len(self._broken_rounds) > _BROKEN_ROUNDS_KEPT:
                del self._broken_rounds[next(iter(self._broken_rounds))]

    def _round_args(self, sock, spec: str | None, args: list) -> list:
        """An event's ``args`` with each ``{"again": n}`` replaced by the n-th tensor the
        events of its round (``spec``) sent by value, in order (see
        ``workers.speculation.Speculation.pack``). The tensors of the latest round on each
        socket are kept until the next round's first event (one round runs at a time on a
        socket: the forward or backward of one request), or until the call whose passes
        sent them returns (the channel clears them then)."""
        if spec is None:
            return args
        held = self._rounds.get(id(sock))
        if held is None or held[0] != spec:
            held = self._rounds[id(sock)] = (spec, [])
        sent = held[1]

        def walk(value):
            if type(value) is not dict:
                return value
            if "requires_grad" in value and "tensor" in value:
                sent.append(value)
                return value
            if len(value) == 1:
                (tag, payload), = value.items()
                if tag == "again":
                    if not 0 <= payload < len(sent):
                        raise ValueError(f"a hook event of round {spec} refers to tensor "
                                         f"{payload} of the round; {len(sent)} came")
                    return sent[payload]
                if tag in ("tuple", "list"):
                    return {tag: [walk(v) for v in payload]}
                if tag == "dict":
                    return {"dict": {k: walk(v) for k, v in payload.items()}}
            return value

        return [walk(a) for a in args]

    def _run_hook(self, event: wire.Message, sock: zmq.Socket | None = None,
                  given: list | None = None) -> dict:
        """The fields of the answer to a hook event (see wire's hook_reply); ``given``: its
        arguments, where not those it carries (see _round_args)."""
        if given is None:
            given = event["args"]
        kind = event["kind"]
        if kind == "retained":  # the gradient a worker's tensor retained, after its backward
            key, _, index = event["path"].rpartition("#")
            (grad,) = [unpack(a) for a in given]
            given_tensors.take_retained(self.watched[key][int(index)], grad)
            return {}
        if kind == "leaf_hook":
            key, _, index = event["path"].rpartition("#")
            leaf = self.watched[key][int(index)]
            (grad,) = [unpack(a) for a in given]
            version = grad._vc[0]
            out = engine.run_tensor_hooks(given_tensors.worker_hooks(leaf), grad)
            # a hook that changed the gradient in place changed it for the worker too
            return {} if out is grad and grad._vc[0] == version else {"result": pack(out)}
        if kind == "vjp":
            result, bases, leaves, own = self.vjps[event["path"]]
            (grad,) = [unpack(a) for a in given]
            wanted = [t for t in bases if t.requires_grad]
            # the tensor hooks a hook put on its tensors fire on the worker's tensors (see
            # watch), whose gradient this vjp is part of: not here too, or twice
            made = given_tensors.made_here(leaves)
            muted = [(d, dict(d)) for t in leaves if (d := t._backward_hooks)
                     and id(t) not in made]
            for hooks, _ in muted:
                hooks.clear()
            try:
                with serving_vjp():
                    grads = self._vjp(result, wanted, grad, own, made)
            finally:
                for hooks, kept in muted:
                    hooks.update(kept)
            # (a leaf the hook made here has no gradient on the worker, which needs none; a
            # tensor given at several places is one here: its gradient goes to the first)
            firsts = given_tensors.first_places(wanted)
            return {"result": pack([g if first else None for t, g, first
                                    in zip(wanted, grads, firsts) if id(t) not in made])}
        entry = self.hooks.get(event["hook"]) or self.removed_while_firing.get(event["hook"])
        if entry is None:
            raise RuntimeError(f"hook {event['hook']} was removed on the client")
        fn, registered_kind, proxy, _ = entry
        if event.get("attrs"):  # what the modules set so far in the pass that fired it
            attr_changes.apply_for(proxy, event["attrs"])
        if kind == "post_accumulate":
            return post_accumulate.run(self, fn, proxy)
        if registered_kind == "tensor" and getattr(proxy, "_is_data", True) is False:
            self._fired_again(event["hook"], proxy)
        diff = bool(event.get("diff"))
        leaves: list[Tensor] = []  # the tensors the hook is given, in the order packed
        bases: list[Tensor] = []  # what each is computed from here: vjps are taken for these
        key = f"{event.ctx}:{event.req}:{event['hook']}"
        inputs = self.pending_inputs.get(event.ctx) if diff else None
        address = next((a for a, s in self.socks.items() if s is sock), None)

        names = event.get("ids") or ()
        views = event.get("views") if diff else None  # (see given_tensors.mark_view)
        store = self.given.setdefault(event.ctx, {}) if names else None
        again: set[int] = set()  # ids of the tensors an earlier event gave as they are

        def leaf(array, requires_grad, grad_fn=None):
            if len(leaves) < len(names):  # one object for one worker tensor (given_tensors)
                t, base, before = given_tensors.given(
                    store, names[len(leaves)], array,
                    lambda: made(array, requires_grad, grad_fn))
                if before:
                    again.add(id(t))
                given_tensors.note_stand_in(self.stand_ins, event.ctx, names[len(leaves)], t)
            else:
                t, base = made(array, requires_grad, grad_fn)
            given_tensors.mark_view(t, views, len(leaves))
            leaves.append(t)
            bases.append(base)
            return t

        def made(array, requires_grad, grad_fn=None):
            t = base = Tensor._make(np.array(array), None, 0)
            if diff and requires_grad:
                # the worker's tensor came out of an op: so does the hook's (named as that
                # op's node), so that the hook may change it in place (out[:, :4] = 0) as in
                # one process, recorded; it comes from the call's inputs through the worker
                # (RemoteTapBackward0), so that it can be differentiated to them
                if inputs is not None and address is not None:
                    node = RemoteTapBackward0(self, address, event.ctx,
                                              f"{key}#{len(leaves)}", inputs)
                    base = Tensor._make(base._data, node, 0)
                else:
                    base.requires_grad_(True)
                with grad_mode.set_grad_enabled(True):
                    t = given_tensors.as_made_by(grad_fn or "CloneBackward0").apply(base)
                t._grad_fn._hook_ctx = event.ctx  # (a tensor of this call's, to a vjp)
                t._reach_from = unlinked_taps_refused(t, event.ctx, proxy, kind)
                if kind in ("forward", "forward_pre"):
                    given_tensors.mark_leaf_argument(t, given_tensors.program_argument(
                        inputs, event.get("arguments"), len(leaves), array))
            elif requires_grad and kind in ("forward", "forward_pre"):
                # no graph recorded (no_grad): the worker's copy of the call's argument; the
                # hook gets the program's own tensor where the event says which it is, as
                # in one process (its tensor hooks, retain_grad and .grad are the program's)
                own = given_tensors.program_argument(
                    self.pending_inputs.get(event.ctx), event.get("arguments"), len(leaves),
                    array)
                if own is not None:
                    return own, own
                base.requires_grad_(True)
                t.register_hook = _hook_on_a_copy_refused
                t.retain_grad = _nothing  # (a leaf's retain_grad does nothing)
                return t, base
            ref = weakref.ref(t)
            t.retain_grad = lambda: given_tensors.retain_on_worker(ref())  # acts on the worker's tensor
            return t, base

        bounds = []  # where each of the event's arguments' tensors start among the leaves
        args = []
        for a in given:
            bounds.append(len(leaves))
            args.append(unpack(a, leaf, classes=True))
        versions = [t._vc[0] for t in leaves]
        nodes = [t._grad_fn for t in leaves]
        since = next(_sequence)  # every node the hook makes numbers after this
        outer, self.firing_ctx = self.firing_ctx, event.ctx
        outer_at, self.firing_at = self.firing_at, sock
        self.firing += 1
        try:
            if kind == "tensor":
                out = fn(*args)
                if out is not None and out is not args[0]:  # checked here, named as the user's
                    engine.check_hook_result(args[0], out, fn)
            else:
                with grad_mode.set_grad_enabled(diff):
                    out = fn(proxy, *args)
        finally:
            self.firing_ctx, self.firing_at = outer, outer_at
            self.firing -= 1
        # tensors the hook changed in place: the worker changes its own the same way
        name = getattr(fn, "__name__", type(fn).__name__)  # (for _pack_value)
        self._packing = (since, f"the {kind} hook {name!r} on {event['path']!r}")
        firsts = given_tensors.first_places(leaves)  # (a tensor given twice changes once)
        # (an inference tensor here took the change as one process's would, its check
        # passed: the worker's copy takes it inside the mode, "inference", optional)
        changed = [{"arg": i, "value": self._pack_value(given_tensors.as_changed(t), bases,
                                                         f"{key}:{i}", leaves),
                    "moved": t._vc[0] - versions[i], **({"inference": True}
                                                        if t.is_inference() else {})}
                   for i, t in enumerate(leaves) if t._vc[0] != versions[i] and firsts[i]]
        for i, t in enumerate(leaves):  # hooked, then changed in place: on its old version
            old = nodes[i]
            if old is not None and old is not t._grad_fn and any((old._tensor_hooks or {})
                                                                 .values()):
                raise NotImplementedError(
                    f"the {kind} hook {name!r} on {event['path']!r} of a deployed model put a "
                    "tensor hook on a tensor it was given and then changed that tensor in "
                    "place: the hook belongs to the tensor's value before the change, which "
                    "lives on the worker; register the tensor hook after the in-place change "
                    "(it then sees the gradient of the changed tensor), or change a clone and "
                    "return it")
        if kind == "forward" and out is args[-1]:
            out = None  # the output itself: the output stays what it is, as None says
        value = None if out is None else self._pack_result(
            out, leaves, bases, key, event.ctx if diff else None,
            kept=diff and kind in ("forward_pre", "forward"))
        if diff and kind in ("forward_pre", "forward"):
            self._relocate(event, leaves, bounds, proxy)
        # tensors the hook put tensor hooks on (the Grad-CAM pattern): the worker hooks the
        # real tensors, and their gradients come here to run these hooks
        made = given_tensors.made_here(leaves)  # (their hooks fire here, where their gradient comes)
        watch, retain, hooked = given_tensors.once_on_worker(leaves, made)
        answer = {"result": value, "changed": changed or None}
        if watch or retain:
            self.watched[key] = leaves
            answer.update(watch=watch, retain=retain, key=key)
        for i, t in enumerate(leaves):  # their hooks fire on the worker's tensor (leaf_hook
            # events), never here: off the node, where a gradient taken here would fire them
            if hooked[i] and t._grad_fn is not None and t._grad_fn._tensor_hooks:
                t._grad_fn._tensor_hooks.pop(t._output_nr, None)
        # those that require grad: a backward may ask the worker for their gradients
        # (autograd.grad(out, kept), hooked or not)
        taps = [i for i, t in enumerate(leaves) if diff and t._requires_grad
                and t.grad_fn is not None and i not in retain and firsts[i]
                and id(t) not in again]
        if taps:
            self.taps.setdefault(event.ctx, []).extend(
                (f"{key}#{i}", leaves[i], bases[i]) for i in taps)
            answer.update(taps=taps, key=key)
        return answer

    @staticmethod
    def _vjp(result: Tensor, wanted: list, grad: Tensor, own: str | None,
             made: frozenset = frozenset()) -> list:
        """The gradients of ``wanted`` (the hook's tensors) from ``grad`` of ``result``; where
        ``result`` is computed from tensors of this process that require grad too (``own``:
        the hook, in the user's words), in a backward of the client that grows ``.grad``
        (the one whose worker asks), a backward here that gives them their gradients as one
        process does (their hooks, ``.grad``), the hook's tensors retaining theirs, but
        those the hook made leaves here (``made``, ids), whose ``.grad`` grows."""
        tasks = getattr(engine._running, "tasks", None)
        task = tasks[-1] if tasks else None
        # (kept where the worker's pass keeps its graph: its next pass asks again)
        retain = task is not None and task.retain_graph or workers_keep()
        # the hook's tensors' nodes lead to the call's inputs, whose backward is the
        # client's own to run: a backward here stops at them
        taps = {id(n): n for t in wanted if isinstance(n := t._grad_fn, RemoteTapBackward0)}
        why = None
        if own is not None and (task is None or not task.accumulate
                                or task.needed is not None):
            why = ("this backward (autograd.grad, or backward(inputs=...)) does not take "
                   "their gradients through the hook, where one process does: take them with "
                   "a plain backward()")
        elif own is not None and _reaches_remote(result, taps):
            why = ("it also uses another call's output of the deployed model, whose backward "
                   "is the client's own: their gradients are not taken through the hook. "
                   "Compute what the hook adds in a module of the model instead")
        if own is None or why is not None:
            if why is not None:
                warnings.warn(f"{own} of a deployed model gave a tensor computed from tensors "
                              f"of this process that require grad besides its own; {why}",
                              RuntimeWarning, stacklevel=2)
            return list(torch_autograd.grad(result, wanted, grad, allow_unused=True,
                                            retain_graph=retain)) if wanted else []
        cut = [(n, n.next_functions) for n in taps.values()]
        kept = [(t, t._grad, t._retains_grad) for t in wanted if id(t) not in made]
        for t, _, _ in kept:
            t._grad = None
            t.retain_grad()
        try:
            for n, _ in cut:
                n.next_functions = ()
            torch_autograd.backward([result], [grad], retain_graph=retain)
            return [t._grad for t in wanted]
        finally:
            for n, edges in cut:
                n.next_functions = edges
            for t, g, retains in kept:
                t._grad = g
                if not retains and t._grad_fn is not None:
                    t._retains_grad = False
                    t._grad_fn._retains.pop(t._output_nr, None)

    def _fired_again(self, hook_id: int, param) -> None:
        """A deployed parameter's tensor hook that several calls of one forward feed (a
        module called twice, tied weights in two parts) fires once, with their summed
        gradient, in a plain backward (the workers hold each call's part for the last:
        workers/held_grads.py). Where that is not done (backward(create_graph=True),
        autograd.grad or backward(inputs=) naming the parameter) it fires once per call:
        say so at its first firing in such a backward that holds more calls using it (else
        when it fires again), rather than let a hook that clips or rescales act on each
        part apart unnoticed. With micro-batches it fires once per micro-batch by design."""
        task = engine.current_task_id()
        model = param.__dict__.get("_model")
        if task == -1 or (model is not None and model._chunks > 1):
            return
        seen = self._param_hook_fired.get(hook_id)  # (backward, whether said in it)
        if seen is not None and seen[0] == task:
            if not seen[1]:
                _warn_fired_apart(param)
                self._param_hook_fired[hook_id] = (task, True)
            return
        # its first firing in this backward: said now where more calls give it their part
        # apart (it may not fire again: it raises, or removes itself)
        apart = model is not None and _calls_apart(model, param._path) > 1
        if apart:
            _warn_fired_apart(param)
        self._param_hook_fired[hook_id] = (task, apart)

    def _relocate(self, event: wire.Message, leaves: list, bounds: list, module) -> None:
        """Tensor hooks that a forward hook of a part called from code running here put on
        that call's own inputs or output go on the client's tensors they stand for: the
        call's input and output are each one tensor here, which the next part's call takes
        too, so that hooks put on it from both sides fire in the order they were
        registered, with the whole gradient, as in one process (Captum's DeepLift hooks a
        module's output and the next module's input). An input is matched by position and
        value (an earlier hook may have replaced it: then its hooks stay on the worker).
        Not where the part has full backward (pre-)hooks and the hook is a forward hook:
        its tensors are then the ones those hooks wrap, whose gradients pass the module's
        backward hooks on the worker before (an output) or after (an input) the client's
        tensors, so their hooks stay there."""
        call = self.calls.get(event.ctx)
        if call is None or event["path"] != call["path"]:
            return
        if event["kind"] == "forward" and (module._get_backward_hooks()[0]
                                           or module._get_backward_pre_hooks()):
            return
        ends = [*bounds[1:], len(leaves)]
        given = leaves[bounds[0]:ends[0]]  # the positional arguments' tensors, in order
        if event["kind"] == "forward" and len(bounds) > 2:  # with_kwargs: (args, kwargs, out)
            given += leaves[bounds[1]:ends[1]]
        for t, x in zip(given, call["inputs"]):
            if (t._backward_hooks and x._requires_grad and t._data.shape == x._data.shape
                    and np.array_equal(t._data, x._data)):
                for fn in list(t._backward_hooks.values()):
                    x.register_hook(fn)
                t._backward_hooks.clear()
        if event["kind"] == "forward":
            for i, t in enumerate(leaves[bounds[-1]:]):
                if t._backward_hooks:  # for the call's output, once it is made here
                    call["outs"].append((i, list(t._backward_hooks.values()), t._data.copy()))
                    t._backward_hooks.clear()

    def _pack_result(self, value, leaves: list, bases: list, key: str, ctx: str | None,
                     kept: bool = False):
        """A hook's result: one of the tensors it was given as ``{"same": i}`` (changed in
        place or not: the worker makes the same change), a tensor computed from them with a
        key for its vector-Jacobian product, a tensor of the client's own that requires grad
        (a leaf: Captum's layer attributions return such inputs) with a key under which the
        worker's backward gives its gradient to this context's RemoteBackward0, containers
        element by element. ``ctx``: the forward's context when its graph is recorded.
        ``kept``: a forward (pre-)hook's, whose computed tensors the program may keep and
        differentiate to (Captum's layer gradients return ``output.clone()`` and take
        ``autograd.grad(out, that_clone)``): each is a tap too, keyed as its vjp with a
        trailing "=", under which the worker keeps the tensor that stands for it."""
        if isinstance(value, Tensor):
            for i, t in enumerate(leaves):
                if value is t:
                    return {"same": i}
            if value.requires_grad and value.grad_fn is None and ctx is not None:
                self.taps.setdefault(ctx, []).append((f"{key}@", value, None))
                return {"tensor": value.detach()._data, "feed": f"{key}@"}
            if value.is_inference() and grad_mode.is_grad_enabled():
                raise NotImplementedError(
                    "a client hook of a deployed model returned a tensor made in "
                    "inference_mode, for a forward that records a graph: in one process the "
                    "module's ops would refuse to save it for backward ('Inference tensors "
                    "cannot be saved for backward'), but it reaches the worker as a plain "
                    "tensor, where they would not. Make it outside inference_mode (under "
                    "no_grad), or clone() it outside the mode before returning it")
            if value.is_inference():  # (a backward hook's gradient): one there too
                return {"tensor": value._data, "inference": True}
            packed = self._pack_value(value, bases, key, leaves)
            if kept and ctx is not None and isinstance(packed, dict) and "vjp" in packed:
                self.taps.setdefault(ctx, []).append((f"{key}=", value, None))
                packed["tap"] = f"{key}="
            return packed
        if isinstance(value, (tuple, list)):
            items = [self._pack_result(v, leaves, bases, f"{key}.{i}", ctx, kept)
                     for i, v in enumerate(value)]
            return {"tuple" if isinstance(value, tuple) else "list": items}
        if type(value) is dict and all(type(k) is str for k in value):  # ({"y": out * 2})
            return {"dict": {k: self._pack_result(v, leaves, bases, f"{key}.{k}", ctx, kept)
                             for k, v in value.items()}}
        return pack(value)

    def _pack_value(self, value: Tensor, bases: list, key: str, leaves: list):
        """A tensor by value; one computed from the hook's tensors also with the key of its
        vector-Jacobian product, so that gradients flow back through it on the worker.
        ``own``: it is computed from tensors of this process that require grad besides the
        hook's (a steering vector being learned, an SAE's weights, ROME's delta): the
        worker's tensor then requires grad even where nothing of the worker's does (a
        frozen model), and the vjp gives those tensors their gradients here."""
        if value.requires_grad and value.grad_fn is not None:
            since, where = self._packing
            own = where if _reaches_own(value, leaves, bases, since) else None
            # (the value's node as the hook left it: the tensor itself may take another
            # history later, the call's output node where the call returns it)
            self.vjps[key] = (Tensor._make(value._data, value._grad_fn, value._output_nr),
                              bases, leaves, own)
            return {"tensor": value.detach()._data, "vjp": key, **({"own": True} if own else {})}
        return pack(value)

    def drop_context(self, ctx_id: str) -> None:
        """Forget the client-side hook graphs of a context whose backward is over."""
        prefix = f"{ctx_id}:"
        self.taps.pop(ctx_id, None)
        for store in (self.vjps, self.watched):
            for key in [k for k in store if k.startswith(prefix)]:
                del store[key]
