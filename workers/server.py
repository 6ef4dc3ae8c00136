"""The worker: one process that owns stages of deployed models and answers on its own endpoint.

A worker may hold stages of several models at once (each deployment has its own model id;
every data-plane message names the model it is for), each with its own neighbours, forward
contexts, client hooks and optimizer shares.

It registers with the coordinator, then sends a heartbeat every interval the coordinator
gave. While the coordinator is away it keeps its stages and serves them (training needs only
the workers), and registers again when a coordinator answers on the same address. It stops
when the coordinator says ``shutdown``, on SIGTERM/SIGINT, when its parent process is gone,
or, if ``orphan_after`` is set, when the coordinator has been silent that many seconds.
"""
from __future__ import annotations

import collections
import contextlib
import itertools
import os
import socket
import time
import traceback
import warnings

import numpy as np
import zmq

import disthook
from disthook import hooks as toolkit
from disthook import wire
from disthook.distributed import hooks as worker_hooks
from disthook.distributed.rpc import error_fields
from disthook.distributed.security import SERVER, Keys
from disthook.distributed.service import NO_REPLY, Service, recv_now, tune_malloc
from disthook.distributed.spec import build_module, import_main
from disthook.distributed.values import pack, tensors_in, unpack

__all__ = ["Worker"]


def _rss_bytes() -> int | None:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


