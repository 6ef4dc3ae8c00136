"""A pipelined training step on a worker: the stage's list of a schedule (GPipe, 1F1B, ZB-H1,
ZB-batched; ``disthook.distributed.schedule``) run against its neighbour stages
(``StepHandlers``, a mixin of ``Worker``). Activations and gradients come and go as ``pipe``
messages, kept in the state's mailbox until the schedule takes them
(``workers.step_run.StepRun``).
"""
from __future__ import annotations

import time

import numpy as np

import disthook
from disthook import wire
from disthook._dtype import default_dtype_as
from disthook.amp.autocast_mode import region_as
from disthook.autograd.split import backward_split, run_together
from disthook.distributed.spec import build_module
from disthook.service.loop import PIPE_COPY_BELOW, send_frames
from workers import attr_changes, form
from workers.links import Link
from workers.stage_parts import _as_computed, rss_bytes
from workers.step_run import StepRun

__all__ = ["StepHandlers"]


class StepHandlers:
    """``train_step`` requests, for ``Worker`` (a mixin: it uses the worker's stages, state,
    sockets and the compute handlers' ``_run_forward`` / ``_run_backward_pass``)."""

    def on_train_step(self, job):
        """Run this stage's list of a pipeline schedule (see disthook.distributed.schedule):
        micro-batch forwards and backwards, activations and gradients to and from the
        neighbour stages; the last stage computes each micro-batch's loss, scaled."""
        msg = job.msg
        st = self._stage(job)
        # what the stage's modules set in it
        snap = attr_changes.snapshot(st.module, "", st.shared)
        # [kind, mb, this thread's CPU seconds, wall start, wall end] per action (a receive:
        # from when the stage began to wait for it, or when it took it, to when it took it;
        # its CPU is what this thread's loop did meanwhile: reading, decoding and handling
        # what came, its own message and any other)
        timeline: list[list] = []
        if msg.get("optimizer_calls"):  # the client's optimizer calls first (arithmetic on
            # the stage's weights, timed as such: mb -1)
            started, cpu = time.perf_counter(), time.thread_time()
            for spec in msg["optimizer_calls"]:
                self._optimizer_action(st, spec, job.client)
            timeline.append(["optimizer", -1, time.thread_time() - cpu, started,
                             time.perf_counter()])
        step, model = msg["step"], st.model
        first, last = "prev" not in st.neighbours, "next" not in st.neighbours
        loss_fn = None
        run = StepRun(model, step, msg["schedule"])
        held: dict[int, tuple] = {}  # micro-batch -> (input leaf, output or scaled loss)
        # a split backward (zb-h1; zb-batched, finer and its W's taken together):
        # micro-batch -> its weights' part, run by its "weight" or "weight_batch"
        kinds = {kind for kind, _ in msg["schedule"]}
        split, shallow = bool(kinds & {"weight", "weight_batch"}), "weight_batch" in kinds
        weights_later: dict[int, object] = {}
        received: dict[tuple, np.ndarray] = {}
        grads_in: dict[int, object] = {}
        losses: dict[int, float] = {}
        # compute time; the most memory held, read when the step holds more forwards'
        # graphs (their activations, up to their W's) than at any read before, and at its end
        busy, peak, most = 0.0, rss_bytes() or 0, 0
        waited_since, waited_cpu = None, 0.0
        try:
            # (a loss refused here, or a request missing what this stage needs, aborts
            # the step on the other stages too)
            if last and isinstance(msg.get("loss"), dict):
                loss_fn = _loss_function(msg["loss"], self.model_module_allowed)
            _check_step(msg, first, last, st.name)
            if msg.get("rng"):  # the stream the client made for this stage: drawn from
                job.rng = msg["rng"]  # here (kept while the step waits, see sleep_on)
                disthook.random._set_stream_state(msg["rng"])
            while True:
                action = run.next(self.state.mailbox)
                kind = action[0]
                if kind == "done":
                    break
                if kind == "abort":
                    raise RuntimeError(f"the step was aborted: {action[1]}")
                if kind == "wait":
                    (_, _, what, mb), _ = action[1]
                    waited_since = waited_since or time.perf_counter()
                    cpu_before = time.thread_time()
                    if not self._came_on_links(action[1]) and not self.wait_on_links(
                            action[1]):
                        wait = self.state.wait_for_pipe(
                            job, action[1], f"the {what} of micro-batch {mb} ({st.name})")
                        if wait is not None:  # (the links were read just now)
                            self.sleep_on(wait, links_read=True)
                    waited_cpu += time.thread_time() - cpu_before
                    continue
                if kind == "recv":
                    received[(action[1], action[2])] = action[3]["data"]
                    now = time.perf_counter()
                    timeline.append([f"recv_{action[1]}", action[2], waited_cpu,
                                     waited_since or now, now])
                    waited_since, waited_cpu = None, 0.0
                    continue
                mb = action[1]
                job.micro_batch = self.captures.micro_batch = mb
                started, cpu = time.perf_counter(), time.thread_time()
                if kind == "forward":
                    st.forwards += 1
                    data = msg["inputs"][mb] if first else received.pop(("act", mb))

                    def compute(data=data, mb=mb):
                        # the received array itself (a writable view of its frame, which
                        # nothing else reads), unless the forward may run again (client
                        # hooks running ahead): then from the frame as it came each time
                        leaf = disthook.from_numpy(_fresh(data, job))
                        if not first and (leaf.is_floating_point() or leaf.is_complex()):
                            leaf.requires_grad_(True)
                        with default_dtype_as(msg.get("default_dtype")), region_as(msg.get("autocast")):
                            out = st.module(leaf if first else _as_computed(leaf))
                            if last:
                                target = disthook.from_numpy(_fresh(msg["targets"][mb], job))
                                loss = loss_fn(out, target)
                                losses[mb] = float(loss.item())
                                out = loss * msg["scales"][mb]
                        return leaf, out

                    held[mb] = self._run_forward(job, st, compute)
                    end, spent = time.perf_counter(), time.thread_time() - cpu
                    busy += end - started
                    timeline.append([kind, mb, spent, started, end])
                    # what the worker notes of it (the graph's bytes, against the client's
                    # cap; the memory held) after its timeline's entry: not the forward's
                    self.keep_step_graph(st, job.client, step, mb, held[mb])  # (limits)
                    if len(held) + len(weights_later) > most:  # (1F1B's steady state: not
                        most = len(held) + len(weights_later)  # a read a forward)
                        peak = max(peak, rss_bytes() or 0)
                    continue
                elif kind == "send_act":  # the output's array itself (no detached Tensor
                    # made only to read it; not numpy(), which refuses bfloat16 as torch's)
                    self._pipe_send(st, "next", step, "act", mb, held[mb][1]._data)
                elif kind == "backward":
                    leaf, out = held.pop(mb)
                    self.drop_step_graph(model, job.client, step, mb)
                    g = None if last else received.pop(("grad", mb))

                    def compute(keep: bool = False, leaf=leaf, out=out, g=g, mb=mb):
                        leaf.grad = None  # a run again starts from nothing
                        seed = None if g is None else [disthook.from_numpy(_fresh(g, job))]
                        if split:  # the weights' gradients wait for this micro-batch's W
                            weights_later[mb] = backward_split([out], seed, st.params,
                                                               retain_graph=keep,
                                                               shallow=shallow)
                        else:
                            disthook.autograd.backward([out], seed, retain_graph=keep)
                        return leaf.grad

                    grads_in[mb] = self._run_backward_pass(job, st, job.retained, compute)
                    busy += time.perf_counter() - started
                elif kind == "weight":
                    weights_later.pop(mb).run()
                    busy += time.perf_counter() - started
                elif kind == "weight_batch":  # mb: the run of micro-batches, one action
                    run_together([weights_later.pop(i) for i in mb])
                    busy += time.perf_counter() - started
                    cpu, end = (time.thread_time() - cpu) / len(mb), time.perf_counter()
                    # the timeline's entry per micro-batch, each an equal share
                    timeline.extend([kind, i, cpu, started, end] for i in mb)
                    continue
                else:  # send_grad
                    g = grads_in.pop(mb)
                    if g is None:
                        raise RuntimeError(f"{st.name}: no gradient reached the input of "
                                           f"micro-batch {mb}")
                    self._pipe_send(st, "prev", step, "grad", mb, g._data)
                timeline.append([kind, mb, time.thread_time() - cpu, started,
                                 time.perf_counter()])
            peak = max(peak, rss_bytes() or 0)  # (what the step ends with: its gradients)
        except BaseException as exc:
            for side in ("prev", "next"):  # the neighbours must not wait for us
                if side in st.neighbours:
                    self._pipe_send(st, side, step, "abort", -1, None,
                                    reason=f"{st.name} on worker {self.id} failed: "
                                           f"{type(exc).__name__}: {exc}")
            raise
        finally:
            job.micro_batch = self.captures.micro_batch = None
            self.state.finish_step(model, step)
            self.drop_step_graph(model, job.client, step)
        stats = {"busy": busy, "peak_rss": peak, "timeline": timeline,
                 "attrs": snap.changes(), "forms": form.forms(st, job),
                 "rng": job.rng and disthook.random._stream_state()}
        return {"losses": [losses[mb] for mb in sorted(losses)], **stats} if last else stats

    def _came_on_links(self, keys: tuple) -> bool:
        """Whether one of the mailbox ``keys`` is there once what came on the links is
        taken (``links_first``): a record the kernel holds already needs no wait opened,
        no flush and no state restored after it."""
        return self.links_first() and any(k in self.state.mailbox for k in keys)

    def _pipe_send(self, st, side: str, step: str, kind: str, mb: int, data,
                   reason: str | None = None) -> None:
        """One pipe record to a neighbour stage, in the wire's short form (its encoder
        called directly): to a local link, its frames in one call of the link's; to
        ZeroMQ, each frame handed over at once (``send_frames``: the array copied under
        ``PIPE_COPY_BELOW``, else sent from its own buffer)."""
        neighbour = st.neighbours[side]
        if type(neighbour) is Link and reason is None:  # a record of a run, into the arena:
            # its header written straight into the link's kept buffer (no frames made)
            run = wire.pipe_run(st.model, step, kind, mb, data)
            if run is not None and neighbour.send_run(run[0], mb, run[1]):
                self._count(st.model, "bytes_to_peers", len(run[1]))
                return
        frames = wire.encode_pipe(st.model, step, kind, mb, data, reason)
        if data is not None:  # (the array's bytes: its frame's length, a byte view's)
            self._count(st.model, "bytes_to_peers", len(frames[-1]))
        if type(neighbour) is Link:
            neighbour.send_multipart(frames)
        else:
            send_frames(neighbour, frames, PIPE_COPY_BELOW)


