"""Requests with deadlines over ZeroMQ, and the errors a remote call can end with.

Every process talks through ``disthook.wire`` messages. A ``Peer`` is one DEALER socket
connected to one endpoint; ``request`` sends a message with a fresh request id and waits,
never longer than its deadline, for the reply with the same id (replies to requests that
already timed out are dropped). An ``error`` reply becomes ``RemoteError``. Request ids come
from one counter per process and waits go through one poll-until-deadline helper, both
shared with the client's channel to a model's stages (``channel``).
"""
from __future__ import annotations

import itertools
import os
import threading
import time

import zmq

from disthook import wire
from disthook.service import frame_cap
from disthook.service.endpoint import parse
from disthook.service.monitors import watch
from disthook.service.security import (
    HANDSHAKE_FAILURES,
    AuthenticationError,
    refusal_reason,
)

__all__ = [
    "DEFAULT_TIMEOUT",
    "AuthenticationError",
    "ClusterError",
    "CoordinatorUnreachable",
    "Deadline",
    "NotACoordinator",
    "Peer",
    "RemoteError",
    "RemoteTimeout",
    "WorkerLost",
    "dial_once",
    "error_fields",
    "greet",
    "next_request_id",
    "poll_until",
    "raise_error",
]

DEFAULT_TIMEOUT = 30.0  # seconds a request may wait for its reply unless told otherwise


class ClusterError(RuntimeError):
    """A cluster that cannot start, or a call it cannot take."""


class NotACoordinator(ClusterError):
    """Something listens at the address, but not a disthook coordinator of this protocol
    version: another program, or a disthook process of another role or version."""

    def __init__(self, address: str, what: str):
        self.address = address
        super().__init__(f"{address} is not a disthook coordinator (or a different protocol "
                         f"version): {what}; check the address")


HANDSHAKE_WITHIN_S = 1.0  # a ZeroMQ peer greets this soon once its connection is made


class RemoteError(RuntimeError):
    """An exception raised in another process, with where it happened and its traceback."""

    def __init__(self, kind: str, message: str, *, worker: str | None = None,
                 path: str | None = None, stage: str | None = None,
                 traceback: str | None = None):
        self.kind, self.message = kind, message
        self.worker, self.path, self.stage = worker, path, stage
        self.remote_traceback = traceback
        where = ", ".join(p for p in (f"worker {worker}" if worker else "",
                                      f"module {path!r}" if path else "",
                                      stage or "") if p)
        text = f"{kind}: {message}" + (f" (on {where})" if where else "")
        if traceback:
            text += "\n\nRemote traceback:\n" + traceback.rstrip()
        super().__init__(text)


class RemoteTimeout(TimeoutError):
    """No reply came before the deadline."""


class WorkerLost(ClusterError):
    """A worker holding a stage of the model went away (its connection closed) while a call
    needed it, or before: names the worker, its stage and what was in flight. ``dropped``:
    the worker still answers, so it was the connection that went (pings unanswered one way
    or the other: a process stopped, suspended or cut off for a while), not the worker."""

    def __init__(self, worker: str, stage: int, what: str, context: str | None = None,
                 stderr: list[str] | None = None, dropped: bool = False):
        self.worker, self.stage, self.what, self.context = worker, stage, what, context
        self.stderr = stderr or []  # the worker process's last stderr lines, when known
        self.dropped = dropped
        ctx = f" (context {context})" if context else ""
        said = ("; its last stderr lines:\n" + "\n".join(f"  {line}" for line in self.stderr)
                if self.stderr else "")
        if dropped:
            super().__init__(
                f"worker {worker}, holding stage {stage}, still answers, but its connection "
                f"with this client closed during {what}{ctx}: one side did not answer the "
                "other's pings for a few heartbeats (this process or the worker was "
                "stopped, suspended or cut off), and the worker dropped this client's "
                "graphs, hooks and calls there; this model object stays unusable: attach "
                "the model again (cluster.attach(name)), or, as its deployer, close it and "
                "deploy it again")
            return
        super().__init__(f"worker {worker}, holding stage {stage}, is lost: its connection "
                         f"closed during {what}{ctx}, and its stage's state with it; "
                         "remote.recover() places the stages again on live workers and loads "
                         "the model's last checkpoint (remote.save(path) makes one; "
                         "local_cluster(restart=True) starts a replacement worker), or deploy "
                         f"the model again{said}")


def error_fields(exc: BaseException, *, worker: str | None = None, path: str | None = None,
                 stage: str | None = None, traceback: str | None = None) -> dict:
    """The fields of an ``error`` message describing ``exc``: where it happened (worker,
    module path, stage) and the remote traceback."""
    return {"kind": type(exc).__name__, "message": str(exc), "worker": worker, "path": path,
            "stage": stage, "traceback": traceback}