class Worker(Service):
    role = "worker"

    def __init__(self, coordinator: str, *, bind: str = "tcp://127.0.0.1:0",
                 worker_id: str | None = None, orphan_after: float | None = None,
                 context_ttl: float = 600.0, parent_pid: int | None = None,
                 allow_hook_modules: tuple[str, ...] = (), allow_main_scripts: bool = False,
                 keys: Keys | None = None, advertise: str | None = None):
        wid = worker_id or f"{socket.gethostname()}-{os.getpid()}"
        super().__init__(bind, name=wid, parent_pid=parent_pid, keys=keys)
        self.id = wid
        self.bound = self.address
        self.address = advertised_address(self.bound, advertise, self.log)  # what peers dial
        self.coordinator_address = coordinator
        self.control = self._dial(coordinator, wid.encode(), linger=0)
        self.poller.register(self.control, zmq.POLLIN)
        self.heartbeat = 0.5
        self.orphan_after = orphan_after
        self.registered = False
        self.last_heard = time.monotonic()
        self.stages: dict[str, _Stage] = {}  # model id -> the stage of it held here
        self.captures = worker_hooks.Captures()  # what hooks.capture(...) kept, by buffer
        self.allow_hook_modules = tuple(allow_hook_modules)  # for hooks.by_path
        self.allow_main_scripts = allow_main_scripts  # import a client's script by its path
        self.context_ttl = context_ttl
        self.hook_timeout = 300.0
        self._backlog: list[tuple[bytes, list]] = []  # requests that came during a hook call
        self._event_ids = itertools.count(1)
        self._ctx: str | None = None  # the context of the forward/backward now running
        self._current: _Stage | None = None  # the stage of the request now running
        self._retained: list[tuple] = []  # tensors client hooks retain_grad()-ed this forward
        self._mailbox: dict[tuple, object] = {}  # pipeline messages not yet asked for
        self._warnings_routed = False  # see _warnings_to
        self._warn_target: tuple | None = None  # (client, request) whose warnings these are
        self._finished_steps: collections.deque = collections.deque(maxlen=256)
        self._register()
        self.next_beat = time.monotonic() + 1.0  # re-register if no answer came by then

    def _dial(self, address: str, identity: bytes, *, linger: int) -> zmq.Socket:
        """A DEALER connected to ``address`` (with the cluster's keys, when it has them)."""
        sock = self.ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, linger)
        sock.setsockopt(zmq.IDENTITY, identity)
        if self.keys is not None:
            self.keys.dial(sock)
        sock.connect(address)
        return sock

    def _register(self) -> None:
        self._to_coordinator("register", {
            "worker": self.id, "address": self.address, "pid": os.getpid(),
            "host": socket.gethostname()})

    def _to_coordinator(self, msg_type: str, fields: dict) -> None:
        """Never blocks: while the coordinator is away its queue may fill; a beat is dropped
        then (the next one says the same), and the worker goes on serving its stages."""
        try:
            self.control.send_multipart(wire.encode(msg_type, fields), zmq.NOBLOCK,
                                        copy=False)
        except zmq.Again:
            pass

    # ---- the control channel ----------------------------------------------------------------
    def on_socket(self, sock: zmq.Socket) -> None:
        if any(sock in st.neighbours.values() for st in self.stages.values()):
            # neighbours never reply; anything is a fault
            frames = recv_now(sock)
            if frames is None:
                return
            self.log.warning("worker %s: unexpected message from a neighbour (%d frames)",
                             self.id, len(frames))
            return
        if sock is not self.control:
            super().on_socket(sock)
            while self._backlog:  # what arrived while a client hook ran
                sender, frames = self._backlog.pop(0)
                self.handle(sender, frames, self.router)
            return
        frames = recv_now(self.control)
        if frames is None:  # taken by a wait inside a handler since the poll
            return
        try:
            msg = wire.decode(frames)
        except wire.WireError as exc:
            self.log.warning("worker %s: malformed message from the coordinator: %s", self.id, exc)
            return
        self.last_heard = time.monotonic()
        if msg.type == "shutdown":
            self.stop(msg.get("reason") or "the coordinator asked")
        elif msg.type == "ok" and not self.registered:
            self.registered = True
            result = msg.get("result") or {}
            self.heartbeat = float(result.get("heartbeat", self.heartbeat))
            self.log.info("worker %s: registered at %s, serving on %s", self.id,
                          self.coordinator_address, self.address)
        elif msg.type == "error":
            self.log.warning("worker %s: the coordinator says %s: %s; registering again",
                             self.id, msg["kind"], msg["message"])
            self.registered = False
            self._register()

    def tick(self) -> None:
        now = time.monotonic()
        if self.orphan_after and now - self.last_heard > self.orphan_after:
            self.stop(f"no word from the coordinator at {self.coordinator_address} for "
                      f"{self.orphan_after:g} s")
            return
        for st in self.stages.values():
            for ctx_id in [c for c, v in st.contexts.items()
                           if now - v.created > self.context_ttl]:
                self.log.warning("worker %s: context %s of %s expired after %g s without "
                                 "backward", self.id, ctx_id, st.name, self.context_ttl)
                del st.contexts[ctx_id]
        if now >= self.next_beat:
            self._beat()

    def _beat(self) -> None:
        """A heartbeat now (also right after placement changes, so status is current)."""
        if self.registered:
            self._to_coordinator("heartbeat", {
                "worker": self.id, "memory": _rss_bytes(),
                "stages": [st.name for st in self.stages.values()]})
        else:
            self._register()
        self.next_beat = time.monotonic() + self.heartbeat

    # ---- requests ----------------------------------------------------------------------------
    def on_status(self, msg, sender: bytes):
        return {"id": self.id, "pid": os.getpid(), "address": self.address,
                "stages": [st.name for st in self.stages.values()], "memory": _rss_bytes(),
                "contexts": sum(len(st.contexts) for st in self.stages.values()),
                "mailbox": len(self._mailbox), "hooks_fired": dict(self.captures.fired),
                "messages": wire.decoded_count(),
                # per stage: micro-batch forwards run so far, client and worker hooks held
                "stage_stats": {st.name: {"forwards": st.forwards, "hooks": len(st.hooks),
                                          "modules": list(st.module._modules),
                                          "parameters": st.parameters}
                                for st in self.stages.values()}}

    def on_load_stage(self, msg, sender: bytes):
        """Build a stage of model ``msg["model"]`` from its spec and connect to its neighbour
        stages; a stage of that model held before is replaced."""
        main = None
        if msg.get("main"):
            if not self.allow_main_scripts:
                raise PermissionError(
                    f"the model uses classes of the client's main script {msg['main']}; this "
                    "worker does not import client scripts (start it with "
                    "--allow-main-scripts, as local clusters do, or define the classes in a "
                    "module installed on the workers)")
            main = import_main(msg["main"])
        module = build_module(msg["spec"], main=main)
        self._drop(msg["model"])
        stage = _Stage(msg["model"], msg["stage"], module)
        for side in ("prev", "next"):
            if msg.get(side):
                # a fresh identity per load: a ROUTER refuses a peer whose identity is still
                # held by the connection it replaces
                sock = self._dial(msg[side], f"{self.id}>{side}>{next(_load_ids)}".encode(),
                                  linger=1000)
                self.poller.register(sock, zmq.POLLIN)
                stage.neighbours[side] = sock
        self.stages[stage.model] = stage
        self.log.info("worker %s: %s loaded (%s)", self.id, stage.name,
                      ", ".join(module._modules))
        self._beat()
        return {"parameters": sum(p.numel() for p in module.parameters())}

    def on_unload(self, msg, sender: bytes):
        """Forget the stage of a model (its graphs, hooks and optimizer shares too)."""
        if self._drop(msg["model"]):
            self._beat()

    def _drop(self, model: str) -> bool:
        stage = self.stages.pop(model, None)
        if stage is None:
            return False
        for sock in stage.neighbours.values():
            self.poller.unregister(sock)
            sock.close(linger=0)
        for handle in stage.hooks.values():
            handle.remove()
        self.log.info("worker %s: %s unloaded", self.id, stage.name)
        return True

    def on_forward(self, msg, sender: bytes):
        """Run the stage on the activations; pass them on, or answer the client if last."""
        client = bytes.fromhex(msg["reply_to"])
        try:
            st = self._stage(msg)
            zero_grads = msg.get("zero_grad")
            if zero_grads is not None:  # the client's optimizer.zero_grad(), before all else
                if not (st.index < len(zero_grads) and isinstance(zero_grads[st.index], list)):
                    raise ValueError(f"forward: zero_grad must list the optimizer calls of "
                                     f"every stage, got {zero_grads!r:.80}")
                for spec in zero_grads[st.index]:
                    self._optimizer_action(st, spec)
            grad = msg["grad_enabled"]
            flags = msg.get("requires_grad") or [True] * len(msg["inputs"])
            inputs = []
            for a, flag in zip(msg["inputs"], flags):
                t = disthook.from_numpy(np.array(a))  # an own, writable copy of the frame
                if grad and flag and t.is_floating_point():
                    t.requires_grad_(True)  # a fresh leaf per context: its grad goes back
                inputs.append(t)
            self._ctx, self._client = msg.ctx, client
            self._retained = []
            self.captures.micro_batch = msg.get("mb")
            stop = msg.get("stop")
            stop_here = stop is not None and stop.split(".", 1)[0] in st.module._modules
            st.forwards += 1
            with self._warnings_to(client, msg), disthook.set_grad_enabled(grad):
                if stop_here:  # the output of module `stop` is the answer: no later stage
                    out = toolkit.stop_after(st.module, stop, *inputs)
                else:
                    out = st.module(*inputs)
            if not isinstance(out, disthook.Tensor):
                raise TypeError(f"{stop if stop_here else st.name} returned "
                                f"{type(out).__name__}; a stage must return one Tensor")
            if grad and out.requires_grad:
                st.contexts[msg.ctx] = _Context(inputs, out, self._retained)
            self._retained = []
            fields = {"model": st.model, "stage": st.index + 1,
                      "inputs": [out.detach().numpy()], "grad_enabled": grad,
                      "requires_grad": [out.requires_grad], "reply_to": msg["reply_to"],
                      "mb": msg.get("mb"), "stop": stop, "zero_grad": zero_grads}
            nxt = st.neighbours.get("next")
            if nxt is not None and not stop_here:
                nxt.send_multipart(wire.encode("forward", fields, req=msg.req, ctx=msg.ctx),
                                   copy=False)
            else:
                self._to_client(client, msg, "ok", {"result": {
                    "output": out.detach().numpy(), "requires_grad": out.requires_grad}})
        except Exception as exc:  # noqa: BLE001 - the client, not the previous stage, hears it
            self._to_client(client, msg, "error", self.error_reply(exc, msg.get("inputs")))
        return NO_REPLY

    def on_backward(self, msg, sender: bytes):
        """Backward through the stage's graph of this context; pass the input's gradient on."""
        client = bytes.fromhex(msg["reply_to"])
        try:
            st = self._stage(msg)
            context = st.contexts.get(msg.ctx)
            if context is None:
                raise RuntimeError(
                    f"no forward graph of context {msg.ctx!r} on {st.name}: it ran "
                    "backward already without retain_graph=True, was released, or expired")
            (g,) = msg["grads"]
            retain = msg["retain_graph"]
            self.captures.micro_batch = msg.get("mb")
            self._ctx, self._client = msg.ctx, client
            for t in context.inputs:
                t.grad = None  # the gradient of this backward only goes to the previous stage
            # None: the next stage's output did not depend on this one's (a hook replaced
            # it by a constant); nothing flows back, and the context ends as after backward
            if g is not None:
                grad = disthook.from_numpy(np.array(g))
                with self._warnings_to(client, msg):
                    disthook.autograd.backward([context.output], [grad], retain_graph=retain)
            for who, hook_id, key, t in context.retained:  # what client hooks retained
                if t.grad is not None:
                    self._call_client(who, hook_id, "retained", key, [pack(t.grad)])
            if not retain:
                del st.contexts[msg.ctx]
            grads = [None if t.grad is None else t.grad.numpy() for t in context.inputs]
            prev = st.neighbours.get("prev")
            # when no input needed a gradient, no earlier stage kept a graph: answer now
            if prev is not None and any(t.requires_grad for t in context.inputs):
                fields = {"model": st.model, "stage": st.index - 1, "grads": grads,
                          "retain_graph": retain, "reply_to": msg["reply_to"],
                          "mb": msg.get("mb")}
                prev.send_multipart(wire.encode("backward", fields, req=msg.req, ctx=msg.ctx),
                                    copy=False)
            else:
                self._to_client(client, msg, "ok", {"result": {"grads": grads}})
        except Exception as exc:  # noqa: BLE001
            self._to_client(client, msg, "error", self.error_reply(exc))
        return NO_REPLY

    # ---- client hooks ------------------------------------------------------------------------
    def on_add_hooks(self, msg, sender: bytes):
        """Register hooks on the stage, all or none: a worker hook runs here, any other is a
        stub that runs the client's hook when it fires here."""
        st = self._stage(msg)
        client = bytes.fromhex(msg["reply_to"])
        added = []
        try:
            for entry in msg["hooks"]:
                self._add_hook(st, _hook_entry(entry), client)
                added.append(entry["hook"])
        except BaseException:
            self._remove_hooks(st, added)
            raise

    def _add_hook(self, st, entry: dict, client: bytes) -> None:
        kind, path, hook_id, opts = entry["kind"], entry["path"], entry["hook"], entry["options"]
        spec = entry.get("worker_hook")
        if spec is not None:  # runs here, without a round trip
            stub = worker_hooks.build(spec, kind, path, self.captures, self.allow_hook_modules)
        if kind == "tensor":
            target = st.module.get_parameter(path)
            handle = target.register_hook(
                stub if spec is not None else self._tensor_stub(hook_id, path, client))
        else:
            target = st.module.get_submodule(path)
            if spec is None:
                stub = self._module_stub(kind, hook_id, path, client, opts)
            if kind == "forward_pre":
                handle = target.register_forward_pre_hook(
                    stub, prepend=opts.get("prepend", False),
                    with_kwargs=opts.get("with_kwargs", False))
            elif kind == "forward":
                handle = target.register_forward_hook(
                    stub, prepend=opts.get("prepend", False),
                    with_kwargs=opts.get("with_kwargs", False),
                    always_call=opts.get("always_call", False))
            elif kind == "full_backward":
                handle = target.register_full_backward_hook(stub, prepend=opts.get("prepend",
                                                                                   False))
            elif kind == "backward":
                handle = target.register_backward_hook(stub)
            elif kind == "full_backward_pre":
                handle = target.register_full_backward_pre_hook(
                    stub, prepend=opts.get("prepend", False))
            else:
                raise ValueError(f"unknown hook kind {kind!r}")
        st.hooks[hook_id] = handle
        st.hook_info[hook_id] = {"hook": hook_id, "kind": kind, "path": path,
                                 "tag": entry.get("tag"),
                                 "runs": "client" if spec is None else "worker"}

    def on_list_hooks(self, msg, sender: bytes):
        """The hooks registered on this stage: [{"hook", "kind", "path", "tag", "runs"}],
        where runs is "client" (a stub that calls the client) or "worker" (a worker hook)."""
        return list(self._stage(msg).hook_info.values())

    def on_captured(self, msg, sender: bytes):
        """The capture buffer ``name``: [{"order", "path", "kind", "micro_batch", "value"}]."""
        return [{"order": list(order), "path": path, "kind": kind, "micro_batch": mb,
                 "value": pack(value)}
                for order, path, kind, mb, value in self.captures.take(msg["name"],
                                                                       msg.get("clear", True))]

    def on_remove_hooks(self, msg, sender: bytes):
        self._remove_hooks(self._stage(msg), msg["hooks"])

    @staticmethod
    def _remove_hooks(st, hook_ids) -> None:
        for hook_id in hook_ids:  # an id not held here (removed before) is no error
            st.hook_info.pop(hook_id, None)
            handle = st.hooks.pop(hook_id, None)
            if handle is not None:
                handle.remove()

    def _module_stub(self, kind: str, hook_id: int, path: str, client: bytes, opts: dict):
        """The worker-side body of a client module hook: the event crosses, the answer comes
        back and is returned to the module machinery as the client's hook returned it."""
        worker = self
        forward_kind = kind in ("forward_pre", "forward")

        def stub(module, *args):
            worker.captures.fired["client"] += 1
            originals = list(tensors_in(args))
            data = worker._call_client(client, hook_id, kind, path, [pack(a) for a in args],
                                       diff=forward_kind and disthook.is_grad_enabled())
            if isinstance(data, dict) and "watch" in data:
                for i in data["watch"]:  # the client's hook hooked these tensors
                    originals[i].register_hook(
                        worker._tensor_stub(hook_id, f"{data['key']}#{i}", client, "leaf_hook"))
                for i in data["retain"]:  # ... or asked them to retain their gradients
                    originals[i].retain_grad()
                    worker._retained.append((client, hook_id, f"{data['key']}#{i}",
                                             originals[i]))
                data = data["value"]
            if data is None:
                return None
            return _unpack_result(data, originals, worker, client, hook_id)

        stub.__name__ = f"client_hook_{hook_id}"  # how engine errors name the hook
        return stub

    def _tensor_stub(self, hook_id: int, path: str, client: bytes, kind: str = "tensor"):
        worker = self

        def stub(grad):
            worker.captures.fired["client"] += 1
            data = worker._call_client(client, hook_id, kind, path, [pack(grad)])
            return None if data is None else _unpack_result(data, [grad], worker, client,
                                                            hook_id)

        stub.__name__ = f"client_hook_{hook_id}"
        return stub

    def _call_client(self, client: bytes, hook_id: int, kind: str, path: str, args: list,
                     diff: bool = False):
        """Send a hook event to the client and serve nothing else until its answer comes."""
        req = next(self._event_ids)
        fields = {"hook": hook_id, "kind": kind, "path": path,
                  "args": [{"diff": diff}, *args]}
        self.reply(self.router, client, req, "hook_event", fields, ctx=self._ctx)
        msg = self._serve_until(
            lambda sender, m: (sender == client and m.req == req
                               and m.type in ("hook_reply", "error")),
            None, self.hook_timeout, f"the client's answer to its {kind} hook on {path!r}")
        if msg.type == "error":
            raise RuntimeError(f"the client's {kind} hook on {path!r} raised "
                               f"{msg['kind']}: {msg['message']}")
        return msg.get("result")

    def _serve_until(self, wanted, ready, timeout: float, what: str):
        """Wait inside a request: keep serving heartbeats, keep pipeline messages in the
        mailbox and other requests for later, until a message ``wanted(sender, msg)`` comes
        (returned) or ``ready()`` is true (None returned)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ready is not None and ready():
                return None
            if not self._running:  # shut down while waiting: end the request now
                raise RuntimeError(f"worker {self.id} is stopping; it was waiting for {what}")
            for sock, _ in self.poller.poll(100):
                if sock is not self.router:
                    self.on_socket(sock)  # heartbeats, neighbours
                    continue
                frames = recv_now(self.router)
                if frames is None:
                    continue
                sender, body = frames[0].bytes, frames[1:]
                try:
                    msg = wire.decode(body)
                except wire.WireError:
                    self._backlog.append((sender, body))  # answered with an error later
                    continue
                if msg.type == "pipe":
                    self.on_pipe(msg, sender)
                elif wanted is not None and wanted(sender, msg):
                    return msg
                else:
                    self._backlog.append((sender, body))
            self.tick()
        raise TimeoutError(f"worker {self.id} waited {timeout:g} s for {what}")

    # ---- pipelined training steps ---------------------------------------------------------
    def on_pipe(self, msg, sender: bytes):
        """An activation or gradient of a micro-batch from a neighbour stage (or word that
        it aborted the step), kept until the schedule asks for it."""
        key = (msg["model"], msg["step"])
        if msg["model"] not in self.stages or key in self._finished_steps:
            return NO_REPLY  # for no model held here, or late: dropped
        if len(self._mailbox) >= MAILBOX_LIMIT:  # nobody asks for these: a faulty peer
            oldest = next(iter(self._mailbox))
            self.log.warning("worker %s: pipeline mailbox full (%d); dropping %s", self.id,
                             MAILBOX_LIMIT, oldest)
            del self._mailbox[oldest]
        self._mailbox[(*key, msg["kind"], msg["mb"])] = msg
        return NO_REPLY

    def on_train_step(self, msg, sender: bytes):
        """Run this stage's list of a pipeline schedule (see disthook.distributed.schedule):
        micro-batch forwards and backwards, activations and gradients to and from the
        neighbour stages; the last stage computes each micro-batch's loss, scaled."""
        st = self._stage(msg)
        for spec in msg.get("zero_grad") or ():  # the client's optimizer.zero_grad() first
            self._optimizer_action(st, spec)
        step, model = msg["step"], st.model
        client = bytes.fromhex(msg["reply_to"])
        first, last = "prev" not in st.neighbours, "next" not in st.neighbours
        loss_fn = _loss_function(msg["loss"]) if last else None
        held: dict[int, tuple] = {}  # micro-batch -> (input leaf, output or scaled loss)
        received: dict[tuple, np.ndarray] = {}
        grads_in: dict[int, object] = {}
        losses: dict[int, float] = {}
        self._client = client
        busy, peak = 0.0, _rss_bytes() or 0  # compute time; the most memory held
        try:
            for kind, mb in msg["schedule"]:
                self._ctx = f"{step}.{mb}"
                self.captures.micro_batch = mb
                started = time.perf_counter()
                if kind in ("recv_act", "recv_grad"):
                    received[(kind, mb)] = self._pipe_recv(st, step, kind[5:], mb)
                elif kind == "forward":
                    st.forwards += 1
                    data = msg["inputs"][mb] if first else received.pop(("recv_act", mb))
                    leaf = disthook.from_numpy(np.array(data))
                    if not first and leaf.is_floating_point():
                        leaf.requires_grad_(True)
                    with self._warnings_to(client, msg):
                        out = st.module(leaf)
                        if last:
                            target = disthook.from_numpy(np.array(msg["targets"][mb]))
                            loss = loss_fn(out, target)
                            losses[mb] = float(loss.item())
                            out = loss * msg["scales"][mb]
                    held[mb] = (leaf, out)
                    peak = max(peak, _rss_bytes() or 0)
                elif kind == "send_act":
                    self._pipe_send(st, "next", step, "act", mb, held[mb][1].detach().numpy())
                elif kind == "backward":
                    leaf, out = held.pop(mb)
                    with self._warnings_to(client, msg):
                        if last:
                            disthook.autograd.backward([out])
                        else:
                            g = disthook.from_numpy(np.array(received.pop(("recv_grad", mb))))
                            disthook.autograd.backward([out], [g])
                    grads_in[mb] = leaf.grad
                elif kind == "send_grad":
                    g = grads_in.pop(mb)
                    if g is None:
                        raise RuntimeError(f"{st.name}: no gradient reached the input of "
                                           f"micro-batch {mb}")
                    self._pipe_send(st, "prev", step, "grad", mb, g.numpy())
                else:
                    raise ValueError(f"unknown schedule action {kind!r}")
                if kind in ("forward", "backward"):
                    busy += time.perf_counter() - started
        except BaseException as exc:
            for side in ("prev", "next"):  # the neighbours must not wait for us
                if side in st.neighbours:
                    self._pipe_send(st, side, step, "abort", -1, None,
                                    reason=f"{st.name} on worker {self.id} failed: "
                                           f"{type(exc).__name__}: {exc}")
            raise
        finally:
            self.captures.micro_batch = None
            self._finished_steps.append((model, step))
            for key in [k for k in self._mailbox if k[:2] == (model, step)]:
                del self._mailbox[key]
        stats = {"busy": busy, "peak_rss": peak}
        return {"losses": [losses[mb] for mb in sorted(losses)], **stats} if last else stats

    def _pipe_send(self, st, side: str, step: str, kind: str, mb: int, data,
                   reason: str | None = None) -> None:
        fields = {"model": st.model, "step": step, "kind": kind, "mb": mb, "data": data,
                  "reason": reason}
        st.neighbours[side].send_multipart(wire.encode("pipe", fields), copy=False)

    def _pipe_recv(self, st, step: str, kind: str, mb: int) -> np.ndarray:
        key, abort = (st.model, step, kind, mb), (st.model, step, "abort", -1)
        self._serve_until(None, lambda: key in self._mailbox or abort in self._mailbox,
                          PIPE_TIMEOUT, f"the {kind} of micro-batch {mb} ({st.name})")
        if abort in self._mailbox:
            raise RuntimeError(f"the step was aborted: {self._mailbox[abort]['reason']}")
        return self._mailbox.pop(key)["data"]

    def on_release(self, msg, sender: bytes):
        st = self.stages.get(msg["model"])
        if st is None:  # unloaded meanwhile: nothing left to release
            return NO_REPLY
        for ctx_id in msg["contexts"]:
            st.contexts.pop(ctx_id, None)
        nxt = st.neighbours.get("next")
        if nxt is not None:  # the whole pipeline forgets the contexts
            nxt.send_multipart(wire.encode("release", {"model": st.model,
                                                       "contexts": msg["contexts"]}), copy=False)
        return NO_REPLY

    def on_get_state(self, msg, sender: bytes):
        """The stage's parameters and buffers, and the parameters' gradients, by full name."""
        st = self._stage(msg)
        names = msg.get("names")
        state = {name: t.detach().numpy() for name, t in st.module.state_dict().items()
                 if names is None or name in names}
        grads = {name: p.grad.numpy() for name, p in st.module.named_parameters()
                 if p.grad is not None and (names is None or name in names)}
        unknown = [] if names is None else [n for n in names if n not in state]
        if unknown:
            raise KeyError(f"{st.name} has no parameters or buffers {unknown}")
        return {"stage": st.index, "state": state, "grads": grads}

    def on_param_op(self, msg, sender: bytes):
        """An in-place method of a parameter (``fill_``, ``copy_``, ``requires_grad_``, ...),
        run without autograd as ``p.data.<op>(*args)`` would run in one process."""
        st = self._stage(msg)
        op = msg["op"]
        if not (op.endswith("_") and not op.startswith("_")
                and callable(getattr(disthook.Tensor, op, None))):
            raise ValueError(f"{op!r} is not an in-place tensor method")
        param = st.module.get_parameter(msg["name"])
        args, kwargs = unpack(msg["args"]), unpack(msg["kwargs"])
        if op == "requires_grad_":
            param.requires_grad_(*args, **kwargs)
            return
        with disthook.no_grad():
            getattr(param, op)(*args, **kwargs)

    def on_step(self, msg, sender: bytes):
        """The stage's share of an optimizer (made on first use), or the stage's zero_grad.

        ``optimizer``: {"id", "class" (a name in disthook.optim), "kwargs", "params" (full
        names), "action": "step" | "zero_grad" | "state" | "load", "set_to_none", "state"}.
        "state" returns the share's state by parameter name ({"state": {name: {key: value}},
        "param_groups": [hyperparameters]}); "load" restores such a state.
        """
        st = self._stage(msg)
        spec = msg.get("optimizer")
        if spec is None:
            if msg.get("zero_grad"):
                st.module.zero_grad()
            return None
        return self._optimizer_action(st, spec)

    def _optimizer_action(self, st, spec):
        """Run ``spec["action"]`` on the stage's share of optimizer ``spec["id"]``."""
        if not isinstance(spec, dict) or not {"id", "class", "kwargs", "params",
                                               "action"} <= spec.keys():
            raise ValueError("an optimizer call must be a map with id, class, kwargs, params "
                             f"and action, got {spec!r:.80}")
        opt = st.optimizers.get(spec["id"])
        if opt is None:
            cls = getattr(disthook.optim, spec["class"], None)
            if not (isinstance(cls, type) and issubclass(cls, disthook.optim.Optimizer)):
                raise ValueError(f"{spec['class']!r} is not an optimizer of disthook.optim")
            params = dict(st.module.named_parameters())
            missing = [n for n in spec["params"] if n not in params]
            if missing:
                raise KeyError(f"{st.name} has no parameters {missing}")
            opt = cls([params[n] for n in spec["params"]], **spec["kwargs"])
            st.optimizers[spec["id"]] = opt
        if spec["action"] == "step":
            opt.step()
        elif spec["action"] == "zero_grad":
            opt.zero_grad(set_to_none=spec.get("set_to_none", True))
        elif spec["action"] == "state":
            saved = opt.state_dict()
            names = spec["params"]  # one group: ids 0..n-1 are these names in order
            return {"state": {names[i]: {k: v.detach().numpy() if isinstance(v, disthook.Tensor)
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
            groups = [{**g, "params": list(range(len(names)))} for g in given["param_groups"]]
            opt.load_state_dict({"state": state, "param_groups": groups})
        else:
            raise ValueError(f"unknown optimizer action {spec['action']!r}")
        return

    def on_train(self, msg, sender: bytes):
        self._stage(msg).module.train(msg["mode"])

    def on_set_state(self, msg, sender: bytes):
        """Copy arrays into the stage's parameters and buffers by full name (no_grad, in place)."""
        st = self._stage(msg)
        own = st.module.state_dict(keep_vars=True)
        unknown = [n for n in msg["state"] if n not in own]
        if unknown:
            raise KeyError(f"{st.name} has no parameters or buffers {unknown}")
        with disthook.no_grad():
            for name, arr in msg["state"].items():
                own[name].copy_(disthook.from_numpy(np.array(arr)))

    # ---- helpers -------------------------------------------------------------------------------
    def _stage(self, msg) -> _Stage:
        """The stage of the model a message names (and, when it names one, that index)."""
        st = self.stages.get(msg["model"])
        index = msg.get("stage")
        if st is None:
            held = ", ".join(s.name for s in self.stages.values()) or "nothing"
            raise RuntimeError(f"worker {self.id} holds no stage of model {msg['model']!r} "
                               f"(it holds {held}); was the model closed?")
        if index is not None and index != st.index:
            raise RuntimeError(f"worker {self.id} holds {st.name}, not stage {index}")
        self._current = st
        return st

    def handle(self, sender: bytes, frames: list, sock) -> None:
        outer, self._current = self._current, None  # a request served inside a hook's wait
        try:
            super().handle(sender, frames, sock)
        finally:
            self._current = outer

    def error_reply(self, exc: BaseException, inputs=None) -> dict:
        """Where ``exc`` happened: this worker, the stage of the request now running, and the
        innermost submodule of that stage whose code was on the stack (its path in the
        model). With ``inputs`` (a forward's arrays) the message also says what came in."""
        st = self._current
        path = None if st is None else _module_in_traceback(st.module, exc.__traceback__)
        message = str(exc)
        if inputs is not None and st is not None:
            got = ", ".join(f"{a.dtype} of shape {tuple(a.shape)}" for a in inputs)
            message += f" [the input of {st.name} was {got}]"
        fields = error_fields(exc, worker=self.id, traceback=traceback.format_exc(),
                              path=path, stage=None if st is None else st.name)
        fields["message"] = message
        return fields

    @contextlib.contextmanager
    def _warnings_to(self, client: bytes, msg):
        """Warnings raised here go to the client, which issues them as its own (sent as they
        are raised, so before the activations or gradients move on and before the answer).
        A request served inside another's wait (a hook's) sends its own to its client."""
        if not self._warnings_routed:
            # once per process, not a catch_warnings per request: every warning is shown
            # (the client's filters decide what the user sees) and comes here
            warnings.simplefilter("always")
            shown = warnings.showwarning

            def show(message, category, filename, lineno, file=None, line=None):
                if self._warn_target is None:  # between requests: the worker's own log
                    shown(message, category, filename, lineno, file, line)
                    return
                to, request = self._warn_target
                self._to_client(to, request, "warning", {
                    "category": category.__name__, "message": str(message),
                    "worker": self.id})

            warnings.showwarning = show
            self._warnings_routed = True
        outer, self._warn_target = self._warn_target, (client, msg)
        try:
            yield
        finally:
            self._warn_target = outer

    def _to_client(self, client: bytes, msg, msg_type: str, fields: dict) -> None:
        self.reply(self.router, client, msg.req, msg_type, fields, ctx=msg.ctx)


def advertised_address(bound: str, advertise: str | None, log) -> str:
    """The endpoint peers reach this worker at: ``advertise`` ("host" or "host:port"; the
    port defaults to the bound one), else the bound endpoint. A wildcard bind (0.0.0.0, *,
    ::) without ``advertise`` falls back to this host's name, with a warning."""
    scheme, _, rest = bound.partition("://")
    host, _, port = rest.rpartition(":")
    if advertise:
        if "://" in advertise:
            raise ValueError(f"--advertise takes host or host:port, got {advertise!r}")
        a_host, sep, a_port = advertise.rpartition(":")
        if not sep:  # no port given
            a_host, a_port = advertise, port
        elif not a_port.isdigit() or not a_host:
            raise ValueError(f"--advertise takes host or host:port, got {advertise!r}")
        return f"{scheme}://{a_host}:{a_port}"
    if host in ("0.0.0.0", "*", "[::]", "::"):
        name = socket.gethostname()
        log.warning("bound to %s without --advertise: peers are told tcp://%s:%s (this host's "
                    "name); pass --advertise HOST if they cannot resolve it", bound, name, port)
        return f"{scheme}://{name}:{port}"
    return bound


def _module_in_traceback(root, tb) -> str | None:
    """The path (in ``root``) of the innermost submodule of ``root`` running in ``tb``."""
    paths = {id(m): name for name, m in root.named_modules() if name}
    found = None
    while tb is not None:
        owner = tb.tb_frame.f_locals.get("self")
        if owner is not None and id(owner) in paths:
            found = paths[id(owner)]
        tb = tb.tb_next
    return found


_load_ids = itertools.count()
PIPE_TIMEOUT = 300.0  # seconds a stage waits for a neighbour's activation or gradient
MAILBOX_LIMIT = 4096  # pipeline messages kept before anyone asked for them


def _loss_function(spec: dict):
    """The loss of a training step: a module (sent as a spec) or a function of
    disthook.nn.functional (sent by name)."""
    from disthook.nn import functional

    if "module" in spec:
        return build_module(spec["module"])
    name = spec.get("function")
    fn = getattr(functional, name, None) if isinstance(name, str) else None
    if fn is None or not callable(fn) or name.startswith("_"):
        raise ValueError(f"unknown loss function {name!r} of disthook.nn.functional")
    return fn




_HOOK_ENTRY = {"hook": int, "kind": str, "path": str, "options": dict}


def _hook_entry(entry) -> dict:
    """One hook of an add_hooks message, its fields checked (the wire checks the list)."""
    if not isinstance(entry, dict):
        raise ValueError(f"add_hooks: a hook must be a map, got {type(entry).__name__}")
    for name, kind in _HOOK_ENTRY.items():
        if type(entry.get(name)) is not kind:
            raise ValueError(f"add_hooks: field {name!r} of a hook must be {kind.__name__}, "
                             f"got {type(entry.get(name)).__name__}")
    for name, kind in (("worker_hook", dict), ("tag", str)):
        if entry.get(name) is not None and not isinstance(entry[name], kind):
            raise ValueError(f"add_hooks: field {name!r} of a hook must be {kind.__name__}")
    unexpected = set(entry) - {*_HOOK_ENTRY, "worker_hook", "tag"}
    if unexpected:
        raise ValueError(f"add_hooks: unexpected field(s) {sorted(unexpected)} in a hook")
    return entry


class _ClientFunction(disthook.autograd.Function):
    """A tensor a client hook computed from tensors of this worker: its backward asks the
    client for the vector-Jacobian product of that computation."""

    @staticmethod
    def forward(ctx, worker, client, hook_id, key, value, *inputs):
        ctx.call = (worker, client, hook_id, key, len(inputs))
        return disthook.from_numpy(np.array(value))

    @staticmethod
    def backward(ctx, grad):
        worker, client, hook_id, key, n = ctx.call
        data = worker._call_client(client, hook_id, "vjp", key, [pack(grad)])
        grads = unpack(data)
        if len(grads) != n:
            raise RuntimeError(f"the client returned {len(grads)} gradients for {n} inputs")
        return (None, None, None, None, None, *grads)


def _unpack_result(data, originals: list, worker, client: bytes, hook_id: int):
    """A client hook's result: ``{"same": i}`` is the i-th original tensor itself; a tensor
    with a ``vjp`` key was computed from the originals and stays differentiable."""
    if isinstance(data, dict) and "same" in data:
        return originals[data["same"]]
    if isinstance(data, dict) and "vjp" in data:
        inputs = [t for t in originals if t.requires_grad]
        return _ClientFunction.apply(worker, client, hook_id, data["vjp"], data["tensor"],
                                     *inputs)
    if isinstance(data, dict) and len(data) == 1 and next(iter(data)) in ("tuple", "list"):
        (tag, items), = data.items()
        out = [_unpack_result(v, originals, worker, client, hook_id) for v in items]
        return tuple(out) if tag == "tuple" else out
    return unpack(data)


class _Stage:
    """One model's stage on this worker: its modules (an nn.Sequential named as in the full
    model), its neighbour stages, open forward graphs, client hooks and optimizer shares."""

    def __init__(self, model: str, index: int, module) -> None:
        self.model, self.index, self.module = model, index, module
        self.name = f"stage {index} of {model}"
        self.neighbours: dict[str, zmq.Socket] = {}  # "prev"/"next" -> DEALER to that worker
        self.contexts: dict[str, _Context] = {}  # open forward graphs by context id
        self.hooks: dict[int, object] = {}  # client hook id -> handle of its stub
        self.hook_info: dict[int, dict] = {}  # hook id -> what on_list_hooks tells of it
        self.forwards = 0  # forwards run (one per micro-batch), for status
        self.parameters = sum(p.numel() for p in module.parameters())
        self.optimizers: dict[int, object] = {}  # DistributedOptimizer id -> local share


class _Context:
    """The graph of one forward on this stage: its input leaves and its output."""

    __slots__ = ("created", "inputs", "output", "retained")

    def __init__(self, inputs: list, output, retained: list) -> None:
        self.inputs, self.output, self.created = inputs, output, time.monotonic()
        self.retained = retained  # (client, hook id, key, tensor) whose grad goes to client


def main(argv=None) -> int:
    import argparse
    import logging
    import sys

    p = argparse.ArgumentParser(prog="disthook worker",
                                description="Run one worker of a disthook cluster.")
    p.add_argument("--coordinator", required=True, help="the coordinator's endpoint")
    p.add_argument("--bind", default="tcp://127.0.0.1:0",
                   help="endpoint for the data plane; port 0 picks a free one "
                        "(default tcp://127.0.0.1:0, loopback only)")
    p.add_argument("--advertise", metavar="HOST[:PORT]",
                   help="the address peers and clients reach this worker at, when it binds "
                        "a wildcard or sits behind NAT (default: the bound address)")
    p.add_argument("--id", dest="worker_id", help="worker id (default host-pid)")
    p.add_argument("--orphan-after", type=float, default=0.0,
                   help="stop after this many seconds without word from the coordinator "
                        "(default 0: never; the worker keeps its stages and waits for a "
                        "coordinator on the same address)")
    p.add_argument("--context-ttl", type=float, default=600.0,
                   help="drop a forward's graph kept for a backward that has not come in "
                        "this many seconds (a client that vanished; default 600)")
    p.add_argument("--parent-pid", type=int, help="stop when this parent process is gone")
    p.add_argument("--allow-hook-module", action="append", default=[], metavar="MODULE",
                   help="a module (or package) whose functions hooks.by_path may run here; "
                        "repeat for more")
    p.add_argument("--allow-main-scripts", action="store_true",
                   help="import a client's main script by its path when its model uses "
                        "classes defined there (local clusters do; the script runs here)")
    p.add_argument("--keys", metavar="DIR",
                   help="key directory (disthook keys generate DIR): encrypt every connection "
                        "and accept only the peers it authorizes")
    p.add_argument("--log-level", default="INFO")
    args = p.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    keys = Keys.load(args.keys, SERVER) if args.keys else None
    import faulthandler
    import signal

    faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1 <pid>`: stacks
    if not tune_malloc():
        logging.getLogger(__name__).info("malloc not tuned (not glibc)")
    worker = Worker(args.coordinator, bind=args.bind, worker_id=args.worker_id,
                    orphan_after=args.orphan_after or None, parent_pid=args.parent_pid,
                    context_ttl=args.context_ttl, advertise=args.advertise,
                    allow_hook_modules=tuple(args.allow_hook_module),
                    allow_main_scripts=args.allow_main_scripts, keys=keys)
    from disthook.distributed import cluster

    cluster.IN_WORKER = True  # a client script imported here must not start clusters
    print(f"disthook worker {worker.id} serving on {worker.address}", flush=True)
    worker.serve_forever()
    return 0