def _fresh(data: np.ndarray, job) -> np.ndarray:
    """``data`` (received) as a pass takes it: itself, or a copy where the pass may run
    again (``job.spec``: its client hooks run ahead) and must start from it as it came."""
    return data if job.spec is None else np.array(data)


def _check_step(msg, first: bool, last: bool, stage: str) -> None:
    """What a stage's part of a training step needs is in its request: the micro-batches'
    inputs on the first stage; their targets, scales and the loss on the last; one of each
    per micro-batch the schedule names (a ValueError naming what is missing, not a KeyError
    half way through the step)."""
    m = 1 + max((mb for _, mb in msg["schedule"]), default=-1)
    needs = [("inputs", first), ("targets", last), ("scales", last)]
    missing = [name for name, needed in needs if needed and (
        not isinstance(msg.get(name), list) or len(msg[name]) < m)]
    if last and not isinstance(msg.get("loss"), dict):
        missing.append("loss")
    if missing:
        raise ValueError(f"a training step's request to {stage} must carry "
                         f"{', '.join(missing)} (one per micro-batch of its {m} for a list)")


def _loss_function(spec: dict, allow):
    """The loss of a training step: a module (sent as a spec) or a function of
    disthook.nn.functional (sent by name)."""
    from disthook.nn import functional

    if "module" in spec:
        return build_module(spec["module"], allow=allow)  # the model's allow-list
    name = spec.get("function")
    fn = getattr(functional, name, None) if isinstance(name, str) else None
    if fn is None or not callable(fn) or name.startswith("_"):
        raise ValueError(f"unknown loss function {name!r} of disthook.nn.functional")
    return fn
