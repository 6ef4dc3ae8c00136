"""The worker: one process that owns stages of deployed models and answers on its own endpoint.

A worker may hold stages of several models at once (each deployment has its own model id;
every data-plane message names the model it is for), each with its own neighbours, forward
contexts, client hooks and optimizer shares.

It registers with the coordinator, then sends a heartbeat every interval the coordinator
gave. While the coordinator is away it keeps its stages and serves them (training needs only
the workers), and registers again when a coordinator answers on the same address. It stops
when the coordinator says ``shutdown``, on SIGTERM/SIGINT, when its parent process is gone,
or, if ``orphan_after`` is set, when the coordinator has been silent that many seconds.

This file is the socket shell: one poll loop turns what arrives into events for the
worker's state (``workers/state.py``, where every decision is made) and carries out the
instructions that come back; the requests' handlers live in ``compute.py`` (stages, forward,
backward, training steps), ``client_hooks.py`` and ``params.py``; its command line is
``command_line.py``. A handler that must wait (a client hook's answer, a neighbour's
activation) sleeps, and another thread takes over the loop meanwhile (``workers/runners.py``),
so the worker never stops serving: status, other clients and other models are answered while
a request waits, and a client whose connection closes (or misses its heartbeats) ends its
requests' waits at once.
"""
from __future__ import annotations

import itertools
import math
import os
import socket
import threading
import time
import warnings

import zmq

from disthook import _dtype, wire
from disthook import random as streams
from disthook._settings import quiet_float_warnings
from disthook.service import endpoint, worker_hooks
from disthook.service.loop import (
    NO_REPLY,
    Service,
    ping_options,
    recv_now,
)
from disthook.service.rpc import error_fields
from disthook.service.security import Keys
from disthook.service.unread import UnreadAnswers
from workers import limits, queues
from workers.batches import Batches
from workers.client_hooks import HookHandlers
from workers.compute import ComputeHandlers
from workers.control import DIALED_CAP, ControlLine
from workers.error_reply import error_reply
from workers.limits import MAX_GRAPH_BYTES, LimitChecks
from workers.link_handlers import LinkHandlers
from workers.params import ParamHandlers
from workers.peers import Peers
from workers.runners import Runners
from workers.stage_parts import leave_stream, rss_bytes
from workers.stages import StageHandlers
from workers.state import (
    HOOK_TIMEOUT_S,
    ClientGone,
    JobDone,
    Log,
    MessageIn,
    Reply,
    Resume,
    Run,
    Tick,
    WorkerState,
)
from workers.status import StatusHandlers
from workers.steps import StepHandlers
from workers.values import MAX_VALUE_BYTES, ValueHandlers
from workers.versions import VersionHandlers

__all__ = ["Worker"]

ROUTER_BURST = 32  # messages taken off the endpoint per poll, at most
_SRCFD = int(zmq.SRCFD)
# requests that may give their client gradients on a stage (LimitChecks.check_grad_copy)
_GIVES_GRADS = frozenset({"backward", "train_step", "grad_op"})