# built-in exceptions a remote one is also an instance of, so that ``except TypeError`` and
# ``except PermissionError`` catch them as in one process
_ALSO = {cls.__name__: cls for cls in (
    TypeError, ValueError, IndexError, KeyError, LookupError, AttributeError,
    NotImplementedError, PermissionError, ZeroDivisionError, OverflowError, MemoryError,
    AssertionError)}
_REMOTE_KINDS: dict[str, type] = {}


def remote_error_class(kind: str) -> type:
    """``RemoteError``, or for a built-in kind a subclass that is also that built-in
    (``RemotePermissionError``: a ``RemoteError`` and a ``PermissionError``)."""
    builtin = _ALSO.get(kind)
    if builtin is None:
        return RemoteError
    cls = _REMOTE_KINDS.get(kind)
    if cls is None:
        cls = _REMOTE_KINDS[kind] = type(f"Remote{kind}", (RemoteError, builtin), {
            "__module__": __name__, "__str__": RemoteError.__str__})
    return cls


def raise_error(reply: wire.Message):
    """Raise the ``RemoteError`` an ``error`` reply describes (also an instance of its kind
    when that is a built-in exception)."""
    raise remote_error_class(reply["kind"])(
        reply["kind"], reply["message"], worker=reply.get("worker"), path=reply.get("path"),
        stage=reply.get("stage"), traceback=reply.get("traceback"))


def malformed_answer(exc: wire.WireError, who: str) -> wire.Message | None:
    """The ``error`` reply that stands for an answer of ``who`` that could not be read, when
    its header named the request it answers (else None: it answers nothing we know). A
    client that dropped it waited for that request's deadline and said no answer came."""
    if not exc.req:
        return None
    return wire.Message("error", exc.req, None, {
        "kind": "WireError",
        "message": f"{who} answered this request with a message this client cannot read "
                   f"({exc}); no server of protocol version {wire.PROTOCOL_VERSION} sends it: "
                   "check that both sides run the same disthook version and that the "
                   "address is the cluster's"})


def raised_by(reply: wire.Message, exc: BaseException) -> bool:
    """Whether the ``error`` reply is the error of a client hook that raised ``exc`` (a
    worker raises a client hook's error as "... raised <kind>: <message>"), not one the
    worker raised instead (a forward's own error, which silences an ``always_call``
    forward hook's)."""
    return f"raised {type(exc).__name__}: {exc}" in str(reply.get("message", ""))


_request_ids = itertools.count(1)


def next_request_id() -> int:
    """A request id no other request of this process has (replies are matched by it)."""
    return next(_request_ids)


