"""The request loop shared by the coordinator and worker processes.

A ``Service`` owns a ROUTER socket. Each request is decoded with ``disthook.wire`` and
handed to the method ``on_<type>(msg, sender)``; what the method returns is sent back as
an ``ok`` reply with the same request id, and whatever it raises goes back as an ``error``
reply with the traceback — the service itself carries on. A malformed message gets an
error reply too and never stops the loop. Between messages the loop calls ``tick()`` at
least every ``tick_interval`` seconds (heartbeats, deadlines), and it ends on ``stop()``,
on SIGTERM/SIGINT, or when the process that started it dies (``parent_pid``).
"""
from __future__ import annotations

import errno
import itertools
import logging
import os
import signal
import socket
import struct
import time
import traceback

import zmq

from disthook import wire
from disthook.service.endpoint import EndpointInUse, parse
from disthook.service.monitors import watch
from disthook.service.rpc import error_fields
from disthook.service.security import (
    HANDSHAKE_FAILURES,
    Authorized,
    Keys,
    refusal_reason,
    warn_if_exposed,
)
from disthook.service.unread import UnreadAnswers

__all__ = ["LOG_LEVELS", "PIPE_COPY_BELOW", "OneLineFormatter", "PeerLog", "Service",
           "bind_endpoint", "log_to_stderr", "printable", "recv_now", "send_frames"]

# a reply to a peer whose connection is not up yet (or again) is kept and sent again at every
# tick for this long: a client that just connected to the last stage of a model may get its
# answer from there before its own connection to that worker has finished its handshake
UNROUTABLE_KEEP_S = 30.0
UNROUTABLE_KEPT = 256  # replies kept that way at most, per peer
UNROUTABLE_KEPT_ALL = 4096  # and for all peers together
GONE_REMEMBERED = 1024  # peers whose connection closed that replies are not kept for
# so is a reply to a peer whose queue is full (it does not read its replies): a send never
# waits for a peer, which would stop the loop for everyone (ROUTER_MANDATORY makes a send to
# a full peer block); kept this long at most, then dropped with a warning


def bind_endpoint(sock: zmq.Socket, address: str) -> str:
    """Bind ``sock`` to ``address`` (``tcp://HOST:PORT``, ``HOST:PORT`` or ``ipc://PATH``;
    port 0 or ``*`` picks a free port); the endpoint bound. ``EndpointInUse`` when another
    process listens there."""
    endpoint = parse(address)
    try:
        if endpoint.scheme == "tcp" and endpoint.port == 0:
            return str(endpoint.with_port(sock.bind_to_random_port(f"tcp://{endpoint.host}")))
        sock.bind(str(endpoint))
    except zmq.ZMQError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise EndpointInUse(str(endpoint)) from None
        raise
    return str(endpoint)


_HEADER_CAP = wire.DEFAULT_LIMITS.max_header_bytes  # what a peer reads of an answer's header
_KEPT_CHARS = 4096  # of a long error's message and traceback


def _cut(msg_type: str, fields: dict, size: int, name: str) -> dict:
    """An answer whose header the peer would refuse (its decoder's cap): an error's message
    and traceback cut short, any other answer an error saying so. Sent whole, the peer
    dropped it unread and its request waited for its deadline (a ``get_state`` of 15000
    unknown names, answered with a ``KeyError`` listing them all)."""
    if msg_type == "error":
        return {**fields, **{k: f"{fields[k][:_KEPT_CHARS]} ... ({len(fields[k])} characters, "
                                f"cut)" for k in ("message", "traceback")
                             if len(fields.get(k) or "") > _KEPT_CHARS}}
    return error_fields(RuntimeError(
        f"the answer to this request has a header of {size} bytes, more than the "
        f"{_HEADER_CAP} a peer reads: ask for less in one request"), worker=name)


