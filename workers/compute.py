"""The requests that run a worker's stages (``workers/stages.py`` holds and loads them):
forward and backward of one context, and releasing graphs (pipelined training steps:
``workers/steps.py``).

Each handler runs as the job of one request (``workers/server.py`` starts it; see
``workers/state.py`` for when). A handler that must wait (for a neighbour's activation in a
training step) asks the state for the wait and sleeps through ``Worker.sleep_on``; the
worker serves everyone else meanwhile.
"""
from __future__ import annotations

import time

import numpy as np

import disthook
from disthook import hooks as toolkit
from disthook import wire
from disthook._dtype import default_dtype_as
from disthook.amp import autocast_mode
from disthook.amp.autocast_mode import region_as
from disthook.autograd import engine, inference
from disthook.service import op_calls, values
from disthook.service.loop import NO_REPLY, send_frames
from disthook.service.values import pack, tensors_in, unpack
from disthook.utils.checkpoint import checkpoint
from workers import attr_changes, form, given_args, held_grads, stage_grads, twice_split
from workers.given_args import changed_arguments, given_now, region_casts
from workers.outputs import answer_items, refuse_opaque
from workers.speculation import BACKWARD_KINDS, EarlyAnswer, run_ahead
from workers.stage_parts import _as_computed, _as_received, _stream_state, _submodule, rss_bytes
from workers.state import Context
from workers.values import kept_grads_changed
from workers.versions import carries_write, note_pins, upstream_pins

__all__ = ["ComputeHandlers", "rss_bytes"]