class Worker(ControlLine, StageHandlers, ComputeHandlers, HookHandlers, ParamHandlers,
             VersionHandlers, LimitChecks, ValueHandlers, StatusHandlers, StepHandlers, Batches, LinkHandlers,
             Service):
    role = "worker"

    def __init__(self, coordinator: str, *, bind: str = "tcp://127.0.0.1:0",
                 worker_id: str | None = None, orphan_after: float | None = None,
                 context_ttl: float = 600.0, parent_pid: int | None = None,
                 allow_hook_modules: tuple[str, ...] = (), allow_code: bool = False,
                 keys: Keys | None = None, advertise: str | None = None,
                 allow_model_modules: tuple[str, ...] | None = None,
                 max_contexts: int = 4096, max_hooks: int = 4096,
                 max_capture_bytes: int = worker_hooks.MAX_CAPTURE_BYTES,
                 max_graph_bytes: int = MAX_GRAPH_BYTES, max_value_bytes: int = MAX_VALUE_BYTES,
                 max_models: int = limits.MAX_MODELS, max_queued: int = queues.MAX_QUEUED,
                 max_model_bytes: int = limits.MAX_MODEL_BYTES,
                 max_queued_bytes: int = queues.MAX_QUEUED_BYTES, hook_timeout: float = HOOK_TIMEOUT_S,
                 max_unread_bytes: int = limits.MAX_UNREAD_BYTES):
        wid = worker_id or f"{socket.gethostname()}-{os.getpid()}"
        # a peer whose connection closes is gone (see on_disconnected), and one that stops
        # answering pings (hung, cut off) has its connection closed (ping_options)
        super().__init__(bind, name=wid, parent_pid=parent_pid, keys=keys,
                         watch_disconnects=True, router_options={
                             **ping_options(wire.HEARTBEAT_S),
                             zmq.MAXMSGSIZE: wire.DEFAULT_LIMITS.frame_cap()})
        self.id = wid
        self.bound = self.address
        self.address = endpoint.advertised_address(self.bound, advertise, self.log)  # what peers dial
        self.coordinator_address = coordinator
        self._dial_control()  # capped, dialed again after a frame over the cap (control.py)
        self.heartbeat = self.tick_interval = wire.HEARTBEAT_S  # a tick a beat (each wakes it)
        self.orphan_after = orphan_after
        self.registered = False
        self.last_heard = time.monotonic()
        # when the first question (a registration, a beat that asks) since the last word
        # went; None: none waits. The silence --orphan-after measures runs from it: a job
        # runs inline in this loop, so a long one sends no beat (see _orphaned)
        self.asked_at: float | None = None
        self.stages: dict = {}  # model id -> the Stage of it held here
        # what hooks.capture(...) kept, by client and buffer
        self.captures = worker_hooks.Captures(max_capture_bytes)
        self.captures.current = lambda: getattr(self._local, "job", None)
        self.allow_hook_modules = tuple(allow_hook_modules)  # for hooks.by_path
        # take models pickled by value (code included) from the clients that deploy them
        self.allow_code = allow_code
        # None: a model's classes (and an optimizer's) may come from any installed module;
        # else only from disthook and these modules or packages (a shared service)
        self.allow_model_modules = (None if allow_model_modules is None
                                    else tuple(allow_model_modules))
        self.max_contexts, self.max_hooks = max_contexts, max_hooks
        self.max_graph_bytes, self.max_value_bytes = max_graph_bytes, max_value_bytes
        self.max_models, self.max_model_bytes = max_models, max_model_bytes
        self.peers = Peers(keys, self.authorized)  # who is on each connection (transport)
        # (with keys, weighed per key: more connections get no more room)
        self.unread = UnreadAnswers(max_unread_bytes, "--max-unread-mb", self.peers.account)
        self.who = self.peers.who  # a peer as the logs name it
        self.state = WorkerState(wid, context_ttl=context_ttl, who=self.who,
                                 hook_timeout=hook_timeout)
        self.state.queues = queues.QueueCaps(max_queued, max_queued_bytes, self._fellows)
        self.runners = Runners(self._serve_round, name=f"worker-{wid}")
        self._todo: list = []  # jobs to start, in order
        self._sleepers: dict[int, object] = {}  # wait id -> the turn of the job waiting
        self.captures.account = self.peers.account  # per key, with keys
        self._local = threading.local()  # .job: the job this thread runs now
        self._event_ids = itertools.count(1)
        self._tensor_ids = itertools.count(1)  # names of tensors hook events send
        self._handlers: dict = {}  # message type -> its on_<type> method (None: none)
        self._warnings_routed = False  # see _route_warnings
        self._links_init()  # neighbour stages on this host: a Unix socket (link_handlers.py)
        self._held_init()  # batches in, a run of jobs' answers as one (batches.py)
        self._register()
        self.next_beat = time.monotonic() + 1.0  # re-register if no answer came by then
        self._beats = BeatFrames()
        self._next_tick = 0.0

    def _dial(self, address: str, identity: bytes, *, linger: int) -> zmq.Socket:
        """A DEALER connected to ``address`` (with the cluster's keys, when it has them).
        What it may receive is a header at most (control.py): the coordinator's answers;
        a neighbour or a peer worker sends nothing on it."""
        sock = self.ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.MAXMSGSIZE, DIALED_CAP)
        sock.setsockopt(zmq.LINGER, linger)
        sock.setsockopt(zmq.IDENTITY, identity)
        sock.setsockopt(zmq.SNDTIMEO, 0)  # never waits: a full queue raises (send_frames)
        if self.keys is not None:
            self.keys.dial(sock)
        sock.connect(address)
        return sock

    def _register(self) -> None:
        self._asked()
        self._to_coordinator("register", {
            "worker": self.id, "address": self.address, "pid": os.getpid(),
            "host": socket.gethostname(), "code": self.allow_code, **self.link_fields()})

    def _to_coordinator(self, msg_type: str, fields: dict) -> None:
        """Never blocks: while the coordinator is away its queue may fill; a beat is dropped
        then (the next one says the same), and the worker goes on serving its stages."""
        frames = (self._beats.frames(fields) if msg_type == "heartbeat"
                  else wire.encode(msg_type, fields))
        try:
            self.control.send_multipart(frames, zmq.NOBLOCK, copy=False)
        except zmq.Again:
            pass

    # ---- the loop -----------------------------------------------------------------------------
    def serve_forever(self) -> None:
        import signal

        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self.stop("signal"))
        self._running = True
        self._route_warnings()
        try:
            self.runners.run()  # returns on this thread once stopped
        finally:
            self.close()

    def stop(self, reason: str = "asked to") -> None:
        super().stop(reason)
        self.runners.stop()

    def _serve_round(self, start_jobs: bool = True) -> None:
        """One round of the loop: wait for messages until the next tick, handle them, and
        start the jobs they called for; then the tick, when due."""
        if start_jobs:
            self._start_jobs()
        timeout = max(0.0, self._next_tick - time.monotonic())
        # rounded up: under a millisecond to the tick, a poll of 0 ms would return at once,
        # again and again, until the tick is due (a spin of up to 1 ms of CPU per tick)
        for sock, events in self.poller.poll(math.ceil(timeout * 1000)):
            if sock.__class__ is int:  # a local link, or its listener (by descriptor)
                self.on_link(sock, events)
                continue
            if sock.closed:  # a neighbour's, closed by a job of this round (its stage went)
                continue
            if sock is self.router:
                self._on_router()
            elif sock is self.control:
                self._on_control()
            elif sock is self._monitor:
                self.read_monitor()
            elif sock is self._control_monitor:
                self._on_control_monitor()
            else:  # a neighbour: they never send to us on our dialled sockets; a fault
                frames = recv_now(sock)
                if frames is not None:
                    self.log.warning("worker %s: unexpected message from a neighbour (%d "
                                     "frames)", self.id, len(frames))
            if start_jobs:
                self._start_jobs()
        if time.monotonic() >= self._next_tick:
            self.tick_now()

    def tick_now(self) -> None:
        """The loop's tick (due: its caller looked), the next one a tick interval on; the
        worker stops where the process that started it is gone."""
        if self.parent_pid is not None and os.getppid() != self.parent_pid:
            self.stop(f"parent process {self.parent_pid} is gone")
        self.tick()
        self._next_tick = time.monotonic() + self.tick_interval

    def _on_router(self) -> None:
        """Take what has come on the endpoint: up to ``ROUTER_BURST`` messages, one poll
        for them all (the answers to a forward's hooks that ran ahead come in a burst)."""
        # a connection that closed is told before anything that came after it, so that a
        # descriptor used again by a new connection is never taken for the old one: the
        # monitor is read before the burst, and again before a message whose descriptor
        # this worker knows by another peer or not at all (see _on_message)
        self.read_monitor()
        router = self.router
        for _ in range(ROUTER_BURST):
            frames = recv_now(router)
            if frames is None:  # all taken (or another round took it since the poll)
                return
            self._on_message(frames)
            if not self.router.getsockopt(zmq.EVENTS) & zmq.POLLIN:
                return  # nothing more: no second read that ends in zmq.Again

    def _on_message(self, frames: list) -> None:
        head = frames[0]
        sender, body = head.bytes, frames[1:]
        fd = head.get(_SRCFD)
        if self.peers.by_fd.get(fd) != sender:  # a new connection, or a descriptor reused:
            self.read_monitor()  # the close of the one it had comes first
        user_id = head.get("User-Id") if self.keys else None
        if self._gone:  # a peer that left is back: its replies are kept again, if need be
            self._gone.pop(sender, None)
        try:
            forwarder = self.peers.arrived(fd, sender, user_id)
            msgs = self.messages_in(sender, body)  # (a batch's: batches.py)
        except (PermissionError, wire.WireError) as exc:
            self.refuse(sender, exc)
            return
        for msg in msgs:
            revoked = self.peers.revoked(sender, user_id, msg.req)
            if revoked is not None:
                self.refuse(sender, revoked)
                continue
            self._execute(self.state.handle(MessageIn(sender, msg, forwarder)))

    def on_disconnected(self, fd: int) -> None:
        sender = self.peers.gone(fd)
        if sender is not None:
            self.peer_gone(sender)

    def peer_gone(self, sender: bytes) -> None:
        """A peer's connection (or local link) closed: what it had here goes."""
        graphs = sum(1 for c in self.state.contexts.values() if c.client == sender)
        self._execute(self.state.handle(ClientGone(sender)))
        hooks = 0
        for st in self.stages.values():  # its hooks, gradients and optimizer shares
            mine = [h for who, h in st.hooks if who == sender]
            hooks += len(mine)
            self._remove_hooks(st, sender, mine)
            st.forget(sender)
        self.captures.forget(sender)
        self.forget_named(sender)  # the addresses it had values sent to (values.py)
        if graphs or hooks:
            self.log.info("worker %s: %s went away; dropped its %d graph(s) and %d "
                          "hook(s)", self.id, self.who(sender), graphs, hooks)
        self.peer_log.forget(sender)  # (it may name the peer: before peers forget it)
        self.peer_left(sender)  # (the replies kept for it go: nobody is there to read them)
        self.forget_batches(sender)
        self.peers.forget(sender)
        # the stages it deployed and published to nobody: no one reaches them now (a stage
        # answers its deployer's connection alone), unloaded as its own unload would be, behind
        # its running request; before, they stayed for the worker's life (test_t6_deployer_gone)
        for model in [m for m, st in self.stages.items() if st.owner == sender and not st.public]:
            unload = wire.Message("unload", 0, None, {"model": model})
            self._execute(self.state.handle(MessageIn(sender, unload)))

    def peer_name(self, identity: bytes) -> str:
        return self.who(identity)

    def log_account(self, identity: bytes) -> bytes | str:
        return self.peers.account(identity)

    def _execute(self, instructions: list) -> None:
        """Carry out what the state decided (jobs start at the end of the round)."""
        for ins in instructions:
            kind = type(ins)
            if kind is Run:
                self._todo.append(ins.job)
            elif kind is Resume:
                turn = self._sleepers.pop(ins.wait.id, None)
                if turn is not None:
                    self.runners.resume(turn)
            elif kind is Reply:
                self.reply(self.router, ins.to, ins.req, "error", {
                    "kind": ins.kind, "message": ins.message, "worker": self.id})
            elif kind is Log:
                if ins.peer is not None and ins.level == "warning":
                    self.peer_log.warning(ins.peer, "%s", ins.text)
                else:
                    getattr(self.log, ins.level)("%s", ins.text)

    def _start_jobs(self) -> None:
        self.run_jobs(self._todo, self._run)  # (what a client's run sends it goes as one)

    def _run(self, job) -> None:
        """Serve one request: its handler's result is the ``ok`` answer, what it raises the
        ``error`` answer; then the state hears that the job is done."""
        msg = job.msg
        self._local.job = job
        try:
            handler = self._handlers.get(msg.type)
            if handler is None:
                handler = self._handlers[msg.type] = getattr(self, f"on_{msg.type}", None)
            if handler is None:
                exc = wire.WireError(f"a worker does not take {msg.type!r} messages")
                self.reply(self.router, job.sender, msg.req, "error",
                           error_fields(exc, worker=self.name))
                return
            try:
                self.check_use(job)  # (workers/stages.py: another key's own model)
                result = handler(job)
            except PermissionError as exc:  # a refused write: the logs say who tried (a
                # few lines a minute per peer: refusals must not fill the log)
                self.peer_log.warning(job.sender, "worker %s: refused %s of %s: %s", self.id,
                                      msg.type, self.who(job.client), exc)
                self.reply(self.router, job.sender, msg.req, "error",
                           self.error_reply(exc, job), ctx=msg.ctx)
                return
            except (Exception, SystemExit) as exc:
                self.log.debug("%s: %s failed", self.name, msg.type, exc_info=True)
                self.reply(self.router, job.sender, msg.req, "error",
                           self.error_reply(exc, job), ctx=msg.ctx)
                return
            if result is not NO_REPLY:
                self.reply(self.router, job.sender, msg.req, "ok", {"result": result},
                           ctx=msg.ctx)
        finally:
            self._local.job = None
            self.captures.micro_batch = None
            # (a job given no stream, a raw client's, drew from the worker's: the next
            # such job must not draw its next numbers either)
            leave_stream()
            self._execute(self.state.handle(JobDone(job)))

    def current_job(self):
        """The job of the request this thread serves now."""
        job = getattr(self._local, "job", None)
        if job is None:
            raise RuntimeError(f"worker {self.id}: a client hook fired outside of a request")
        return job

    def sleep_on(self, wait, links_read: bool = False):
        """Wait until ``wait`` ends, serving others meanwhile; its outcome, or its error
        raised. While what comes needs no thread of its own (answers, pipeline messages,
        beats) this thread keeps the loop: a quick answer then costs no thread switch. Once
        a request is to start or another waiting job to go on, it hands the loop over.
        ``links_read``: the caller took what the links held just before (no second look)."""
        holding, self.holding = self.holding, False  # what the wait may depend on goes now
        job = wait.job
        self.flush_replies()
        if not links_read:  # once (link_handlers.py): then each round's poll says what came
            self.links_first()
        # (the rounds here start no job and draw nothing: the job's random stream stays)
        while not wait.done and self._running and not self._todo and not self.runners.ready:
            self._serve_round(start_jobs=False)
        left, dtype = False, None
        if not wait.done and self._running:
            # the default dtype the job computes under (its client's, compute.py) is the
            # process's: what runs meanwhile (another client's call, of any model here)
            # gets the worker's own, and the job gets its own back; before, a call that
            # waited on its hook under float16 made others' torch.full(...) float16
            # (tests/integration/test_s7_default_dtype.py). A CPU autocast region needs none
            # of this: it is this thread's, and each request names its own (none: off)
            dtype = _dtype.get_default_dtype()
            _dtype.set_default_dtype(_dtype.float32)
            if job.rng is not None:  # the stream as this job left it (what runs meanwhile
                # draws from the worker's own)
                job.rng, left = streams._stream_state(), True
                leave_stream()
            turn = self.runners.current()
            self._sleepers[wait.id] = turn
            self.runners.sleep(turn)
            self._sleepers.pop(wait.id, None)
        self._local.job, self.holding = job, holding
        self.captures.micro_batch = job.micro_batch
        if job.stage is not None:  # another client's job may have run meanwhile
            job.stage.use_client(job.client)
            job.stage.versions.enter(job.version)
        if left:
            streams._set_stream_state(job.rng)
        if dtype is not None:
            _dtype.set_default_dtype(dtype)
        if not wait.done:  # woken because the worker stops
            raise RuntimeError(f"worker {self.id} is stopping; it was waiting for {wait.what}")
        if wait.error is not None:
            raise wait.error
        return wait.outcome

    # ---- the control channel ----------------------------------------------------------------
    def _on_control(self) -> None:
        frames = recv_now(self.control)
        if frames is None:
            return
        try:
            msg = wire.decode(frames)
        except wire.WireError as exc:
            self.log.warning("worker %s: malformed message from the coordinator: %s", self.id, exc)
            return
        self.last_heard, self.asked_at = time.monotonic(), None
        if msg.type == "shutdown":
            self.stop(msg.get("reason") or "the coordinator asked")
        elif msg.type == "ok" and not self.registered:
            self.registered = True
            result = msg.get("result") or {}
            self.note_workers(result.get("workers") or ())  # (send_value's, control.py)
            self.heartbeat = float(result.get("heartbeat", self.heartbeat))
            self.tick_interval = min(self.heartbeat, wire.HEARTBEAT_S)  # (never slower)
            # the first beat a beat from now, not a second after the start (the wait for this
            # answer): --orphan-after 1 stopped a worker in its first second, unanswered
            self.next_beat = self.last_heard + self.heartbeat
            self.log.info("worker %s: registered at %s, serving on %s", self.id,
                          self.coordinator_address, self.address)
        elif msg.type == "workers":
            self.note_workers(msg["addresses"])
        elif msg.type == "error":
            self.log.warning("worker %s: the coordinator says %s: %s; registering again",
                             self.id, msg["kind"], msg["message"])
            self.registered = False
            if msg["kind"] != "PermissionError":  # refused: try again at the next beat only
                self._register()

    def tick(self) -> None:
        super().tick()  # replies that found no route yet go again
        now = time.monotonic()
        if self.orphan_after and self._orphaned(now):
            self.stop(f"no word from the coordinator at {self.coordinator_address} for "
                      f"{self.orphan_after:g} s")
            return
        self._execute(self.state.handle(Tick(now)))
        self._redial_control(now)
        if now >= self.next_beat:
            self._beat()

    def _beat(self) -> None:
        """A heartbeat now (also right after placement changes, so status is current)."""
        if self.registered:
            if self.orphan_after:
                self._asked()
            # an answer only where one is awaited (--orphan-after): each wakes this loop
            self._to_coordinator("heartbeat", {
                "worker": self.id, "memory": rss_bytes(),
                "stages": [st.name for st in self.stages.values()], **self.keepers(),
                **({"answer": True} if self.orphan_after else {})})
        else:
            self._register()
        self.next_beat = time.monotonic() + self.heartbeat

    def _asked(self) -> None:
        if self.asked_at is None:
            self.asked_at = time.monotonic()

    def _orphaned(self, now: float) -> bool:
        """Whether the coordinator left a question unanswered for ``orphan_after`` seconds.
        Silence alone is not enough: after a job that ran inline longer than that, no beat
        went meanwhile (none is waiting: it asks now), or the answer to the one before the
        job waits unread in the socket (read here first)."""
        if now - self.last_heard <= self.orphan_after:
            return False
        while self.asked_at is not None and self.control.poll(0):
            self._on_control()
        return self.asked_at is not None and now - self.asked_at > self.orphan_after

    # ---- requests answered by the shell ----------------------------------------------------
    def on_hello(self, job):  # the greeting (Service's), for a job
        self.reply(self.router, job.sender, job.msg.req, "hello", self.hello_fields())
        return NO_REPLY

    # ---- helpers -------------------------------------------------------------------------------
    def _stage(self, job):
        """The stage of the model a request names (and, when it names one, that index)."""
        msg = job.msg
        st = self.stages.get(msg["model"])
        index = msg.get("stage")
        if st is None:
            held = ", ".join(self.stage_names_for(job.client)) or "nothing"
            raise RuntimeError(f"worker {self.id} holds no stage of model {msg['model']!r} "
                               f"(it holds {held}); was the model closed?")
        if index is not None and index != st.index:
            raise RuntimeError(f"worker {self.id} holds {st.name}, not stage {index}")
        job.stage = st
        st.shared = st.shared or job.client != st.owner
        st.use_client(job.client)  # this client's gradients and attributes, for the job
        if msg.type in _GIVES_GRADS and (msg.type != "grad_op" or msg["op"] in ("set", "add")):
            self.check_grad_copy(st, job.client)  # (workers/limits.py)
        if job.version is None and msg.type == "backward":  # the weights of its forward
            ctx = self.state.context(st.model, job.client, msg.ctx)
            job.version = None if ctx is None else ctx.version
        elif job.version is None and msg.type == "forward":  # passed a write upstream?
            job.version = st.versions.take(job.client, msg.ctx, msg.get("mb"))
            if job.version is None:  # a tree-placed model's call: as of the forward's pin
                job.version, job.as_of = st.versions.as_of(job.client.hex(), msg.get("as_of"))
        st.versions.enter(job.version)  # the weights it computes with
        return st

    def error_reply(self, exc: BaseException, job=None, inputs=None) -> dict:
        """The error answer for ``exc`` (workers/error_reply.py)."""
        return error_reply(exc, self.id, None if job is None else job.stage, inputs)

    def _route_warnings(self) -> None:
        """Warnings raised while a request runs go to its client, which issues them as its
        own (sent as they are raised, so before the activations or gradients move on and
        before the answer); between requests they go to the worker's log."""
        if self._warnings_routed:
            return
        # once per process: every warning is shown (the client's filters decide what the
        # user sees) and comes here
        warnings.simplefilter("always")
        quiet_float_warnings()  # but numpy's, from disthook's code, as in one process
        shown = warnings.showwarning

        def show(message, category, filename, lineno, file=None, line=None):
            job = getattr(self._local, "job", None)
            if job is None:
                shown(message, category, filename, lineno, file, line)
                return
            self._to_client(job, "warning", {"category": category.__name__,
                                             "message": str(message), "worker": self.id})

        warnings.showwarning = show
        self._warnings_routed = True

    def _to_client(self, job, msg_type: str, fields: dict) -> None:
        self.reply(self.router, job.client, job.msg.req, msg_type, fields, ctx=job.msg.ctx)