class Service:
    """A ROUTER request loop; subclasses add ``on_<type>`` handlers and ``tick``."""

    role = "service"
    tick_interval = 0.25

    def __init__(self, bind: str, *, name: str | None = None, parent_pid: int | None = None,
                 keys: Keys | None = None, router_options: dict | None = None,
                 watch_disconnects: bool = False):
        self.ctx = zmq.Context()
        self.name = name or f"{self.role}-{socket.gethostname()}-{os.getpid()}"
        # how its log lines name this process: "worker w2", "coordinator"
        self.label = (self.name if self.name.startswith(self.role)
                      else f"{self.role} {self.name}")
        self.log = logging.getLogger(f"disthook.{self.role}")
        self.keys = keys
        self.router = self.ctx.socket(zmq.ROUTER)
        self.router.setsockopt(zmq.LINGER, 0)
        self.router.setsockopt(zmq.ROUTER_MANDATORY, 1)  # an unroutable reply raises, not drops
        for option, value in (router_options or {}).items():  # before bind: for every peer
            self.router.setsockopt(option, value)
        self.poller = zmq.Poller()
        self._auth = None
        events = zmq.EVENT_DISCONNECTED if watch_disconnects else 0  # see on_disconnected
        # with keys: whose key is authorized, checked as each connection is made and again
        # for its messages (a key removed from authorized/ loses its open connections)
        self.authorized = Authorized(keys) if keys is not None else None
        if keys is not None:  # encrypted, and only authorized keys get in
            keys.serve(self.router)
            self._auth = keys.guard(self.ctx, self.log, self.label, self.authorized)
            # a peer without keys never reaches the key check: its handshake fails; log it
            # (refused keys are logged by the key check itself)
            events |= HANDSHAKE_FAILURES & ~zmq.EVENT_HANDSHAKE_FAILED_AUTH
        self._monitor = watch(self.router, events) if events else None
        if self._monitor is not None:
            self.poller.register(self._monitor, zmq.POLLIN)
        try:
            self.address = bind_endpoint(self.router, bind)
        except BaseException:  # a bad or busy address: leave no socket or thread behind
            self.close()
            raise
        warn_if_exposed(self.address, keys, self.log, self.label)
        self.parent_pid = parent_pid
        self.poller.register(self.router, zmq.POLLIN)
        self.peer_log = PeerLog(self.log, name=self.peer_name, account=self.log_account)
        # refused handshakes come from no identity: all of them share one allowance (a peer
        # that opens thousands of connections must not fill the log)
        self.refusal_log = PeerLog(self.log, name=lambda _: "refused connections")
        self._peer_numbers: dict[bytes, str] = {}  # see peer_name
        self._next_peer_number = itertools.count(1)
        self._running = False
        self._unsent: list[tuple] = []  # (since, socket, peer, frames) of unroutable replies
        self._gone: dict[bytes, None] = {}  # peers that left, until they send again (peer_left)
        # with a limit: the bytes of each peer's answers ZeroMQ holds, bounded (a worker's)
        self.unread: UnreadAnswers | None = None

    # ---- the loop ---------------------------------------------------------------------------
    def serve_forever(self) -> None:
        self._running = True
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self.stop("signal"))
        next_tick = 0.0
        try:
            while self._running:
                timeout = max(0.0, next_tick - time.monotonic())
                for sock, _ in self.poller.poll(int(timeout * 1000)):
                    self.on_socket(sock)
                if time.monotonic() >= next_tick:
                    if self.parent_pid is not None and os.getppid() != self.parent_pid:
                        self.stop(f"parent process {self.parent_pid} is gone")
                        break
                    self.tick()
                    next_tick = time.monotonic() + self.tick_interval
        finally:
            self.close()

    def stop(self, reason: str = "asked to") -> None:
        if self._running:
            self.log.info("%s stopping: %s", self.label, reason)
        self._running = False

    def close(self) -> None:
        if self._monitor is not None:
            self.router.disable_monitor()
            self._monitor.close(linger=0)
        if self._auth is not None:
            self._auth.stop()
        self.ctx.destroy(linger=200)  # let the last replies and shutdown notices go out

    def tick(self) -> None:
        """Called between messages, at least every ``tick_interval`` seconds: replies that
        found no route are tried again (subclasses call this too)."""
        if self._unsent:
            self.send_unsent()

    def send_unsent(self) -> None:
        """Try the replies kept for peers that had no route yet (or a full queue) once more,
        each peer's in order; those kept for ``UNROUTABLE_KEEP_S`` go, with a warning."""
        now = time.monotonic()
        pending, self._unsent = self._unsent, []
        for since, sock, to, frames in pending:
            if now - since > UNROUTABLE_KEEP_S:
                self.peer_log.warning(to, "%s: dropped a reply to %s: no connection from it, "
                                      "or it read none of its replies, for %g s", self.label,
                                      self.peer_name(to), UNROUTABLE_KEEP_S)
            elif not sock.closed:
                self._send(sock, to, frames, since)

    def peer_left(self, to: bytes) -> None:
        """``to``'s connection closed: the replies kept for it go, and so do those that find
        no route to it later (a request that outlived its client: one that left
        mid-forward), at debug level: nobody is there to read them. Until it sends again."""
        dropped = len(self._unsent)
        self._unsent = [u for u in self._unsent if u[2] != to]
        if dropped != len(self._unsent):
            self.log.debug("%s: dropped %d reply(ies) kept for %s: it went away", self.label,
                           dropped - len(self._unsent), self.peer_name(to))
        self._gone[to] = None
        while len(self._gone) > GONE_REMEMBERED:
            del self._gone[next(iter(self._gone))]

    # ---- requests ----------------------------------------------------------------------------
    def on_socket(self, sock: zmq.Socket) -> None:
        if sock is self._monitor:
            self.read_monitor()
            return
        if sock is self.router:
            frames = recv_now(self.router)
            if frames is None:  # a wait inside a handler took it since the poll
                return
            self.handle(frames[0].bytes, frames[1:], self.router)

    def read_monitor(self) -> None:
        """Every event of the endpoint's monitor: refused handshakes are logged, a closed
        connection goes to ``on_disconnected`` with its file descriptor."""
        while self._monitor.getsockopt(zmq.EVENTS) & _POLLIN:  # cheaper than zmq.Again
            event = monitor_event(self._monitor)
            if event["event"] == zmq.EVENT_DISCONNECTED:
                self.on_disconnected(int(event["value"]))
                continue
            why = refusal_reason(event)
            if why is not None:
                self.refusal_log.warning(b"", "%s: refused a connection: %s", self.label, why)

    def on_disconnected(self, fd: int) -> None:
        """A peer's connection (file descriptor ``fd``) closed; with ``watch_disconnects``."""

    def peer_name(self, identity: bytes) -> str:
        """A peer as the logs name it, never by its identity (bytes the peer chose, often
        binary): ``peer <n>`` in order of first sight; roles that know more say more."""
        name = self._peer_numbers.get(identity)
        if name is None:
            if len(self._peer_numbers) >= 4096:  # a bound: the oldest names go first
                del self._peer_numbers[next(iter(self._peer_numbers))]
            name = self._peer_numbers[identity] = f"peer {next(self._next_peer_number)}"
        return name

    def log_account(self, identity: bytes) -> bytes | str:
        """Whose allowance of warning lines a peer's take (``PeerLog``): its connection
        here; roles with keys say its key's, so that a key opening more connections gets
        no more lines."""
        return identity

    def handle(self, sender: bytes, frames: list, sock: zmq.Socket) -> None:
        """Decode one request from ``sender``, run its handler, send the reply."""
        try:
            msg = wire.decode(frames)
        except Exception as exc:
            if not isinstance(exc, wire.WireError):  # the codec's own slip: say which
                exc = wire.WireError(f"malformed message: {type(exc).__name__}: {exc}")
            self.peer_log.warning(sender, "%s: malformed message from %s: %s", self.label,
                                  self.peer_name(sender), exc)
            self.reply(sock, sender, exc.req, "error", error_fields(exc, worker=self.name))
            return
        handler = getattr(self, f"on_{msg.type}", None)
        if handler is None:
            exc = wire.WireError(f"a {self.role} does not take {msg.type!r} messages")
            self.reply(sock, sender, msg.req, "error", error_fields(exc, worker=self.name))
            return
        try:
            self.admit(sender, msg)
            result = handler(msg, sender)
        except Exception as exc:
            self.log.debug("%s: %s failed", self.label, msg.type, exc_info=True)
            self.reply(sock, sender, msg.req, "error", self.error_reply(exc), ctx=msg.ctx)
            return
        if result is not NO_REPLY:
            self.reply(sock, sender, msg.req, "ok", {"result": result}, ctx=msg.ctx)

    def admit(self, sender: bytes, msg) -> None:
        """Raise (``PermissionError``) where ``sender`` may send nothing more, whatever the
        message (roles with keys: a key revoked since its connection was made)."""

    def on_hello(self, msg, sender: bytes):
        """The greeting: say what this is (the protocol, its version, this role), in a
        ``hello`` that a client of any version reads."""
        self.reply(self.router, sender, msg.req, "hello", self.hello_fields())
        return NO_REPLY

    def hello_fields(self) -> dict:
        return {"name": wire.PROTOCOL_NAME, "protocol": wire.PROTOCOL_VERSION, "role": self.role}

    def error_reply(self, exc: BaseException) -> dict:
        """The fields of the ``error`` reply for ``exc``, raised by the handler running now."""
        return error_fields(exc, worker=self.name, traceback=traceback.format_exc())

    def reply(self, sock: zmq.Socket, to: bytes, req: int, msg_type: str, fields: dict,
              ctx: str | None = None) -> None:
        try:
            frames = wire.encode(msg_type, fields, req=req, ctx=ctx)
        except wire.WireError as exc:  # a handler returned something unsendable
            frames = wire.encode("error", error_fields(exc, worker=self.name), req=req, ctx=ctx)
        if len(frames[0]) > _HEADER_CAP:  # the peer would refuse it, and its request wait
            frames = wire.encode("error", _cut(msg_type, fields, len(frames[0]), self.name),
                                 req=req, ctx=ctx)
        self._send(sock, to, frames)

    def _send(self, sock: zmq.Socket, to: bytes, frames: list, since: float | None = None):
        kept = [u for u in self._unsent if u[2] == to] if self._unsent else ()
        tracked = self.unread is not None and sock is self.router
        if tracked and since is None:  # (a kept one was let through already)
            refused = self.unread.refusal(to, frames, self.label, [u[3] for u in kept])
            if refused is not None:  # answers it has not read hold too much: errors instead
                self.peer_log.warning(to, "%s: dropped an answer to %s: it has not read "
                                      "those it got", self.label, self.peer_name(to))
                for error in refused:
                    self._send(sock, to, error)
                return
        try:
            if kept:  # after what waits for it already: its replies keep their order
                raise zmq.Again(zmq.EAGAIN)
            # ROUTER_MANDATORY: no route raises here, and so does a full queue (NOBLOCK)
            _send(sock, to, _SNDMORE | _NOBLOCK, True)
            if tracked:
                self.unread.send(_send, sock, to, frames)
            else:
                send_frames(sock, frames)
        except zmq.ZMQError as exc:
            if exc.errno == zmq.EHOSTUNREACH and to in self._gone:
                self.log.debug("%s: dropped a reply to %s: it went away", self.label,
                               self.peer_name(to))
                return
            # no route to the peer: its connection has not finished its handshake yet (or
            # it went away); or its queue is full: kept and tried again at each tick
            if exc.errno in (zmq.EHOSTUNREACH, zmq.EAGAIN) and len(kept) < UNROUTABLE_KEPT \
                    and len(self._unsent) < UNROUTABLE_KEPT_ALL:
                if since is None and not kept:
                    self.log.info("%s: %s %s; its reply is kept and sent again", self.label,
                                  "no route to" if exc.errno == zmq.EHOSTUNREACH else
                                  "a full queue (it reads no replies) to", self.peer_name(to))
                self._unsent.append((time.monotonic() if since is None else since, sock,
                                     to, frames))
                return
            self.peer_log.warning(to, "%s: dropped a reply to %s: %s", self.label,
                                  self.peer_name(to), f"{len(kept)} replies wait for it "
                                  f"already ({len(self._unsent)} for all)" if kept else exc)