class ComputeHandlers:
    """The stage-running requests of ``Worker`` (a mixin: it uses the worker's sockets,
    state and helpers)."""

    def on_forward(self, job):
        """Run the stage on the activations; pass them on, or answer the client if last."""
        msg = job.msg
        early = None
        try:
            st = self._stage(job)
            calls = msg.get("optimizer_calls")
            if calls is not None:  # the client's optimizer calls not sent yet, before all else
                if st.index >= len(calls):
                    raise ValueError(f"forward: optimizer_calls must list the optimizer calls "
                                     f"of every stage; it has {len(calls)} lists, this is "
                                     f"{st.name}")
                if carries_write(calls):  # the calls it passes here keep their weights
                    note_pins(st, self.state, job)
                for spec in calls[st.index]:
                    self._optimizer_action(st, spec, job.client)
            grad = msg["grad_enabled"]
            inputs = []

            def leaf(a, flag: bool):
                # the received array itself (a writable view of its frame, which nothing
                # else reads), unless the forward may run again (then it must start from
                # the frame as it came: the forward may change its input in place)
                t = disthook.from_numpy(a if job.spec is None else np.array(a))
                if job.spec is not None:  # a hook event sends the frame, not another copy
                    job.spec.keep_pristine(t, a)
                if flag and (t.is_floating_point() or t.is_complex()):
                    # a fresh leaf per context: its grad goes back; under no_grad too, as the
                    # program's tensor it stands for requires grad (a hook may hook it)
                    t.requires_grad_(True)
                inputs.append(t)
                return t

            job.micro_batch = self.captures.micro_batch = msg.get("mb")
            if grad:  # per client (with keys: per key), see workers.limits
                self.check_contexts(st, job.client)
            stop, path = msg.get("stop"), msg.get("path")
            stop_here = stop is not None and stop.split(".", 1)[0] in st.module._modules
            if not msg.get("op"):  # (an op on kept values is not one of the stage's forwards)
                st.forwards += 1
            if path is not None or msg.get("op"):  # one call by code running on the client
                return self._call_submodule(job, st, path, grad, leaf, inputs)
            flags = msg.get("requires_grad") or [True] * len(msg["inputs"])
            # what goes on to the answer: the program's input changed in place at stage 0
            # (changed_arguments), whether a stage's region kept a cast (check_one_cast),
            # and (stage 0) the program's input as the stage takes it (_stage_facts)
            onward: list = [None, None, ()]

            def compute():
                inputs.clear()  # fresh leaves each time the forward runs
                for a, flag, made_in in zip(msg["inputs"], flags,
                                            msg.get("inference") or [False] * len(flags)):
                    t = leaf(a, flag)
                    if made_in:  # made in inference_mode: the stage's ops refuse to save it
                        inference.made_inference(t)
                if msg.get("rng"):  # the client's random stream, passed stage to stage
                    job.rng = msg["rng"]
                    disthook.random._set_stream_state(msg["rng"])
                with disthook.set_grad_enabled(grad), default_dtype_as(msg.get("default_dtype")), \
                        region_as(msg.get("autocast")):
                    given = [_as_computed(t) if st.index > 0
                             else values.as_argument(t, i)
                             for i, t in enumerate(inputs)]
                    for t, name in zip(given, msg.get("names") or ()):  # the previous
                        self.name_as(job, t, name)  # stage's output: one object (hooks)
                    before = [given_now(t, i) for i, t in enumerate(given) if st.index == 0]
                    onward[2] = given if st.index == 0 else ()
                    if msg.get("custom_view") and st.index > 0:
                        values.mark_custom_view(given[0], msg["custom_view"])
                    if stop_here:  # the output of module `stop` is the answer: no later stage
                        out = toolkit.stop_after(st.module, stop, *given)
                    else:
                        out = st.module(*given)
                    onward[1] = bool(autocast_mode.cached_leaves() or msg.get("cast"))
                onward[0] = changed_arguments(before, st.name) or msg.get("changed")
                return out

            nxt = None if stop_here else st.neighbours.get("next")
            # what the stage's modules set
            snap = attr_changes.snapshot(st.module, "", st.shared)

            def finish(out, ahead: str | None = None):
                """Keep the graph of output ``out`` and pass it on, or answer the client
                (``ahead``: the round that decides whether the answer stands)."""
                if nxt is None and not isinstance(out, disthook.Tensor):  # (tuples, dicts)
                    return answer_items(self, job, out, inputs, grad, st.name, {
                        "rng": _stream_state(msg), "changed": onward[0], "cast": onward[1],
                        **_stage_facts(msg, grad, list(tensors_in(out)), st, onward[2],
                                       inputs)[1],
                        "attrs": attr_changes.merged(msg.get("attrs"), snap.changes()),
                        "forms": form.forms(st, job, msg.get("forms"))}, ahead)
                if not isinstance(out, disthook.Tensor):
                    raise TypeError(f"{stop if stop_here else st.name} returned "
                                    f"{type(out).__name__}; a stage must return one Tensor")
                self._keep(job, grad and out.requires_grad, Context(
                    job.client, inputs, out, job.retained, time.monotonic(), taps=job.taps))
                rng = _stream_state(msg)
                # the output's graph misses the stage's input here or at an earlier stage
                inputs_cut, facts = _stage_facts(msg, grad, [out], st, onward[2], inputs)
                cut = bool(grad and out.requires_grad and (msg.get("cut") or inputs_cut))
                if nxt is not None:
                    fields = {"model": st.model, "stage": st.index + 1,
                              "inputs": [out.detach()._data], "grad_enabled": grad,
                              "requires_grad": [out.requires_grad],
                              "reply_to": msg["reply_to"], "mb": msg.get("mb"), "stop": stop,
                              "optimizer_calls": calls, "rng": rng,
                              "attrs": attr_changes.merged(msg.get("attrs"), snap.changes()),
                              "changed": onward[0], "cast": onward[1],
                              "names": self._names_of(job, [out])}
                    if cut:
                        fields["cut"] = True
                    fields.update(facts)
                    if out.is_inference():  # (a hook's result made in inference_mode)
                        fields["inference"] = [True]
                    if values.custom_view(out) is not None:  # (a full backward hook's view)
                        fields["custom_view"] = values.custom_view(out)
                    passed = form.forms(st, job, msg.get("forms"))
                    if passed:
                        fields["forms"] = passed
                    for carried in ("default_dtype", "autocast"):  # (absent: float32, none)
                        if msg.get(carried):
                            fields[carried] = msg[carried]
                    pins = job.pins or upstream_pins(job)  # calls a write passed
                    if pins:
                        fields["pins"] = [list(p) for p in pins]
                    self._count(st.model, "bytes_to_peers", fields["inputs"][0].nbytes)
                    send_frames(nxt, wire.encode("forward", fields, req=msg.req,
                                                 ctx=msg.ctx))
                else:
                    self._to_client(job, "ok", {"result": {
                        "output": out.detach()._data, "requires_grad": out.requires_grad,
                        "grad_fn": None if out.grad_fn is None else out.grad_fn.name(),
                        "custom_view": values.custom_view(out),
                        "inference": out.is_inference() or None,
                        "saved": values.saved_by_its_node(out),
                        "argument": values.returned_argument(out),
                        "cut": cut, **facts, "rng": rng,
                        "changed": onward[0], "cast": onward[1],
                        "attrs": attr_changes.merged(msg.get("attrs"), snap.changes()),
                        "forms": form.forms(st, job, msg.get("forms")),
                        "name": (self.output_names(job, [out]) or [None])[0]},
                     "ahead": ahead})

            early = EarlyAnswer(finish) if nxt is None else None
            with attr_changes.watching(job, snap):
                out = self._run_forward(job, st, compute, early)
            if early is None or not early.sent:
                finish(out)
        # (the client, not the previous stage, hears it; sys.exit in a part: error_reply)
        except (Exception, SystemExit) as exc:  # noqa: BLE001
            self._drop_early(job, early)
            self._to_client(job, "error", self.error_reply(exc, job, msg.get("inputs")))
        return NO_REPLY

    def _keep(self, job, keep: bool, context: Context) -> None:
        """Keep the forward graph of the job's context for its backward (when ``keep``), in
        place of one an earlier run of the forward kept (see ``EarlyAnswer``)."""
        if keep:
            self.check_graph_bytes(job.stage, job.client, context)
            context.version = job.version  # its backward computes with the same weights
            self.state.keep_context(job.model, job.msg.ctx, context)
        else:
            self.state.end_context(job.model, job.client, job.msg.ctx)

    def _drop_early(self, job, early: EarlyAnswer | None) -> None:
        """A forward failed after its answer went early: the graph it kept goes (the client
        did not use that answer, or hears of the failure with its next request)."""
        if early is not None and early.went:
            self.state.end_context(job.model, job.client, job.msg.ctx)

    def _call_submodule(self, job, st, path: str | None, grad: bool, leaf, inputs: list):
        """Run the submodule at ``path`` (or the op ``msg["op"]``) on the call's arguments
        (``msg["call"]``: the packed ``(args, kwargs)``, each tensor a fresh leaf made by
        ``leaf``; a value kept here or on a peer named by its id) and answer the client with
        its packed output, or with ``keep`` the description of its tensors, kept here; the
        graph is kept for the backward of its tensors."""
        msg = job.msg
        early = None
        try:
            snap = None  # the part's modules' attributes, to tell the client what it set
            if msg.get("op"):
                module = op_calls.op_function(msg["op"], msg.get("params"))
                path = f"<{msg['op'].rpartition('.')[2]}>"
            else:
                module = _submodule(st, path)
                snap = attr_changes.snapshot(module, path, st.shared)
            kept = set()  # (the arrays of values kept on workers, not the caller's tensors)
            call = self._resolve_refs(job, st.model, msg["call"], kept)
            views = msg.get("views") or ()  # [output_nr, name] of each that is a custom view

            given: list = []  # the program's tensors the part is given (given_now)
            given_kept: list = []  # and the values kept on workers (given_now too)
            changed, casts = [None], [None]  # changed_arguments's, region_casts's
            keeps: list = []  # those it changed with a graph: outputs of the call too

            def received(a, flag, name):
                t = _as_received(leaf(a, flag), name or id(a) in kept)
                view = views[len(inputs) - 1] if len(inputs) <= len(views) else None
                if view and t.grad_fn is not None:  # the client's tensor is a custom view
                    values.mark_custom_view(t, view)
                (given_kept if id(a) in kept else given).append(given_now(t, len(inputs) - 1))
                return values.as_argument(t, len(inputs) - 1)

            def compute():
                inputs.clear()  # fresh leaves each time the forward runs
                given.clear()
                given_kept.clear()
                keeps.clear()
                args, kwargs = unpack(call, received)
                held = [] if msg.get("op") else values.containers_in((args, kwargs))
                if msg.get("rng"):  # the client's random stream: drawn from here, handed back
                    job.rng = msg["rng"]
                    disthook.random._set_stream_state(msg["rng"])
                with disthook.set_grad_enabled(grad), default_dtype_as(msg.get("default_dtype")), \
                        region_as(msg.get("autocast")):
                    ckpt = msg.get("checkpoint")
                    if ckpt and grad:  # called inside torch.utils.checkpoint on the client
                        out = checkpoint(module, *args, use_reentrant=False,
                                         early_stop=bool(ckpt.get("early_stop", True)),
                                         preserve_rng_state=bool(ckpt.get("rng", True)),
                                         **kwargs)
                    else:
                        out = module(*args, **kwargs)
                    casts[0] = region_casts(given)
                if not msg.get("op"):  # (a kept value too: the program's tensor stands for it)
                    changed[0] = changed_arguments(given + given_kept, path,
                                                   keeps if msg.get("keep") else None)
                    given_args.refuse_changed_containers(held, path)
                return out

            def finish(out, ahead: str | None = None):
                outs = list(tensors_in(out))
                refuse_opaque(out, f"the module at {path!r}")
                # what the part set on its modules; its tensors with a graph are outputs too
                with_graph = attr_changes.WithGraph() if msg.get("keep") else None
                attrs = snap and snap.changes(with_graph)
                if with_graph is not None:
                    outs += with_graph.tensors + keeps
                saved: set = set()  # (what the graph saved: the same walk)
                cut, unreached = _graph_facts(msg, grad, outs, inputs, module, path, saved)
                if msg.get("keep"):  # room for the values first: refused, it keeps no graph
                    self.check_value_room(job, st.model, len(outs),
                                          sum(o._data.nbytes for o in outs))
                else:  # going back, weighed as if kept before a view is copied out for it
                    self.check_answer_size(job, sum(o._data.nbytes for o in outs))
                self._keep(job, grad and any(o.requires_grad for o in outs), Context(
                    job.client, inputs, outs, job.retained, time.monotonic(),
                    direct=True, taps=job.taps))
                if msg.get("keep"):  # the values stay here: the client gets what they are
                    records = iter(self._keep_outputs(job, st.model, msg.ctx, outs,
                                                      saved=saved))
                    packed = pack(out, lambda _t: next(records))
                    with_graph.fill(records)
                    for entry in changed[0] or ():  # (then those of keeps)
                        if entry.get("graph"):  # (an output of its own: not "argument")
                            entry["graph"] = dict(next(records), argument=None)
                else:
                    packed = pack(out)
                self._to_client(job, "ok", {"result": {
                    "output": packed, "requires_grad": [o.requires_grad for o in outs],
                    "rng": _stream_state(msg), "pin": job.as_of, "attrs": attrs,
                    "changed": changed[0], "casts": casts[0],
                    "cut": cut,
                    "unreached": unreached, "saved_args": [  # (the given ones, copied)
                        nr for t, nr, *_ in given + given_kept if id(t._vc) in saved] or None,
                    "forms": form.forms(st, job),
                    "names": self.output_names(job, outs)}, "ahead": ahead})

            early = EarlyAnswer(finish)
            with attr_changes.watching(job, snap):
                out = self._run_forward(job, st, compute, early)
            if not early.sent:
                finish(out)
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - the client hears it all
            self._drop_early(job, early)
            self._to_client(job, "error", self.error_reply(exc, job))
        return NO_REPLY

    def _run_forward(self, job, st, compute, early: EarlyAnswer | None = None):
        """``compute()``, a forward of stage ``st``: run ahead of the answers of its client
        forward hooks when the job's client has some on the stage (see
        ``workers/speculation.py``; ``early``: how its result goes to the client before
        their answers, when it goes to the client)."""
        for (who, _), info in st.hook_info.items():
            if who == job.client and info["runs"] == "client" \
                    and info["kind"] in ("forward_pre", "forward"):
                return run_ahead(self, job, st, compute, early=early)
        return compute()

    def _run_backward_pass(self, job, st, retained: list, compute,
                           early: EarlyAnswer | None = None):
        """``compute()``, a backward of stage ``st``: run ahead of the answers of client
        hooks that fire in it (backward hooks, tensor hooks, tensor hooks that forward hooks
        put on their tensors) when the job's client has some on the stage (see
        ``workers/speculation.py``); ``compute(True)`` keeps the graph, and the ``.grad`` it
        adds to are the parameters' and those of ``retained`` (client hooks' retain_grad:
        (client, hook id, key, tensor)). ``early``: as for ``_run_forward``."""
        for (who, _, kind) in st.hook_records:
            if who == job.client and kind in BACKWARD_KINDS:
                grads = (*st.params, *(t for *_, t in retained))
                return run_ahead(self, job, st, lambda: compute(True), "backward", grads,
                                 early)
        return compute()

    def on_backward(self, job):
        """Backward through the stage's graph of this context; pass the input's gradient on."""
        msg = job.msg
        try:
            st = self._stage(job)
            context = self.state.context(st.model, job.client, msg.ctx)
            if context is None:
                raise RuntimeError(
                    f"no forward graph of context {msg.ctx!r} on {st.name}: it ran "
                    "backward already without retain_graph=True, was released, or expired")
            if (not isinstance(context.output, list) or msg.get("start")) \
                    and len(msg["grads"]) != 1:
                raise ValueError(f"backward of {st.name} takes one gradient, got "
                                 f"{len(msg['grads'])}")
            grads_given = self._resolve_grads(job, st.model, msg["grads"])
            g = grads_given[0]
            retain = msg["retain_graph"]
            job.micro_batch = self.captures.micro_batch = msg.get("mb")
            tapped = dict(msg.get("tapped") or {})  # gradients of hooked tensors, asked for
            taps = stage_grads.taps_here(st, context, msg.get("taps") or ())
            # None: the next stage's output did not depend on this one's (a hook replaced
            # it by a constant); nothing flows back, and the context ends as after backward
            outputs = context.output if isinstance(context.output, list) else [context.output]
            given = grads_given if isinstance(context.output, list) else [g]
            start = msg.get("start")
            if start is not None:  # from a tensor a client hook kept, down to the inputs
                if start not in context.taps:
                    raise RuntimeError(
                        f"{st.name} holds no tensor {start!r} of a hook in context "
                        f"{msg.ctx!r}: its forward ran under no_grad, or the tensor is no "
                        "longer part of the graph")
                outputs, given = [context.taps[start]], [g]
            seeds = [(i, o, gr) for i, (o, gr) in enumerate(zip(outputs, given))
                     if gr is not None and o.requires_grad]
            # the gradients the client gave (not a peer's): in-place changes go back
            given_here = start is None and (context.direct or not st.neighbours.get("next"))
            made: list = []  # (number, tensor, version) of the given gradients, see pairs
            if msg.get("create_graph"):  # a backward whose own graph is kept (double backward)
                return self._backward_with_graph(job, st, context, outputs, given, msg)

            def pairs():
                """(output, its gradient): the received arrays themselves (nothing else
                reads them), or copies where the backward may run again (a hook may change
                a gradient in place); one tensor for an array given twice."""
                made.clear()
                tensors: dict = {}
                for i, _, gr in seeds:
                    t = tensors.get(id(gr))
                    if t is None:
                        t = tensors[id(gr)] = disthook.from_numpy(
                            gr if job.spec is None else np.array(gr))
                    made.append((i, t, t._vc[0]))
                return [(o, t) for (_, o, _), (_, t, _) in zip(seeds, made)]

            # an autograd.grad to taps alone, all of them here or at a later stage (whose
            # gradients came with the message): stop at them, keep the rest of the graph
            # (the part below them) for a backward from them later
            to_taps = (not msg.get("inputs", True) and bool(taps) and set(
                msg.get("taps") or ()) <= {key for key, _ in taps}.union(tapped))
            for t in context.inputs:
                t.grad = None  # the gradient of this backward only goes to the previous stage
            # what the modules' hooks set
            snap = attr_changes.snapshot(st.module, "", st.shared)

            def attrs():  # the earlier stages' (in a chain) and this stage's
                return attr_changes.merged(msg.get("attrs"), snap.changes())

            if to_taps:
                stage_grads.run_backward(pairs(), [], taps, tapped, True, False)
                self._send_retained(context)
                self._to_client(job, "ok", {"result": {
                    "grads": [None] * len(context.inputs), "tapped": tapped,
                    "attrs": attrs(), "forms": form.forms(st, job)}})
                return NO_REPLY
            tapped_before = dict(tapped)
            # parameters that later calls of the client's backward use too (held_grads)
            holding = held_grads.plan(self.state, st, job.client, msg)

            def compute(keep: bool = False):  # keep: the graph, for a run again
                for t in context.inputs:
                    t.grad = None
                tapped.clear()
                tapped.update(tapped_before)
                with engine.holding_leaves(holding and holding.begin()) as held, \
                        twice_split.watching(context.twice_of or context, st.module,
                                             msg.get("pass"), context.twice_of is not None):
                    grads = stage_grads.run_backward(pairs(), context.inputs, taps, tapped,
                                                     retain or keep or context.keep_graph,
                                                     msg.get("accumulate", True))
                if held is not None:
                    held.flush()
                if given_here:
                    values.given_changes(made, tapped)
                    kept_grads_changed(made, msg["grads"], grads_given)
                return grads

            prev = None if context.direct else st.neighbours.get("prev")
            # when no input needed a gradient, no earlier stage kept a graph: answer now
            if not any(t.requires_grad for t in context.inputs):
                prev = None
            # the answer goes to the client: before the hooks' answers, when they are ahead
            # (not when gradients client hooks retained go to the client after the pass)
            keep = msg.get("keep_grads") if prev is None else None

            def answer(grads, ahead=None):  # input gradients kept here, with keep_grads
                if keep:
                    grads = self._keep_grads(job, st.model, keep, grads)
                self._to_client(job, "ok", {"result": {"grads": grads, "tapped": tapped,
                                                       "attrs": attrs(),
                                                       "forms": form.forms(st, job)},
                                            "ahead": ahead})

            early = None if prev is not None or context.retained else EarlyAnswer(answer)
            with attr_changes.watching(job, snap):
                grads = self._run_backward_pass(job, st, context.retained, compute, early)
            if holding is not None:
                holding.commit()
            self._send_retained(context)
            if not retain:
                self.state.end_context(st.model, job.client, msg.ctx)
            if early is not None and early.sent:
                return NO_REPLY
            if prev is not None:
                fields = {"model": st.model, "stage": st.index - 1, "grads": grads,
                          "retain_graph": retain, "reply_to": msg["reply_to"],
                          "mb": msg.get("mb"), "taps": msg.get("taps"),
                          "tapped": tapped or None, "accumulate": msg.get("accumulate"),
                          "inputs": msg.get("inputs"), "hold": msg.get("hold"),
                          "attrs": attrs()}
                self._count(st.model, "bytes_to_peers",
                            sum(np.asarray(g).nbytes for g in grads if g is not None))
                send_frames(prev, wire.encode("backward", fields, req=msg.req, ctx=msg.ctx))
            else:
                answer(grads)
        except (Exception, SystemExit) as exc:  # noqa: BLE001
            self._to_client(job, "error", self.error_reply(exc, job))
        return NO_REPLY

    def _send_retained(self, context) -> None:
        """The gradients that tensors client hooks called retain_grad on got in this
        backward, to those clients (their tensors' ``.grad`` there)."""
        for who, hook_id, key, t in context.retained:
            if t.grad is not None:
                self._call_client(who, hook_id, "retained", key, [pack(t.grad)])

    def _backward_with_graph(self, job, st, context, outputs, given, msg):
        """``backward(create_graph=True)`` (or ``autograd.grad`` with it) of a call's context:
        the input gradients keep their graph, from the given gradients (fresh leaves here),
        the call's inputs and the stage's parameters, and stay here as values under
        ``keep_grads``; that graph is kept as a context of the same id, whose backward (a
        gradient penalty's) gives the gradients of the given gradients and of the inputs and
        adds to the parameters'. Answers the kept gradients and which given ones it used."""
        keep = msg.get("keep_grads")
        # only parameters: (key, p)
        taps = stage_grads.taps_here(st, context, msg.get("taps") or ())
        if not context.direct or not keep or msg.get("start") or len(taps) != len(
                msg.get("taps") or ()) or any(not k.startswith("param:") for k, _ in taps):
            raise NotImplementedError(
                "backward(create_graph=True) through a deployed model runs only on a part "
                "called by the forward on the client, without hooks that keep tensors")
        used = [i for i, (o, gr) in enumerate(zip(outputs, given))
                if gr is not None and o.requires_grad]
        leaves = [disthook.from_numpy(np.array(given[i])).requires_grad_(True) for i in used]
        roots = [outputs[i] for i in used]
        inputs = context.inputs
        for t in inputs:
            t.grad = None
        with disthook.enable_grad(), twice_split.watching(
                context.twice_of or context, st.module, msg.get("pass"),
                context.twice_of is not None):
            if msg.get("accumulate", True):  # a backward: the parameters' .grad keep a graph
                fresh = [(n, p) for n, p in st.module.named_parameters()  # (no graph before)
                         if p.grad is None or p.grad.grad_fn is None]
                disthook.autograd.backward(roots, leaves, retain_graph=True,
                                           create_graph=True)
                got = [t.grad for t in inputs]
                params = [(n, p.grad) for n, p in fresh if p.grad is not None
                          and p.grad.requires_grad]  # kept too: p.grad's own graph, here
            else:  # an autograd.grad: the inputs' gradients and the named parameters'
                wanted = [t for t in inputs if t.requires_grad] + [p for _, p in taps]
                found = disthook.autograd.grad(roots, wanted, leaves, retain_graph=True,
                                               create_graph=True, allow_unused=True) \
                    if roots and wanted else [None] * len(wanted)
                by_id = {id(t): g for t, g in zip(wanted, found)}
                got = [by_id.get(id(t)) for t in inputs]
                params = [(key, g) for (key, _), g in zip(taps, found[len(found) - len(taps):])
                          if g is not None]
        for t in inputs:
            t.grad = None
        made = [g for g in got if g is not None] + [g for _, g in params]
        records = iter(self._keep_outputs(job, st.model, keep, made))
        context.keep_graph = True
        self.state.keep_context(st.model, keep, Context(
            job.client, [*leaves, *inputs], made, [], time.monotonic(), direct=True,
            keep_graph=True, twice_of=context))
        if not msg["retain_graph"]:
            self.state.end_context(st.model, job.client, msg.ctx)
        self._to_client(job, "ok", {"result": {
            "grads": [None if g is None else next(records) for g in got], "seeded": used,
            "params": [[n, next(records)] for n, _ in params]}})
        return NO_REPLY

    def on_release(self, job):
        """Forget the graphs of contexts whose outputs the client dropped; the next stage
        forgets them too."""
        msg = job.msg
        st = self.stages.get(msg["model"])
        if st is None:  # unloaded meanwhile: nothing left to release
            return NO_REPLY
        self.state.release(st.model, job.client, msg["contexts"])
        nxt = st.neighbours.get("next")
        if nxt is not None:  # the whole pipeline forgets the client's contexts
            send_frames(nxt, wire.encode("release", {
                "model": st.model, "contexts": msg["contexts"],
                "reply_to": job.client.hex()}))
        return NO_REPLY


