"""Neighbour stages on one host talk over a Unix stream socket (a *link*), not ZeroMQ.

Each worker listens on a socket in a directory private to its user (``LinkListener``) and
registers its path with the coordinator beside a host token (``host_token``); a stage whose
neighbour registered the same token dials that path (``Link.dial``), and sends it what it
would send on a DEALER: pipe records, forwards and backwards carried on, pins. Where the
link cannot be made (another host, no such file, ``DISTHOOK_LOCAL_LINKS=0`` on either
worker) the stage dials the neighbour's ZeroMQ address as before.

Who may connect: the acceptor takes only connections whose peer credentials (SO_PEERCRED)
carry its own uid, and then only a dialer whose first message is a hello naming the link
protocol, its version and a neighbour identity (``workers.peers.neighbour_identity``). What
comes on such a link is from a worker of the cluster, as what comes on a neighbour's DEALER.

On the wire a message is: 8 bytes (``<II``: its frame count, its first frame's length), the
other frames' lengths (``<Q`` each), then every frame's bytes. Sends never block (what the
kernel does not take waits in the link's outbox until the socket is writable); a message of
two frames (a pipe record) goes behind one packed prefix. Reads never block: the kernel's
bytes come a page at a time into the link's buffer, so that a message's prefix, table and
header come in one read, and each array frame goes into a fresh buffer (``np.empty``) that
the decoded array is a view of: what the page held of it copied, the rest read straight in,
with what follows it into the page in the same call (nothing followed: the read ends).

A dialer makes the link's arena (``workers.arena``) and sends it with its hello (the
acceptor reads with room for a descriptor until the hello came). A pipe record whose array
is ``ARENA_MIN_RECORD`` or more goes as a header alone while the arena has room: its
prefix's frame count has ``IN_ARENA`` set, and the array's size and its block's place
follow (``<IIQQ``); the acceptor's frame is a view of that block.
"""
from __future__ import annotations

import collections
import logging
import os
import socket
import struct
import tempfile

import numpy as np

from disthook import wire
from workers.arena import ARENA_MIN_RECORD, Arena, ArenaError, arena_bytes
from workers.link_dirs import PREFIX_DIR, link_base, remove_stale
from workers.peers import NEIGHBOUR_IDENTITY

__all__ = ["Link", "LinkClosed", "LinkEnd", "LinkListener", "host_token", "links_enabled"]

LINK_PROTOCOL = b"disthook-link"
LINK_VERSION = 2  # 2: a hello may carry the link's arena, records may lie in it
BUFFER_BYTES = 4 << 20  # SO_SNDBUF / SO_RCVBUF asked for (the kernel may give less)
MESSAGES_PER_READ = 32  # messages taken off one link per poll, at most
MAX_LINKS_IN = 256  # links accepted at once, at most (a link is one neighbour stage)
CONNECT_TIMEOUT_S = 2.0
COPY_BELOW = 256 << 10  # a frame the kernel did not take whole is copied to the outbox under
# this size (the caller may reuse its buffer); a larger one waits there as it is, as a
# ZeroMQ frame sent in place does
_PREFIX = struct.Struct("<II")
_SIZE = struct.Struct("<Q")
_PREFIX_PAIR = struct.Struct("<IIQ")  # the prefix of a message of two frames, and its table
# a pipe record whose array lies in the link's arena (workers.arena): the prefix (its frame
# count with IN_ARENA set), the array's size and its place in the arena, then the header
IN_ARENA = 1 << 31
_PREFIX_ARENA = struct.Struct("<IIQQ")
_ARENA_SIZE_AT = struct.Struct("<QQ")  # (its size and place, 8 bytes in)
_ANCILLARY = socket.CMSG_SPACE(struct.calcsize("i")) if hasattr(socket, "CMSG_SPACE") else 0
_IOV_AT_ONCE = 512  # buffers per sendmsg (the kernel's IOV_MAX is 1024)
_BUFFER = 4096  # bytes a read asks the kernel for when it does not yet know a message's sizes
_MORE = object()  # (a read needs more bytes from the kernel)
_log = logging.getLogger("disthook.worker")