def monitor_event(monitor: zmq.Socket) -> dict:
    """The next event of a socket monitor as a dict of ``event``, ``value`` and ``endpoint``
    (pyzmq's ``recv_monitor_message`` gives the same, but its module imports asyncio: tens
    of ms of every coordinator's and worker's start). libzmq 4 sends two frames: the event
    number (16 bits) and its value (32 bits), then the endpoint."""
    head, endpoint = monitor.recv_multipart()
    event, value = struct.unpack("=Hi", head)
    return {"event": event, "value": value, "endpoint": endpoint}


def recv_now(sock: zmq.Socket):
    """The next message of ``sock`` (its frames) if one is there, else None; never blocks. A
    poll's event can be stale: a handler that waits inside (for a hook's answer, a
    neighbour's activation) polls and reads the same sockets, so the message may be gone
    already. Each frame says whether more follow (``Frame.more``): read that way, a message
    takes one call per frame where pyzmq's ``recv_multipart`` also asks the socket each time."""
    try:
        frame = _recv(sock, _NOBLOCK, False)
    except zmq.Again:
        return None
    frames = [frame]
    while frame.more:  # the rest of a message is there once its first frame is
        frame = _recv(sock, 0, False)
        frames.append(frame)
    return frames


# A pipe record's array (a stage's activation or gradient) under this many bytes is copied
# into ZeroMQ's message as it is sent: a buffer sent in place costs pyzmq a tracked frame and
# a wake-up of its thread that lets go of the buffer once ZeroMQ is done with it, about 45 µs
# of the sender's CPU a message with cold caches here (a 128 KiB activation), more than the
# copy; a larger array is sent from its own buffer (no second copy of it held while it goes)
PIPE_COPY_BELOW = 256 << 10