class BeatFrames:
    """A heartbeat's frame, built (and checked against the schema) once for a worker's
    stages; each beat then only writes its resident size into it. Between two placement
    changes every beat differs in that one number, and a whole encode cost about 80 us of
    a busy worker's CPU (cold) at each beat: memory goes as msgpack's fixed-width uint 64,
    which decodes to the same int."""

    _SLOT = b"\xcf" + b"\xff" * 8  # (0xff never occurs in the UTF-8 of the names around it)

    def __init__(self) -> None:
        self._key: tuple | None = None
        self._head = self._tail = b""

    def frames(self, fields: dict) -> list:
        memory = fields.get("memory")
        if type(memory) is not int or not 0 <= memory < 2 ** 64:
            return wire.encode("heartbeat", fields)
        key = tuple((k, tuple(v) if type(v) is list else v)
                    for k, v in fields.items() if k != "memory")
        if key != self._key:
            (frame,) = wire.encode("heartbeat", {**fields, "memory": 2 ** 64 - 1})
            frame = bytes(frame)
            at = frame.find(self._SLOT)
            if at < 0 or frame.find(self._SLOT, at + 1) >= 0:  # not one place: each beat whole
                return wire.encode("heartbeat", fields)
            self._key, self._head, self._tail = key, frame[:at + 1], frame[at + 9:]
        return [self._head + memory.to_bytes(8, "big") + self._tail]