def links_enabled() -> bool:
    """Whether this worker makes and takes local links (``DISTHOOK_LOCAL_LINKS=0``: no)."""
    return os.environ.get("DISTHOOK_LOCAL_LINKS", "1").strip().lower() not in (
        "0", "no", "off", "false")


def host_token() -> str:
    """What tells this host (and this boot of it) from any other: the host name and the
    kernel's boot id where there is one. Two workers with one token may link."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    return f"{socket.gethostname()}/{boot}"


def peer_uid(sock: socket.socket) -> int | None:
    """The uid of the process at the other end of ``sock`` (SO_PEERCRED); None where the
    system does not say."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        return None
    creds = sock.getsockopt(socket.SOL_SOCKET, option, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]


class LinkClosed(Exception):
    """The link is closed, or was closed because what came on it was off (``reason``).
    ``ended``: the other end closed it (nothing was off)."""

    def __init__(self, reason: str, ended: bool = False) -> None:
        super().__init__(reason)
        self.ended = ended


class LinkEnd:
    """Anything of this module the worker's poller holds (a link or the listener)."""

    closed = False
    sock: socket.socket

    def fileno(self) -> int:
        return self.sock.fileno()


class Link(LinkEnd):
    """One end of a link. The dialer sends; the acceptor takes. ``identity``: the dialer's
    (the hello's), None on an accepted link until its hello came."""

    def __init__(self, sock: socket.socket, identity: bytes | None = None,
                 limits: wire.Limits = wire.DEFAULT_LIMITS, accepted: bool = False) -> None:
        sock.setblocking(False)
        for option in (socket.SO_SNDBUF, socket.SO_RCVBUF):
            try:
                sock.setsockopt(socket.SOL_SOCKET, option, BUFFER_BYTES)
            except OSError:
                pass
        self.sock, self.identity, self.limits = sock, identity, limits
        self.accepted = accepted  # this end took the connection (it reads what comes)
        self._fd = sock.fileno()
        self.outbox: collections.deque = collections.deque()  # memoryviews not sent yet
        self.on_outbox = None  # called with True / False as the outbox fills / empties
        self.sent = self.received = 0  # messages
        self.dropped = 0  # messages sent after the link closed (the neighbour went away)
        # what came and was not taken yet: _buf[_lo:_hi] (the kernel's bytes are read into
        # it a page at a time, so a message's prefix, table and header come in one read)
        self._buf = bytearray(_BUFFER)
        self._view = memoryview(self._buf)
        self._lo = self._hi = 0
        # the message being read: its frames so far, the sizes of those after the header,
        # and the array frame read straight from the socket (its view, how much came)
        self._frames: list = []
        self._sizes: tuple = ()
        self._target: memoryview | None = None
        self._frame = None
        self._got = 0
        self._drained = False  # the last read took all the kernel held (see _recv)
        self.arena: Arena | None = None  # the dialer's, or the one its hello carried
        # the kept header of the last run of pipe records sent (a link carries one kind),
        # the prefix and header written for it, and where mb goes in them: see send_run
        self._run: tuple = (None, None, 0)

    def fileno(self) -> int:
        return self._fd

    @classmethod
    def dial(cls, path: str, identity: bytes) -> Link:
        """A link to the worker listening at ``path``, its hello sent (``OSError`` if it
        cannot be made)."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(CONNECT_TIMEOUT_S)
            sock.connect(path)
        except BaseException:
            sock.close()
            raise
        link = cls(sock, identity)
        size = arena_bytes()
        if not size:
            link.send_multipart([hello(identity)])
            return link
        try:  # the arena rides with the hello (the acceptor maps it as it reads the hello)
            link.arena = Arena.create(size)
            fds = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("i", link.arena.fd))]
            sock.sendmsg(_framed([hello(identity)]), fds)
        except BaseException:
            link.close()
            raise
        finally:
            if link.arena is not None:
                link.arena.release_fd()
        link.sent += 1
        return link

    # ---- sending ------------------------------------------------------------------------
    def send_multipart(self, frames, flags: int = 0, copy: bool = False) -> None:
        """Send ``frames`` (bytes-like) as one message; never blocks (``flags`` and ``copy``
        as pyzmq's, for its callers: a frame the kernel does not take at once is kept). On
        a closed link (the neighbour went away) the message is dropped and counted, as a
        DEALER keeps it for a peer that never comes back: what waits for the neighbour
        ends as it does then (the step's pipe timeout, the client's abort)."""
        if self.closed:
            self.dropped += 1
            return
        if len(frames) == 2 and type(frames[0]) is bytes:  # a header and an array (a pipe
            # record): the prefix and the array's size in one pack
            head, body = frames[0], frames[1]  # (encode_pipe's is a byte view already)
            if type(body) is not memoryview or body.format != "B" or not body.contiguous:
                body = memoryview(body).cast("B")
            start = (self.arena.place(body) if self.arena is not None and not self.accepted
                     and len(body) >= ARENA_MIN_RECORD else None)  # (the dialer's to write)
            if start is not None:  # the array went into the arena: the header alone here
                out = [_PREFIX_ARENA.pack(IN_ARENA | 2, len(head), len(body), start) + head]
            else:
                out = [_PREFIX_PAIR.pack(2, len(head), len(body)) + head, body]
                if not len(body):
                    del out[1]
        else:
            out = _framed(frames)
        self.sent += 1
        if self.outbox:
            self._keep(out, 0)
            return
        self._write(out)

    def send_run(self, kept: tuple, mb: int, body: memoryview) -> bool:
        """Send a pipe record whose header is ``kept``'s but for ``mb`` (``wire.pipe_run``)
        and whose array ``body`` goes into the arena: the prefix and the header, the same
        bytes ``send_multipart`` writes for it, from a buffer kept for ``kept`` with the
        array's place and ``mb`` written into it, in one send. False (nothing sent, nothing
        placed) where the record cannot go so: no arena at this end, the array too small for
        it or no room left, an outbox waiting, the link closed; the caller then sends it
        the general way."""
        arena = self.arena
        if (arena is None or self.accepted or self.closed or self.outbox
                or len(body) < ARENA_MIN_RECORD):
            return False
        start = arena.place(body)
        if start is None:
            return False
        was, buf, at = self._run
        if was is not kept:
            head = len(kept[5]) + wire.PIPE_MB.size + len(kept[6])
            buf = bytearray(_PREFIX_ARENA.pack(IN_ARENA | 2, head, len(body), 0))
            at = len(buf) + len(kept[5])
            buf += kept[5] + bytes(wire.PIPE_MB.size) + kept[6]
            self._run = (kept, buf, at)
        _ARENA_SIZE_AT.pack_into(buf, 8, len(body), start)
        wire.PIPE_MB.pack_into(buf, at, mb)
        self.sent += 1
        self._write([buf])  # (what the kernel does not take is copied to the outbox)
        return True

    def _write(self, out: list) -> None:
        """Hand ``out`` to the kernel as far as it takes it; the rest to the outbox."""
        while out:
            batch = out if len(out) <= _IOV_AT_ONCE else out[:_IOV_AT_ONCE]
            try:  # (one buffer, a record in the arena's header: send, a few µs less cold)
                n = (self.sock.send(batch[0], socket.MSG_DONTWAIT) if len(batch) == 1
                     else self.sock.sendmsg(batch, (), socket.MSG_DONTWAIT))
            except (BlockingIOError, InterruptedError):
                n = 0
            except OSError:  # the neighbour went away: the read side says so too
                self.outbox.clear()
                self.dropped += 1
                return
            if n < sum(map(len, batch)):  # (each a bytes or a byte view: len is its size)
                self._keep(out, n)
                return
            out = out[len(batch):]

    def _keep(self, out: list, skip: int) -> None:
        """Put ``out`` less its first ``skip`` bytes in the outbox."""
        was_empty = not self.outbox
        for v in out:
            if skip >= len(v):
                skip -= len(v)
                continue
            v = v[skip:]
            skip = 0
            self.outbox.append(memoryview(bytes(v)) if len(v) < COPY_BELOW else v)
        if was_empty and self.outbox and self.on_outbox is not None:
            self.on_outbox(True)

    def flush(self) -> None:
        """Send what waits in the outbox, as far as the kernel takes it (when writable)."""
        pending = list(self.outbox)
        self.outbox.clear()
        if not pending:
            return
        self._write(pending)
        if not self.outbox and self.on_outbox is not None:
            self.on_outbox(False)

    # ---- reading --------------------------------------------------------------------------
    def read(self, at_most: int = MESSAGES_PER_READ) -> list[list]:
        """The messages (each its frames) that came whole, up to ``at_most`` (more where
        the link's buffer holds them already: what it holds is never left for a poll that
        would not see it); never blocks. ``LinkClosed`` when the other end closed or sent
        what is off (the link is closed)."""
        messages: list[list] = []
        self._drained = False
        while True:
            if self._target is not None:  # an array frame: straight from the socket,
                # and what comes after it into the buffer in the same call
                if self._drained:  # (the kernel held no more a read ago: the poll tells)
                    return messages
                after = self._straight()
                if after is None:
                    return messages
                self._frames.append(self._frame)
                self._target = self._frame = None
                done = self._next_frame()
                if done is not None and not after:
                    # the kernel held nothing past this message when it was read: no
                    # read that would find nothing (what comes later, the poll sees)
                    self.received += 1
                    messages.append(done)
                    return messages
            else:  # the prefix, the table and the header, from the buffer
                done = self._take_head()
                if done is _MORE:  # (no read where the last one found the kernel's bytes
                    # all taken: it would find nothing, and what comes later the poll sees)
                    if self._drained or len(messages) >= at_most or not self._fill():
                        return messages
                    continue
            if done is not None:
                self.received += 1
                messages.append(done)

    def _recv(self, into: memoryview, then: memoryview | None = None) -> int:
        """What the kernel gives into ``into`` now, and past it into ``then`` in the same
        call where one is given (0: nothing yet); ``_drained``: it gave less than room for
        (a stream socket gives all it holds: the next read would find nothing)."""
        room = len(into) if then is None else len(into) + len(then)
        try:
            if self.accepted and self.identity is None and then is None:
                # (a read stops after the bytes that carry a descriptor: never drained)
                self._drained = False
                return self._recv_hello(into)
            n = (self.sock.recv_into(into, room) if then is None
                 else self.sock.recvmsg_into([into, then])[0])
        except (BlockingIOError, InterruptedError):
            self._drained = True
            return 0
        except OSError as exc:
            self.close()
            raise LinkClosed(f"it broke: {exc}") from None
        if n == 0:
            self.close()
            raise LinkClosed("the other end closed it", ended=True)
        self._drained = n < room
        return n

    def _recv_hello(self, into: memoryview) -> int:
        """``_recv`` until the hello came: the arena its dialer sent with it is mapped."""
        n, ancillary, flags, _ = self.sock.recvmsg_into([into], _ANCILLARY)
        fds = [fd for level, kind, data in ancillary
               if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS
               for fd in struct.unpack(f"{len(data) // 4}i", data[:len(data) // 4 * 4])]
        if fds:
            if self.arena is not None or len(fds) > 1 or flags & socket.MSG_CTRUNC:
                for fd in fds:
                    os.close(fd)
                self._refuse("more than one arena")
            try:
                self.arena = Arena.adopt(fds[0])
            except ArenaError as exc:
                self._refuse(str(exc))
        if n == 0:
            self.close()
            raise LinkClosed("the other end closed it", ended=True)
        return n

    def _straight(self) -> int | None:
        """Read the rest of the array frame begun into it, and what the kernel holds past
        it into the buffer (empty then: the frame took all it held), in one call: how many
        bytes came past the frame once it came whole (None: not whole yet)."""
        rest = self._target[self._got:]
        lo, hi = self._lo, self._hi
        if lo == hi:  # (always: the frame took what the buffer held)
            if len(self._buf) > _BUFFER:
                self._buf = bytearray(_BUFFER)
                self._view = memoryview(self._buf)
            self._lo = self._hi = lo = hi = 0
        n = self._recv(rest, self._view[hi:])
        if n < len(rest):
            self._got += n
            return None
        self._got = len(self._target)
        self._hi = hi + n - len(rest)
        return n - len(rest)

    def _fill(self) -> int:
        """Read what the kernel has into the buffer, after what it holds (moved to its
        start first): how many bytes came."""
        lo, hi = self._lo, self._hi
        if lo == hi and len(self._buf) > _BUFFER:  # (grown for a large header: back)
            self._buf = bytearray(_BUFFER)
            self._view = memoryview(self._buf)
        if lo:
            self._view[:hi - lo] = self._view[lo:hi]
            self._lo, self._hi = 0, hi - lo
        n = self._recv(self._view[self._hi:])
        self._hi += n
        return n

    def _take_head(self):
        """The next message's prefix, table and header out of the buffer, its frames
        begun (``_next_frame``); ``_MORE`` while the buffer does not hold them whole."""
        lo, have = self._lo, self._hi - self._lo
        if have < _PREFIX.size:
            return _MORE
        count, head = _PREFIX.unpack_from(self._buf, lo)
        limits = self.limits
        if count & IN_ARENA:
            return self._take_from_arena(count, head)
        if not 1 <= count <= limits.max_frames or head > limits.max_header_bytes:
            self._refuse(f"a message of {count} frames, a header of {head} bytes "
                         f"(at most {limits.max_frames} and {limits.max_header_bytes})")
        at = lo + _PREFIX.size + _SIZE.size * (count - 1)
        if have < at - lo + head:
            if at - lo + head > len(self._buf):  # a large header: a buffer to hold it
                grown = bytearray(at - lo + head)
                grown[:have] = self._view[lo:self._hi]
                self._buf, self._view, self._lo, self._hi = grown, memoryview(grown), 0, have
            return _MORE
        sizes = (() if count == 1 else _SIZE.unpack_from(self._buf, lo + _PREFIX.size)
                 if count == 2 else struct.unpack_from(f"<{count - 1}Q", self._buf,
                                                       lo + _PREFIX.size))
        if sizes and (max(sizes) > limits.max_array_bytes
                      or sum(sizes) + head > limits.max_total_bytes):
            self._refuse(f"frames of {list(sizes)[:8]} bytes (at most "
                         f"{limits.max_array_bytes} each, {limits.max_total_bytes} all)")
        self._frames, self._sizes = [bytes(self._view[at:at + head])], sizes
        self._lo = at + head
        return self._next_frame()

    def _take_from_arena(self, count: int, head: int):
        """A pipe record whose array lies in the arena: its header from the buffer, its
        array copied out of the arena (``_MORE`` while the buffer does not hold the header
        whole)."""
        lo, have, limits = self._lo, self._hi - self._lo, self.limits
        if count != IN_ARENA | 2 or self.arena is None or not self.accepted:
            self._refuse("a record in an arena that is not there"
                         if self.arena is None or not self.accepted
                         else f"a record in the arena of {count & ~IN_ARENA} frames, not 2")
        if head > limits.max_header_bytes:
            self._refuse(f"a header of {head} bytes (at most {limits.max_header_bytes})")
        if have < _PREFIX_ARENA.size + head:
            if _PREFIX_ARENA.size + head > len(self._buf):  # a large header: room for it
                grown = bytearray(_PREFIX_ARENA.size + head)
                grown[:have] = self._view[lo:self._hi]
                self._buf, self._view, self._lo, self._hi = grown, memoryview(grown), 0, have
            return _MORE
        _, _, size, start = _PREFIX_ARENA.unpack_from(self._buf, lo)
        if size > limits.max_array_bytes or size + head > limits.max_total_bytes:
            self._refuse(f"a frame of {size} bytes (at most {limits.max_array_bytes} each, "
                         f"{limits.max_total_bytes} all)")
        at = lo + _PREFIX_ARENA.size
        try:
            body = self.arena.take(start, size)
        except ArenaError as exc:
            self._refuse(str(exc))
        self._lo = at + head
        return [bytes(self._view[at:at + head]), body]

    def _next_frame(self):
        """The message when its frames all came; else the next frame begun, from what the
        buffer holds of it, the rest to be read straight into it (None)."""
        frames, sizes = self._frames, self._sizes
        while len(frames) <= len(sizes):
            size = sizes[len(frames) - 1]
            if not size:
                frames.append(b"")
                continue
            frame = np.empty(size, np.uint8)
            target = memoryview(frame)
            lo = self._lo
            got = min(size, self._hi - lo)
            if got:
                target[:got] = self._view[lo:lo + got]
                self._lo = lo + got
            if got < size:
                self._target, self._got, self._frame = target, got, frame
                return None
            frames.append(frame)
        self._frames = []
        return frames

    def _refuse(self, what: str):
        self.close()
        raise LinkClosed(f"it sent {what}")

    def close(self, linger: int = 0) -> None:
        """Close the link (``linger`` is pyzmq's, for its callers: what waits is dropped)."""
        if not self.closed:
            self.closed = True
            self.outbox.clear()
            self.sock.close()
            if self.arena is not None:
                self.arena.close()


def _framed(frames) -> list:
    """What goes on the link for ``frames``: the prefix, the table and the first frame in
    one buffer, then the other frames that are not empty (as views)."""
    views = [memoryview(f).cast("B") for f in frames]
    if not views:
        raise ValueError("a message has at least one frame")
    head = bytearray(_PREFIX.pack(len(views), len(views[0])))
    for v in views[1:]:
        head += _SIZE.pack(len(v))
    head += views[0]
    return [memoryview(head), *(v for v in views[1:] if len(v))]


def hello(identity: bytes) -> bytes:
    """The dialer's first message: the protocol, its version, the dialer's identity."""
    return LINK_PROTOCOL + bytes([LINK_VERSION]) + identity


def read_hello(frames: list) -> bytes:
    """The identity a hello names; ``LinkClosed`` if it is not a hello of this version."""
    if len(frames) != 1:
        raise LinkClosed(f"its first message has {len(frames)} frames, not a hello's 1")
    data = bytes(frames[0])
    if not data.startswith(LINK_PROTOCOL):
        raise LinkClosed("its first message is not a disthook-link hello")
    version = data[len(LINK_PROTOCOL):len(LINK_PROTOCOL) + 1]
    if version != bytes([LINK_VERSION]):
        raise LinkClosed(f"it speaks link version {version[0] if version else None}, this "
                         f"worker {LINK_VERSION}")
    identity = data[len(LINK_PROTOCOL) + 1:]
    if len(identity) > 255 or NEIGHBOUR_IDENTITY.fullmatch(identity) is None:
        raise LinkClosed("its hello names no neighbour identity (<worker>><side>><n>)")
    return identity


class LinkListener(LinkEnd):
    """The worker's own socket for links, in a fresh directory private to its user (mode
    0700, under ``$XDG_RUNTIME_DIR`` or the temp directory: ``link_base``); both go when
    it closes (those of workers that were killed go when a later worker starts:
    ``workers.link_dirs.remove_stale``)."""

    def __init__(self, name: str) -> None:
        base = link_base()
        remove_stale(base)
        # (the pid in the name tells a later worker whether this one still runs)
        self.directory = tempfile.mkdtemp(prefix=f"{PREFIX_DIR}{os.getpid()}-", dir=base)
        self.path = os.path.join(self.directory, "worker.sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.sock.bind(self.path)
            os.chmod(self.path, 0o600)
            self.sock.listen(64)
            self.sock.setblocking(False)
        except BaseException:
            self.close()
            raise
        self.name = name

    def accept(self) -> Link | None:
        """The next connection as a link awaiting its hello; None when none is waiting or
        it was refused (a peer of another uid: closed, with a warning)."""
        try:
            conn, _ = self.sock.accept()
        except (BlockingIOError, InterruptedError):
            return None
        try:
            uid = peer_uid(conn)
        except OSError as exc:
            uid, why = -1, exc
        else:
            why = None
        if uid is not None and uid != os.getuid():
            _log.warning("%s: refused a local link from uid %s (this worker runs as uid %d)%s",
                         self.name, uid, os.getuid(), f": {why}" if why else "")
            conn.close()
            return None
        return Link(conn, accepted=True)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.sock.close()
        for remove, what in ((os.unlink, self.path), (os.rmdir, self.directory)):
            try:
                remove(what)
            except OSError:
                pass