def send_frames(sock: zmq.Socket, frames: list, copy_below: int | None = None) -> None:
    """Send ``frames`` as one message, as ``send_multipart(frames, copy=False)`` would: a
    frame under ``copy_below`` bytes (default ``COPY_THRESHOLD``) is copied (cheaper than
    tracking a buffer's release), a larger one sent from its own buffer. Each frame goes
    straight to pyzmq's send (the multipart helper type-checks every frame first and calls
    its own ``send`` per frame: a small message's send took 14 µs that way here, 2.4 µs
    this way)."""
    if not isinstance(sock, zmq.Socket):  # a worker's local link to a neighbour stage
        sock.send_multipart(frames)  # (workers/links.py: it takes bytes-like frames)
        return
    below = _COPY_THRESHOLD if copy_below is None else copy_below
    last = len(frames) - 1
    for i, frame in enumerate(frames):
        try:
            _send(sock, frame, _SNDMORE if i < last else 0, len(frame) < below)
        except zmq.Again:  # a socket that never waits (SNDTIMEO 0: a worker's DEALERs)
            raise _stuck(sock) from None


_stuck_log: PeerLog | None = None


def _stuck(sock: zmq.Socket) -> ConnectionError:
    """The error of a send to a peer whose queue is full (nothing listens at its address,
    or it reads nothing), logged a few lines a minute per address: a worker never waits for
    a peer, which would stop its loop for every client."""
    global _stuck_log
    where = sock.getsockopt(zmq.LAST_ENDPOINT).decode(errors="replace") or "a peer"
    if _stuck_log is None:
        _stuck_log = PeerLog(logging.getLogger("disthook.worker"),
                             name=lambda peer: peer.decode(errors="replace"))
    _stuck_log.warning(where.encode(), "%s takes nothing more: %d messages wait for it "
                       "(nothing listens there, or it reads nothing); what was to go there "
                       "failed", where, sock.getsockopt(zmq.SNDHWM))
    return ConnectionError(f"{where} takes nothing more: {sock.getsockopt(zmq.SNDHWM)} "
                           "messages wait for it already (nothing listens there, or it reads "
                           "nothing): this call cannot go on to it; a model's stages must be "
                           "on workers that run")