def _graph_facts(msg, grad: bool, outs: list, inputs: list, module, path: str = "",
                 saved: set | None = None) -> tuple[list[int], list | None]:
    """From one walk of the graph of ``outs`` (``values.graph_facts``, which puts in
    ``saved`` what the graph saved), for the client's node of the call: the numbers of
    ``inputs`` it does not reach, and the names of ``module``'s parameters (in the whole
    model, under each of a tied one's names) it does not reach (all where the outputs have
    no graph: a chain's later stage may have one; None for an op's call). Nothing outside
    grad mode."""
    if not grad:
        return [], None
    return values.graph_facts(outs, inputs, [] if msg.get("op") else list(
        module.named_parameters(prefix=path, remove_duplicate=False)), saved)


def _stage_facts(msg, grad: bool, outs: list, st, firsts, inputs: list) -> tuple:
    """The numbers of ``inputs`` (the stage's) that the graph of ``outs`` does not reach,
    and what a chain's stage passes on to the answer, those of the earlier stages with its
    own (where there are any): ``unreached``, the parameters their graphs do not reach;
    ``saved_input``, whether stage 0's graph saved the program's input (``firsts``: the
    tensors it took), which the client's node then checks for a change in place. One walk."""
    saved = set() if firsts else None
    cut, mine = _graph_facts(msg, grad, outs, inputs, st.module, saved=saved)
    unreached = [*(msg.get("unreached") or ()), *(mine or ())]
    facts = {"unreached": unreached} if unreached else {}
    if msg.get("saved_input") or saved and any(id(t._vc) in saved for t in firsts):
        facts["saved_input"] = True
    return cut, facts
