"""The client's channel to the stages of one deployed model (``_Hub``): one DEALER socket
per worker, all with one identity, so that whichever worker finishes a pipelined request
answers the client directly. It sends requests side by side and waits for every reply
(serving client-hook events and warnings meanwhile), sees a worker's connection close
(``WorkerLost``), and batches what needs no round trip of its own: releases of graphs whose
output is gone, optimizer calls (``zero_grad()``, and ``step()`` once an optimizer's first
step made its shares), which ride with the next forward, and bursts of requests to one
worker (``send_together``)."""
from __future__ import annotations

import atexit
import itertools
import os
import threading
import uuid
import warnings
import weakref

import zmq

from disthook import wire
from disthook.distributed import answer_cap, post_accumulate
from disthook.distributed.client_hooks import HookServer
from disthook.distributed.optimizer_calls import OptimizerCalls
from disthook.distributed.releases import Releases
from disthook.distributed.send_together import Together, received
from disthook.distributed.socket_lock import SocketLock
from disthook.distributed.worker_warnings import issue_warning
from disthook.service.loop import ping_options
from disthook.service.monitors import watch
from disthook.service.rpc import (
    ClusterError,
    Deadline,
    RemoteError,
    RemoteTimeout,
    WorkerLost,
    next_request_id,
    poll_until,
    raise_error,
    raised_by,
    still_answers,
)

__all__ = []


_BURST = 32  # messages taken off one socket per poll, at most
_ANSWERED_AHEAD_KEPT = 256  # requests whose answer came ahead of the hooks' (see _stands)
# calls sent without waiting that may be unanswered at once: past it, the program waits for
# the older half (a loop that never reads a result would queue without bound otherwise)
MAX_AHEAD = 256
EXIT_FLUSH_TIMEOUT_S = 10.0


# this process's hubs by creation number, for the flush at exit (held weakly); one exit
# function for them all, registered with the first: before, each hub registered its own,
# and the interpreter's list of exit functions grew by one per deployment ever made
_HUBS: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
_hub_numbers = itertools.count()


def _flush_all_at_exit() -> None:
    """Each hub's flush at exit, the newest first (as exit functions run)."""
    for hub in reversed(list(_HUBS.values())):
        _flush_at_exit(hub)


def _flush_at_exit(hub) -> None:
    """At interpreter exit: send the optimizer calls a program made after its last request
    to a model it did not close (an attached client's last step lands on stages that stay),
    waiting a few seconds at most; a warning if they cannot go."""
    if not hub or not hub.socks or not hub.pending_optimizer or os.getpid() != hub._pid or hub._busy:
        return
    hub.timeout = min(hub.timeout, EXIT_FLUSH_TIMEOUT_S)
    try:
        hub.flush_optimizer_calls()
    except Exception as exc:  # noqa: BLE001 - any failure becomes the warning below
        warnings.warn(f"disthook: the last optimizer calls on model {hub.model} were not "
                      f"sent as the program ended: {type(exc).__name__}: {exc}",
                      RuntimeWarning, stacklevel=1)


def _ignore(reply) -> None:
    """An answer nothing waits for but its success."""


def _nbytes(frame) -> int:
    """The length of a frame as sent or received (bytes, a buffer, or a zmq.Frame)."""
    return memoryview(getattr(frame, "buffer", frame)).nbytes