class PeerLog:
    """Warnings about what peers sent, at most ``burst`` lines per peer every ``window_s``
    seconds; past that, one line says how many more were left out (a peer sending thousands
    of malformed messages must not fill the log)."""

    def __init__(self, log: logging.Logger, burst: int = 10, window_s: float = 60.0,
                 clock=time.monotonic, peers_kept: int = 4096, name=None, account=None):
        self.log, self.burst, self.window_s, self.clock = log, burst, window_s, clock
        # how a line names a peer (a service's peer_name: its identity is bytes it chose)
        self.name = name or (lambda peer: f"peer {peer!r}")
        # whose allowance a peer's lines take (default its own): with keys, its key's, which
        # outlasts the connection (an authorized client opening a fresh connection for each
        # refused message wrote 10 lines a connection)
        self.account = account or (lambda peer: peer)
        self.peers_kept = peers_kept
        # allowance -> [window start, lines, left out, how the first line left out named
        # its peer]
        self._seen: dict = {}

    def warning(self, peer: bytes, fmt: str, *args) -> bool:
        """Log the warning unless ``peer`` had its share; whether it was logged."""
        now = self.clock()
        account = self.account(peer)
        seen = self._seen.get(account)
        if seen is None or now - seen[0] >= self.window_s:
            if seen is not None and seen[2]:
                self.log.warning("(%d more such warnings about %s left out)", seen[2],
                                 seen[3])
            seen = self._seen[account] = [now, 0, 0, None]
            while len(self._seen) > self.peers_kept:
                del self._seen[next(iter(self._seen))]
        if seen[1] >= self.burst:
            if not seen[2]:
                seen[3] = self.name(peer)
            seen[2] += 1
            return False
        seen[1] += 1
        if seen[1] == self.burst:
            fmt += " (further warnings about this peer are left out for %gs)"
            args = (*args, self.window_s)
        self.log.warning(fmt, *args)
        return True

    def forget(self, peer: bytes) -> None:
        """``peer``'s connection went: its allowance goes with it, unless it is its key's."""
        if self.account(peer) != peer:
            return
        seen = self._seen.pop(peer, None)
        if seen is not None and seen[2]:
            self.log.warning("(%d more such warnings about %s left out)", seen[2], seen[3])