class Deadline:
    """The moment a wait gives up: ``seconds`` from now, moved on again by ``renew``."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.renew()

    def renew(self) -> None:
        self.at = time.monotonic() + self.seconds

    def left(self) -> float:
        return self.at - time.monotonic()


def poll_until(poller: zmq.Poller, deadline: Deadline) -> dict:
    """The poller's ready sockets (socket -> events) as soon as there are any; an empty
    dict once ``deadline`` has passed without any."""
    while True:
        left = deadline.left()
        if left <= 0:
            return {}
        ready = dict(poller.poll(int(left * 1000) + 1))
        if ready:
            return ready


def dial_once(address: str, *, keys=None, within: float = 1.0) -> bool | None:
    """Whether something listens at ``address``: one connection, made with the cluster's
    ``keys`` so that a server sees an ordinary client come and go. False when the connection
    is refused (on this machine at once) or the host is unknown, True once the handshake is
    done, None when nothing is known within ``within`` seconds (a host that drops packets).
    ``AuthenticationError`` when the server refuses the keys (or the two sides' security
    differs); ``NotACoordinator`` when what took the connection does not speak ZeroMQ (it
    has ``HANDSHAKE_WITHIN_S`` seconds to greet)."""
    from zmq.utils.monitor import recv_monitor_message

    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    if keys is not None:
        keys.dial(sock)
    monitor = watch(sock, zmq.EVENT_CONNECT_RETRIED | zmq.EVENT_CONNECTED
                    | zmq.EVENT_HANDSHAKE_SUCCEEDED | HANDSHAKE_FAILURES)
    connected = False
    try:
        sock.connect(str(parse(address)))
        deadline = Deadline(within)
        while monitor.poll(max(0, int(deadline.left() * 1000))):
            event = recv_monitor_message(monitor)
            if event["event"] == zmq.EVENT_CONNECT_RETRIED:
                return False
            if event["event"] == zmq.EVENT_CONNECTED:  # now the peer must greet
                connected, deadline = True, Deadline(HANDSHAKE_WITHIN_S)
                continue
            if event["event"] == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                return True
            why = refusal_reason(event, keyed=keys is not None)
            if why is not None:
                raise AuthenticationError(f"{address} refused the connection: {why}")
            raise NotACoordinator(address, "what listens there does not speak ZeroMQ's "
                                           "protocol (its handshake failed)")
        if connected:
            raise NotACoordinator(address, "what listens there took the connection but did not "
                                           f"greet as ZeroMQ does within {HANDSHAKE_WITHIN_S:g} s")
        return None
    finally:
        sock.disable_monitor()
        monitor.close(linger=0)
        sock.close(linger=0)


def greet(address: str, *, keys=None, timeout: float = DEFAULT_TIMEOUT) -> bool:
    """Ask what listens at ``address`` (a ZeroMQ peer) what it is: True when a disthook
    coordinator of this protocol version answers, False when nothing answers within
    ``timeout``; ``NotACoordinator`` for any other answer, at once."""
    with Peer(address, name=address, keys=keys) as peer:
        req = next_request_id()
        peer.send("hello", {"name": wire.PROTOCOL_NAME, "protocol": wire.PROTOCOL_VERSION},
                  req=req)
        deadline = Deadline(timeout)
        while True:
            ready = poll_until(peer._poller, deadline)
            if not ready:
                return False
            if peer._refusals in ready:
                try:
                    peer._connection_event("hello")
                except frame_cap.FrameTooLarge:
                    raise NotACoordinator(address, "it answered the greeting with a frame "
                                                   f"over {peer.max_frame_mb:g} MiB") from None
            if peer._sock not in ready:
                continue
            try:
                reply = wire.decode(peer._sock.recv_multipart(copy=False))
            except wire.WireError:
                raise NotACoordinator(address, "it answered the greeting with something that "
                                               "is not a disthook message") from None
            if reply.type == "error":  # a disthook process from before the greeting
                raise NotACoordinator(address, "it answered the greeting with an error: "
                                               f"{reply.fields.get('message')}")
            if reply.type != "hello" or reply.fields["name"] != wire.PROTOCOL_NAME:
                raise NotACoordinator(address, f"it answered the greeting with a "
                                               f"{reply.type!r} of {reply.fields.get('name')!r}")
            role, version = reply.fields.get("role"), reply.fields["protocol"]
            if version != wire.PROTOCOL_VERSION:
                raise NotACoordinator(address, f"a disthook {role} of protocol version "
                                               f"{version} answered, and this client speaks "
                                               f"version {wire.PROTOCOL_VERSION}: run the "
                                               "same disthook version on both sides")
            if role != "coordinator":
                raise NotACoordinator(address, f"a disthook {role} answered: pass the "
                                               "coordinator's address")
            return True


# the largest frame a Peer takes by default: a header (servers send no arrays to it)
MAX_FRAME_MB = wire.DEFAULT_LIMITS.max_header_bytes >> 20


class Peer:
    """A request/reply channel to one endpoint (a DEALER socket; the far end is a ROUTER)."""

    def __init__(self, address: str, *, context: zmq.Context | None = None,
                 identity: bytes | None = None, name: str | None = None, keys=None,
                 max_frame_mb: float = MAX_FRAME_MB):
        address = str(parse(address))  # ValueError before any socket for a bad address
        if isinstance(max_frame_mb, bool) or not isinstance(max_frame_mb, (int, float)) or \
                not max_frame_mb >= MAX_FRAME_MB:
            raise ValueError(f"max_frame_mb takes a size in MiB of at least {MAX_FRAME_MB} "
                             f"(an answer's header), got {max_frame_mb!r}")
        self.max_frame_mb = max_frame_mb
        self.address = address
        self.name = name or address
        self._ctx = context or zmq.Context.instance()
        self._sock = self._ctx.socket(zmq.DEALER)
        self._sock.setsockopt(zmq.LINGER, 0)
        if identity is not None:
            self._sock.setsockopt(zmq.IDENTITY, identity)
        if keys is not None:
            keys.dial(self._sock)
        # its answers are headers: a larger frame closes the connection unread, which the
        # monitor shows as a close never dialed again (frame_cap.py); before, a peer that
        # lied (or was not ours) could make this process hold a frame of any size
        self._sock.setsockopt(zmq.MAXMSGSIZE, int(max_frame_mb * (1 << 20)) + wire.FRAME_SLACK)
        # a server that refuses us never answers: its refusal shows on the monitor
        self._refusals = watch(self._sock, HANDSHAKE_FAILURES | frame_cap.EVENTS, idle_owner=True)
        self._poller = zmq.Poller()
        self._poller.register(self._sock, zmq.POLLIN)
        self._poller.register(self._refusals, zmq.POLLIN)
        self._sock.connect(address)
        self._pid = os.getpid()
        # one thread's request at a time (a client's coordinator connection serves all its
        # threads): before, one thread's read dropped the reply another waited for
        self._lock = threading.RLock()

    def send(self, msg_type: str, fields: dict | None = None, *, req: int = 0,
             ctx: str | None = None) -> None:
        frames = wire.encode(msg_type, fields, req=req, ctx=ctx)
        with self._lock:
            self._sock.send_multipart(frames, copy=False)

    def request(self, msg_type: str, fields: dict | None = None, *, ctx: str | None = None,
                timeout: float = DEFAULT_TIMEOUT) -> wire.Message:
        """Send and wait for the reply; ``RemoteError`` for an error reply."""
        with self._lock:
            return self._request(msg_type, fields, ctx, timeout)

    def _request(self, msg_type: str, fields: dict | None, ctx: str | None,
                 timeout: float) -> wire.Message:
        req = next_request_id()
        self.send(msg_type, fields, req=req, ctx=ctx)
        deadline = Deadline(timeout)
        while True:
            ready = poll_until(self._poller, deadline)
            if not ready:
                raise RemoteTimeout(f"no reply to {msg_type!r} from {self.name} within "
                                    f"{timeout:g} s")
            if self._refusals in ready:
                self._connection_event(msg_type)
            if self._sock not in ready:
                continue
            try:
                reply = wire.decode(self._sock.recv_multipart(copy=False))
            except wire.WireError as exc:  # ours fails at once; another's is not ours
                reply = malformed_answer(exc, self.name)
                if reply is None:
                    continue
            if reply.req != req:
                continue  # the late reply of a request that already timed out
            if reply.type == "error":
                raise_error(reply)
            return reply

    def _connection_event(self, what: str) -> None:
        """Raise for the event waiting on the monitor: ``AuthenticationError`` for a refused
        handshake, ``FrameTooLarge`` for a connection closed for a frame over the cap."""
        from zmq.utils.monitor import recv_monitor_message

        try:
            event = recv_monitor_message(self._refusals, zmq.NOBLOCK)
        except zmq.Again:
            return
        why = refusal_reason(event)
        if why is not None:
            raise AuthenticationError(f"{self.name} refused the connection: {why}")
        if event["event"] == zmq.EVENT_DISCONNECTED and not frame_cap.redialed(self._refusals):
            raise frame_cap.FrameTooLarge(self.name, what, self.max_frame_mb)

    def close(self) -> None:
        if os.getpid() == self._pid:  # a forked child must not close the parent's socket
            self._sock.disable_monitor()
            self._refusals.close(linger=0)
            self._sock.close(linger=0)

    def __enter__(self) -> Peer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def still_answers(address: str, worker: str, *, keys=None, within: float = 1.0) -> bool:
    """Whether ``worker`` answers at ``address`` within ``within`` seconds (a connection
    to it closed: was it the worker that went, or this client it dropped?). A refused
    connection (the process gone, its host up) says no at once."""
    try:
        if not dial_once(address, keys=keys, within=within):
            return False
        with Peer(address, keys=keys) as peer:
            return peer.request("status", timeout=within)["result"].get("id") == worker
    except (ClusterError, RemoteError, OSError, zmq.ZMQError, KeyError, TypeError,
            AttributeError):
        return False


class CoordinatorUnreachable(ClusterError):
    """No coordinator at the address ``connect`` was given: nothing listens there (refused,
    or an unknown host), or nothing answered within the timeout. The message says what to
    do; ``advice(keys_option)`` words it for the command line (``"--keys DIR"``)."""

    def __init__(self, address: str, *, refused: bool, waited: float = 0.0,
                 listening: bool | None = None, unknown_host: str | None = None,
                 with_keys: bool = False):
        self.address, self.refused, self.waited = address, refused, waited
        self.listening, self.unknown_host, self.with_keys = listening, unknown_host, with_keys
        super().__init__(self.advice("keys=DIR"))

    def advice(self, keys_option: str) -> str:
        """The message, naming the keys option as ``keys_option``."""
        if self.unknown_host:
            return (f"no coordinator at {self.address}: the host {self.unknown_host!r} is "
                    "unknown; check the address")
        command = "launch" if self.address.startswith("tcp://") else "coordinator"
        start = f"start one with `disthook {command} --bind {self.address}`"
        if self.refused:
            return (f"no coordinator at {self.address}: nothing listens there (connection "
                    f"refused); {start}, or check the address")
        keys = "" if self.with_keys else f", or, if the cluster runs with keys, pass {keys_option}"
        what = "something listens there but " if self.listening else ""
        return (f"no coordinator at {self.address}: {what}no answer to a status request "
                f"within {self.waited:g} s; check the address, {start}{keys}")