class _Hub(Releases, OptimizerCalls, HookServer):
    """The client's sockets to the workers of one deployment, all with one identity, so that
    whichever worker finishes a pipelined request can answer the client directly."""

    def __init__(self, model: str, addresses: list[str], timeout: float,
                 holders: dict[str, tuple[str, int]] | None = None, keys=None,
                 heartbeat: float | None = None, max_answer_mb=answer_cap.DEFAULT_MAX_ANSWER_MB):
        super().__init__()
        self.model = model  # every message to a worker names the model it is for
        self.holders = holders or {}  # address -> (worker id, stage) for WorkerLost
        self.monitors: dict[zmq.Socket, str] = {}  # connection events -> address
        self.lost: dict[str, str] = {}  # address -> what was in flight when it went
        self.dropped: dict[str, bool] = {}  # address -> whether that worker still answers
        self.refused: set[str] = set()  # addresses that sent a frame over the cap
        self.max_answer_mb, cap = max_answer_mb, answer_cap.cap_bytes(max_answer_mb)
        self._keys, self._heartbeat = keys, heartbeat
        self.identity = f"client-{os.getpid()}-{uuid.uuid4().hex[:12]}".encode()
        self.ctx = zmq.Context.instance()
        self.timeout = timeout
        self.poller = zmq.Poller()
        self.socks: dict[str, zmq.Socket] = {}
        for address in addresses:
            if address not in self.socks:
                sock = self.ctx.socket(zmq.DEALER)
                sock.setsockopt(zmq.LINGER, 0)
                sock.setsockopt(zmq.IDENTITY, self.identity)
                sock.setsockopt(zmq.MAXMSGSIZE, cap)  # (answer_cap)
                if keys is not None:
                    keys.dial(sock)
                # a worker that stops answering (hung, cut off) is dropped (ping_options):
                # calls end with WorkerLost
                for option, value in (ping_options(heartbeat, ttl=True) if heartbeat
                                      else {}).items():
                    sock.setsockopt(option, value)
                # a worker that dies closes its connection: the monitor reports it at once
                monitor = watch(sock, answer_cap.EVENTS, idle_owner=True)
                self.poller.register(monitor, zmq.POLLIN)
                self.monitors[monitor] = address
                sock.connect(address)
                self.poller.register(sock, zmq.POLLIN)
                self.socks[address] = sock
        self._pid = os.getpid()
        # contexts whose graph is gone on the client, to release on the workers (see release)
        self.pending_releases: list[str] = []
        # address -> ids of values kept there that no client tensor holds any more
        self.pending_drops: dict[str, list[str]] = {}
        # what went where: see Deployment.stats
        self.stats = {"requests": 0, "waits": 0, "bytes_out": 0, "bytes_in": 0}
        # an attached client's: each stage's revision of its form, as its answers said and
        # as the model here has it; on_forms makes them agree (shared_form.follow)
        self.forms: dict[str, int] = {}
        self.forms_held: dict[str, int] = {}
        self.on_forms = None
        # calls sent without waiting (send_async): request id -> (what, on_reply); the
        # failures among them, in order, raised by the next request that waits
        self.in_flight: dict[int, tuple] = {}
        self.failed: list[tuple] = []
        # requests whose exchange waits below the one under way (a hook of ours that asks
        # the workers something while its call waits), and their answers that came first
        self._outer: set[int] = set()
        self.issued = 0  # messages the program sent, held or deferred (state_entries)
        self.writes = 0  # writes asked for (weights, module attributes): a hook that made one
        # changed what the pass it fired in computes (client_hooks)
        # while a hook runs that may not write the weights: why (client_hooks)
        self.weight_writes_refused: str | None = None
        self._early: dict[int, wire.Message] = {}
        self._busy = 0  # > 0 while a socket operation is under way (a request, a close)
        self._thread = threading.get_ident()  # the thread that used the sockets last
        # the sockets are one thread's at a time: a model called from several threads (a
        # server's request threads) runs their requests one after another; before, their
        # frames interleaved on a socket and one thread's read dropped another's answers,
        # whose calls then waited for their deadline (tests/integration/test_s7_threads.py)
        # (a client hook lends them to the threads it starts: socket_lock.py)
        self.lock = SocketLock(lambda: self.timeout)
        # optimizer calls not sent yet, in the order they were made, each {address: its
        # optimizer_call there}: the next forward through every stage carries them (no
        # round trip of their own); any other request sends them first
        self.pending_optimizer: list[dict] = []
        # ids of the optimizers whose shares a step or a load made on these workers: their
        # later calls may ride with a forward (a recovered model gets a new channel)
        self.made_shares: set[int] = set()
        # the stages' addresses in order when they form a pipeline (a chain): its writes
        # travel it from the first stage, behind the calls sent on before them
        self.chain: list[str] | None = None
        self.in_step = False  # a chain's train_step runs (its stages wait for its hooks)
        self.stage_outbox = None  # a train_step's requests held for their stages' order
        self.together = Together(self.socks)  # a burst of requests, one message per worker
        # a tree-placed model others may use: its writes numbered (distributed/pinning.py)
        self.versions = None
        # requests answered ahead of their hooks' answers (see _stands), and an error one
        # of them got afterwards, raised with the next request
        self._answered_ahead: dict[int, None] = {}
        self.late_error: wire.Message | None = None
        # optimizer steps still pending when the program ends go then (weights the stages
        # keep must not miss a step the program made)
        number = next(_hub_numbers)
        if not number:  # with the first hub: it runs before the finalizers registered
            atexit.register(_flush_all_at_exit)  # earlier (a local cluster's processes stop)
        _HUBS[number] = self

    reply_to = property(lambda self: self.identity.hex())

    def send(self, address: str, msg_type: str, fields: dict, *, req: int = 0,
             ctx: str | None = None, may_hold: bool = False) -> None:
        with self.lock:
            self._send(address, msg_type, fields, req, ctx, may_hold)

    def _send(self, address: str, msg_type: str, fields: dict, req: int, ctx: str | None,
              may_hold: bool) -> None:
        if not self.socks:
            raise RuntimeError(f"the deployed model {self.model} is closed; deploy it again "
                               "to use it")
        self.issued += 1
        with self.together:  # what the outbox sends first goes with it, as one message
            if self.stage_outbox is not None and self.stage_outbox.hold(  # (stage_outbox.py)
                    address, msg_type, fields, req, ctx, may_hold):
                return
            if self._outbox:  # answers to hook events first, as they were made
                self.flush_answers()
            frames = wire.encode(msg_type, {"model": self.model, **fields}, req=req, ctx=ctx)
            self.stats["requests"] += 1
            self.stats["bytes_out"] += sum(_nbytes(f) for f in frames)
            self.together.send(address, frames)

    def write_all(self, calls: list[tuple], *, what: str,
                  carries_optimizer_calls: bool = False) -> None:
        """Writes of weights, each (address, message type, fields), made as one. On a chain
        they go as one "write" to the first stage, which passes them on stage to stage, so
        that every call computes all stages with the weights it started with
        (workers/versions.py); otherwise each goes to its worker."""
        straight = post_accumulate.straight_to_stage(self, calls, what)
        self.writes += 1
        through = None if straight else self._write_through(calls)
        if through is None and self.versions is not None:
            self.versions.write(self, calls, what=what, carries=carries_optimizer_calls)
        elif through is None:
            msg_type = calls[0][1]
            self.request_all([(a, f) for a, _, f in calls], msg_type, what=what,
                             carries_optimizer_calls=carries_optimizer_calls)
        else:
            self.request_all([through], "write", what=what,
                             carries_optimizer_calls=carries_optimizer_calls)

    def _write_through(self, calls: list[tuple]) -> tuple | None:
        """(first stage's address, "write" fields) carrying ``calls`` down the chain; None
        when the model is no chain (or a call is for a worker outside it)."""
        chain = self.chain
        if (not chain or len(set(chain)) != len(chain) or len(chain) < 2
                or any(a not in chain for a, _, _ in calls)):
            return None
        parts: list[list] = [[] for _ in chain]
        for address, msg_type, fields in calls:
            parts[chain.index(address)].append({"type": msg_type, "fields": fields})
        return chain[0], {"stage": 0, "parts": parts, "reply_to": self.reply_to}

    def send_value(self, source: str, vid: str, to: str) -> None:
        """Have the worker at ``source`` push its kept value ``vid`` to the worker at
        ``to`` (one-way, in request order there)."""
        self.send(source, "send_value", {"values": [vid], "to": to}, may_hold=True)

    def send_async(self, address: str, msg_type: str, fields: dict, ctx: str, what: str,
                   on_reply) -> None:
        """Send a request and go on without its reply: the worker runs it in the order its
        requests came; ``on_reply(reply)`` runs when the answer comes (while the client
        waits for anything), and a failure is raised by the next request that waits,
        naming ``what``."""
        with self.lock:
            self._send_async(address, msg_type, fields, ctx, what, on_reply)

    def _send_async(self, address: str, msg_type: str, fields: dict, ctx: str, what: str,
                    on_reply) -> None:
        if self.late_error is not None:
            self._raise_late_error()
        if self.lost:
            self._raise_lost(next(iter(self.lost)), what, ctx)
        if self.versions is not None and self.versions.writes_pending(self):
            self.flush_optimizer_calls()  # numbered, and waited for (pinning)
        if self.pending_optimizer and msg_type != "forward":
            # (a forward carries its stage's own; the others go first, without waiting:
            # each worker runs them before this request, in order)
            pending, self.pending_optimizer = self.pending_optimizer, []
            for calls in pending:
                named = f"optimizer {next(iter(calls.values()))['action']}"
                writes = [(to, "step", {"optimizer": spec}) for to, spec in calls.items()]
                through = self._write_through(writes)
                if through is not None:  # down the chain, as one
                    writes = [(through[0], "write", through[1])]
                for to, kind, write in writes:
                    step = next_request_id()
                    self.send(to, kind, write, req=step)
                    self.in_flight[step] = (named, _ignore)
        if len(self.in_flight) >= MAX_AHEAD:
            self._keep_up(what)
        req = next_request_id()
        self.send(address, msg_type, fields, req=req, ctx=ctx, may_hold=True)
        self.in_flight[req] = (what, on_reply)

    def _keep_up(self, what: str) -> None:
        """Wait until at most half of ``MAX_AHEAD`` calls sent without waiting are
        unanswered (their failures are raised by the next request that waits, as ever)."""
        self.flush_releases()  # (and the requests held for their stages' order)
        deadline = Deadline(self.timeout)
        while len(self.in_flight) > MAX_AHEAD // 2:
            events = poll_until(self.poller, deadline)
            if not events or any(sock in self.monitors for sock in events):
                # no answer in time, or a worker went: as a waited request says it
                self.request_all([], "keep_up", what=what)
                return
            for sock in events:
                try:
                    self._take(sock, [], {}, deadline)
                finally:
                    self.flush_answers(sock)

    def settle(self) -> None:
        """Wait until every call sent without waiting has answered (raising the first
        failure among them)."""
        if self.in_flight or self.failed:
            self.request_all([], "settle", what="the calls in flight")

    def _landed(self, reply: wire.Message) -> None:
        """The answer to a call sent without waiting."""
        what, on_reply = self.in_flight.pop(reply.req)
        if reply.type == "error":
            self.failed.append((reply.req, what, reply))
            return
        try:
            on_reply(reply)
        except Exception as exc:  # noqa: BLE001 - raised by the next request that waits
            self.failed.append((reply.req, what, exc))

    def _raise_failed(self):
        """The failure of the first call issued of those sent without waiting that failed: a
        later one (one that used its result) may answer first, from another worker."""
        (_, what, failure), self.failed = min(self.failed, key=lambda f: f[0]), []
        note = (f"(from {what}, which the program did not wait for: it failed after the "
                "program went on; a call that used its result failed with it)")
        if isinstance(failure, BaseException):
            failure.add_note(note)
            raise failure
        try:
            raise_error(failure)
        except Exception as exc:
            exc.add_note(note)
            raise

    def request(self, address: str, msg_type: str, fields: dict, *, ctx: str | None = None,
                what: str = "") -> wire.Message:
        """Send to ``address``; wait for the reply with the same id from any worker."""
        if msg_type == "module_op":
            self.writes += 1
        return self.request_all([(address, fields)], msg_type, ctx=ctx, what=what)[0]

    def request_all(self, calls: list[tuple], msg_type: str, *,
                    ctx: str | None = None, what: str = "",
                    carries_optimizer_calls: bool = False) -> list[wire.Message]:
        """Send one request per (address, fields) or (address, fields, context) at once,
        then wait for every reply (from any worker), so the workers serve them side by side
        (and micro-batches flow through the stages as a pipeline); the replies in call
        order. The first error reply is raised once all have come."""
        with self.lock:
            return self._request_all(calls, msg_type, ctx, what, carries_optimizer_calls)

    def _request_all(self, calls: list[tuple], msg_type: str, ctx: str | None, what: str,
                     carries_optimizer_calls: bool) -> list[wire.Message]:
        if self.late_error is not None:
            self._raise_late_error()
        if self.stage_outbox is not None:  # held requests go before any wait (the drops
            self.stage_outbox.drain()  # and releases go with the next calls: _exchange)
        self.stats["waits"] += 1
        if self.pending_optimizer and not carries_optimizer_calls:
            self.flush_optimizer_calls()
        if self.lost:  # a worker of this model went away earlier
            self._raise_lost(next(iter(self.lost)), what or msg_type, ctx)
        self._busy += 1
        self._thread = threading.get_ident()
        try:
            if self.in_flight and calls:  # they answer first: this request may read (at
                # once, on its worker) what they change, or write what they read
                self._exchange([], msg_type, ctx, what)
            replies = self._exchange(calls, msg_type, ctx, what)
            if self._busy == 1 and self.forms != self.forms_held and self.on_forms:
                self.on_forms()  # the deployer changed the model's form: follow it first
            return replies
        except KeyboardInterrupt:  # Ctrl-C: no stage may keep waiting for the others
            if msg_type == "train_step":
                self._abort_step(ctx, "the client was interrupted")
            raise
        finally:
            self._busy -= 1
            if not self._busy:  # every pass of the call has run: its rounds are over, and
                self._rounds.clear()  # the tensors its hooks were given are theirs alone
                self.given.clear()

    def _exchange(self, calls: list[tuple], msg_type: str, ctx: str | None,
                  what: str) -> list[wire.Message]:
        reqs = []
        with self.together:  # the pending drops and releases, then the calls: one message
            if calls:  # to each worker
                self.flush_releases()
            for call in calls:
                reqs.append(next_request_id())
                self.send(call[0], msg_type, call[1], req=reqs[-1],
                          ctx=call[2] if len(call) > 2 else ctx)
        replies: dict[int, wire.Message] = {}
        deadline = Deadline(self.timeout)
        outer, self._outer = self._outer, self._outer | set(reqs)
        try:
            self._wait_replies(reqs, replies, deadline, calls, msg_type, ctx, what)
        finally:
            self._outer = outer
            for req in reqs:  # (an exchange that failed leaves nothing behind)
                self._early.pop(req, None)
        # warnings a stage sent before passing its result on may still be on their way on
        # another socket than the last answer's: take those that are here (with one socket
        # they came before the answer, in order)
        for sock in dict(self.poller.poll(0)) if len(self.socks) > 1 else ():
            if sock in self.monitors:
                if self._disconnected(sock):
                    self.lost[self.monitors[sock]] = "no call (between calls)"
                continue
            try:  # (an answer an exchange below waits for is kept for it, as above;
                # never a waiting read: a hook served from an earlier socket of this
                # poll may have made a call that took what this one had)
                self._take(sock, reqs, replies, deadline)
            finally:
                self.flush_answers(sock)
        if self.failed:
            self._raise_failed()
        for req in reqs:
            reply = replies[req]
            if reply.type == "error":
                exc, self.hook_error = self.hook_error, None
                if exc is not None and raised_by(reply, exc):  # our own hook: raise that
                    raise exc
                # (an error the worker raised instead: one of an always_call forward hook
                # is silenced by the forward's own error there, as in one process)
                raise_error(reply)
        if self.late_error is not None:
            self._raise_late_error()
        return [replies[req] for req in reqs]

    def _wait_replies(self, reqs: list, replies: dict, deadline, calls: list, msg_type: str,
                      ctx: str | None, what: str) -> None:
        """Take what comes until every one of ``reqs`` has its answer in ``replies`` and
        no call sent without waiting is in flight (every call sent without waiting
        answers first: what is asked now may read what they change, and their failures are
        raised before anything that followed them)."""
        while len(replies) < len(reqs) or self.in_flight:
            for req in [r for r in reqs if r in self._early]:  # taken by an exchange above
                self._keep_reply(self._early.pop(req), replies)
            if len(replies) == len(reqs) and not self.in_flight:
                return
            if self.lost:  # a call nested in this one (a client hook's, or its thread's)
                # took the close of a worker's connection: this call's answer cannot come
                self._lost_during(next(iter(self.lost)), calls, msg_type, ctx, what)
            events = poll_until(self.poller, deadline)
            if not events:
                self.in_flight.clear()  # late answers to them are dropped
                raise RemoteTimeout(f"no answer to {what or msg_type!r} within "
                                    f"{self.timeout:g} s")
            for sock in events:
                if sock in self.monitors:
                    if self._disconnected(sock):
                        self.lost[self.monitors[sock]] = what or msg_type
                        self._lost_during(self.monitors[sock], calls, msg_type, ctx, what)
                    continue
                try:
                    self._take(sock, reqs, replies, deadline)
                finally:  # the answers to the events of the burst go together
                    self.flush_answers(sock)

    def _lost_during(self, address: str, calls: list, msg_type: str, ctx: str | None,
                     what: str):
        """Raise ``WorkerLost`` for the worker at ``address``, gone while ``calls`` wait."""
        if msg_type == "train_step":  # the other stages must stop waiting
            worker = self.holders.get(address, (address, -1))[0]
            self._abort_step(ctx, f"worker {worker} is lost", skip=address)
        in_flight = [c[2] if len(c) > 2 else ctx for c in calls]
        self._raise_lost(address, what or msg_type, ", ".join(
            dict.fromkeys(c for c in in_flight if c)) or None)  # (each context once)

    def _take(self, sock: zmq.Socket, reqs: list, replies: dict, deadline) -> None:
        """Take what has come on ``sock``, one poll for it all: serve hook events (their
        answers queued), issue warnings, and keep the replies to ``reqs``."""
        for _ in range(_BURST):
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:  # all taken (or a hook's own call took it)
                return
            self.stats["bytes_in"] += sum(_nbytes(f) for f in frames)
            for reply in received(frames, lambda: self._who(sock)):  # (a batch's in order)
                self._take_one(sock, reply, reqs, replies, deadline)

    def _who(self, sock: zmq.Socket) -> str:
        """The worker at the other end of ``sock``, as an error names it."""
        address = next((a for a, s in self.socks.items() if s is sock), "?")
        worker = self.holders.get(address)
        return f"worker {worker[0]} at {address}" if worker else f"the worker at {address}"

    def _take_one(self, sock, reply: wire.Message, reqs: list, replies: dict, deadline):
        if reply.type == "ok" and self.on_forms is not None:  # (an attached client's)
            result = reply.get("result")
            if type(result) is dict and result.get("forms"):
                self.forms.update(result["forms"])
        if reply.type == "hook_event":  # a worker runs one of our hooks meanwhile
            self._serve_event(sock, reply)
            deadline.renew()  # the worker is alive
        elif reply.type == "warning":
            issue_warning(reply)
        elif reply.req in self.in_flight:
            self._landed(reply)
            deadline.renew()  # the workers go on
        elif reply.req in reqs:
            self._keep_reply(reply, replies)
        elif reply.req in self._outer:  # an exchange below this one waits for it
            self._early[reply.req] = reply
        elif reply.type == "error" and reply.req in self._answered_ahead:
            del self._answered_ahead[reply.req]
            self.late_error = reply
        # else: a late answer to a timed-out request

    def _keep_reply(self, reply: wire.Message, replies: dict) -> None:
        if reply.type != "ok" or self._stands(reply):  # (else the pass runs again: its
            replies[reply.req] = reply  # answer follows)

    def _stands(self, reply: wire.Message) -> bool:
        """Whether the ``ok`` answer ``reply`` stands. One that went before the worker took
        its hooks' answers (``ahead``: their round, whose every event came before it on its
        socket and was answered here) stands unless one of them changed something or
        failed; then the worker runs the pass again, or fails, and answers again."""
        ahead = reply.get("ahead")
        if ahead is None:
            return True
        if ahead in self._broken_rounds:
            return False
        self._answered_ahead[reply.req] = None
        while len(self._answered_ahead) > _ANSWERED_AHEAD_KEPT:
            del self._answered_ahead[next(iter(self._answered_ahead))]
        return True

    def _raise_late_error(self):
        """The worker failed a pass after its answer, sent ahead of the hooks' answers, was
        used: say so as soon as that is known (the error came during a later call), with
        that call or the next."""
        reply, self.late_error = self.late_error, None
        try:
            raise_error(reply)
        except Exception as exc:
            raise RuntimeError(
                "an earlier call on this model returned, then failed on the worker while it "
                "took its client hooks' answers (its result was used; what the hooks asked "
                f"for after the pass may be missing): {reply['kind']}: {reply['message']}"
            ) from exc

    def _disconnected(self, monitor: zmq.Socket) -> bool:
        ended = answer_cap.ended(monitor)
        if ended == "refused":
            self.refused.add(self.monitors[monitor])
        return ended is not None

    def _raise_lost(self, address: str, what: str, ctx: str | None):
        worker, stage = self.holders.get(address, (address, -1))
        if address in self.refused and answer_cap.still_up(address, self._keys):
            raise answer_cap.AnswerTooLarge(worker, stage, what, ctx, cap_mb=self.max_answer_mb)
        if address not in self.dropped:  # asked once: a live worker dropped this client
            self.dropped[address] = still_answers(address, worker, keys=self._keys, within=max(
                1.0, 4 * (self._heartbeat or 0)))
        raise WorkerLost(worker, stage, what, ctx, dropped=self.dropped[address])

    def _abort_step(self, step: str | None, reason: str, skip: str | None = None) -> None:
        """Tell every stage (but ``skip``) to give up training step ``step``."""
        for address in self.socks:
            if address != skip and step is not None:
                self.send(address, "pipe", {"step": step, "kind": "abort", "mb": -1,
                                            "reason": reason})

    def close(self, unload: bool = True) -> None:
        """Close the sockets; with ``unload`` the workers first drop the model's stages (sent
        without waiting: a worker that is gone has nothing left to drop). When a call
        returned before its workers took its hooks' answers (see ``_stands``), a request
        behind those answers on each socket waits for them to be taken first."""
        with self.lock:
            self._close(unload)

    def _close(self, unload: bool) -> None:
        late = None  # an earlier call's failure heard now: raised once the sockets closed
        if self._answered_ahead and self.socks and os.getpid() == self._pid \
                and not self._busy:
            # a call answered ahead of its hooks' answers: the workers take those answers
            # before they see this connection close (a request behind them on each socket)
            try:
                self.request_all([(address, {}) for address in self.socks
                                  if address not in self.lost], "list_hooks",
                                 what="the last hook answers")
            except (ClusterError, RemoteTimeout, RemoteError):
                pass  # a worker that is gone took nothing more
            except RuntimeError as exc:  # _raise_late_error's
                late = exc
            self._answered_ahead.clear()
        self._busy += 1  # from now on nothing is sent: the model's stages go as a whole
        if os.getpid() == self._pid:
            if self._outbox and self.socks:
                self.flush_answers()
            for sock in self.socks.values():
                sock.disable_monitor()
            for monitor in self.monitors:
                monitor.close(linger=0)
            for address, sock in self.socks.items():
                if unload and address not in self.lost:
                    self.send(address, "unload", {})
                sock.close(linger=500 if unload else 0)
        self.socks = {}
        if late is not None:
            raise late