NO_REPLY = object()  # a handler's return value meaning "the reply is sent later, or never"


def ping_options(beat_s: float, ttl: bool = False) -> dict:
    """ZeroMQ's heartbeats (ZMTP pings) on a socket's connections, for processes that beat
    every ``beat_s`` seconds: a ping every ``PING_EVERY_BEATS`` beats, and a connection
    whose peer then sends nothing until ``LOST_AFTER_BEATS + 1`` beats after its last word
    is dropped (4 beats, 2 s by default: the bound of a ping every beat with 3 beats to
    answer it, as before; a ping's answer now has 2 beats to come, where it had 3). Each
    ping wakes the ZeroMQ threads at both ends: there are half as many. ``ttl``: the pings
    also tell the peer to drop the connection when nothing comes for as long after one."""
    ivl = max(1, int(wire.PING_EVERY_BEATS * beat_s * 1000))
    bound = max(ivl + 1, int((wire.LOST_AFTER_BEATS + 1) * beat_s * 1000))
    options = {zmq.HEARTBEAT_IVL: ivl, zmq.HEARTBEAT_TIMEOUT: bound - ivl}
    if ttl:
        options[zmq.HEARTBEAT_TTL] = bound
    return options
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")  # what --log-level takes, everywhere
# control characters as a log line shows them: escaped, as repr() writes them
_ESCAPES = {c: ascii(chr(c))[1:-1] for c in (*range(0x20), *range(0x7f, 0xa0)) if c != 0x09}


def printable(text: str) -> str:
    """``text`` with its control characters escaped (a tab kept), as one line. Peers choose
    much of what logs and status show (model ids, published names, module paths, what a
    refused message held): a newline in them wrote a log line of the peer's own
    (``12:00:00 worker w1: ...``), and a terminal's escape sequence rewrote the screen of
    whoever read the log or ran ``disthook status``."""
    return text.translate(_ESCAPES)


class OneLineFormatter(logging.Formatter):
    """Each record's message on one line of printable text (``printable``)."""

    def formatMessage(self, record: logging.LogRecord) -> str:  # (a traceback follows as is)
        return printable(super().formatMessage(record))


def log_to_stderr(level: str) -> None:
    """A coordinator's or worker's logging: ``level`` and above to stderr, one line each."""
    handler = logging.StreamHandler()
    handler.setFormatter(OneLineFormatter("%(asctime)s %(message)s", datefmt="%H:%M:%S"))
    logging.basicConfig(level=level, handlers=[handler])
_POLLIN = int(zmq.POLLIN)
_NOBLOCK, _SNDMORE = int(zmq.NOBLOCK), int(zmq.SNDMORE)
_COPY_THRESHOLD = zmq.COPY_THRESHOLD
# pyzmq's own send and receive (``zmq.Socket`` adds to send only options that disthook
# never uses: draft sockets' routing ids and groups)
_send = zmq.backend.Socket.send if zmq.backend.Socket in zmq.Socket.__mro__ else zmq.Socket.send
_recv = zmq.Socket.recv


# glibc's malloc returns freed memory at the top of its heap to the system, and serves large
# arrays from fresh mappings; a worker that frees and re-allocates the same few MiB of
# gradients every step (optimizer.zero_grad() sets them to None) then takes a page fault per
# 4 KiB page on every step: measured, about 1,800 faults and +5 ms per backward of a
# 784x1024 layer. Workers (and the one-process baseline of ``disthook bench pipeline``)
# keep up to this much freed memory mapped instead.
MALLOC_KEEP_BYTES = 256 << 20


def tune_malloc() -> bool:
    """Keep freed memory (up to ``MALLOC_KEEP_BYTES``) mapped; True if glibc took it."""
    import ctypes
    import ctypes.util
    import sys

    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3
    ok = mallopt(m_trim_threshold, MALLOC_KEEP_BYTES)
    ok &= mallopt(m_mmap_threshold, 32 << 20)  # glibc's largest allowed threshold
    return bool(ok)
