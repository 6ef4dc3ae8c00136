"""The worker's side of local links (``workers.links``): its listener, the links its stages
dial and those it accepted, and what comes on them (``LinkHandlers``, a mixin of ``Worker``).

A message on an accepted link takes the path a neighbour's ZeroMQ message takes after the
transport (``messages_in``, then ``WorkerState.handle``), from the identity the link's hello
named, as a worker of the cluster; there is no monitor to read nor connection to look up.
"""
from __future__ import annotations

import math
import select
import time

import zmq

from disthook import wire
from workers.links import (
    MAX_LINKS_IN,
    Link,
    LinkClosed,
    LinkEnd,
    LinkListener,
    host_token,
    links_enabled,
    read_hello,
)
from workers.state import MessageIn

__all__ = ["LinkHandlers"]

_POLLIN, _POLLOUT = int(zmq.POLLIN), int(zmq.POLLOUT)
_READ = _POLLIN | int(zmq.POLLERR)
_PIPE_MAGIC_LEN = len(wire.PIPE_MAGIC)


class LinkHandlers:
    """Mixin of the worker (a ``Service`` with ``poller``, ``peers``, ``state``, ``log``)."""

    def _links_init(self) -> None:
        self.host_token = host_token()
        self.listener: LinkListener | None = None
        self.links_in: dict[bytes, Link] = {}  # identity (its hello's) -> accepted link
        self._links_waiting: set[Link] = set()  # accepted, their hello not come yet
        self._polled: dict[int, LinkEnd] = {}  # file descriptor -> what the poller holds
        self._outboxes: set[int] = set()  # links whose outbox waits for the poller
        # the accepted links alone, for links_first: one call says which have bytes
        self._links_ready = select.poll()
        # the same links and the endpoint's and the coordinator's ZeroMQ descriptors, for
        # wait_on_links (made at its first call, the links added as they come)
        self._links_wait: select.poll | None = None
        self._zmq_fds: tuple = ()
        self.link_waits = 0  # pipeline waits that ended on the links alone (status)
        self.wait_ticks = 0  # ticks run inside such waits (status)
        if not links_enabled():
            return
        try:
            self.listener = LinkListener(f"worker {self.id}")
        except OSError as exc:  # (a path too long for a socket, a full disk)
            self.log.info("worker %s: no local links (%s): neighbours dial ZeroMQ", self.id,
                          exc)
            return
        self._polled[self.listener.fileno()] = self.listener
        self.poller.register(self.listener.fileno(), _POLLIN)

    def link_fields(self) -> dict:
        """What the worker registers of its link: the socket's path and the host token."""
        if self.listener is None:
            return {}
        return {"link": self.listener.path, "link_host": self.host_token}

    def dial_neighbour(self, msg, side: str, identity: bytes):
        """A link to the neighbour stage on ``side`` of a ``load_stage`` where it is on this
        host and takes links, else a DEALER to its ZeroMQ address; either is polled."""
        path, token = msg.get(f"{side}_link"), msg.get(f"{side}_link_host")
        if path and token == self.host_token and links_enabled():
            try:
                link = Link.dial(path, identity)
            except OSError as exc:
                self.log.info("worker %s: no local link to the %s stage at %s (%s): ZeroMQ",
                              self.id, side, path, exc)
            else:
                self._watch(link)
                return link
        sock = self._dial(msg[side], identity, linger=1000)
        self.poller.register(sock, _POLLIN)
        return sock

    def _watch(self, link: Link) -> None:
        """Poll ``link`` (by its descriptor): for reads, and for writes while its outbox
        holds anything."""
        poller, fd, outboxes = self.poller, link.fileno(), self._outboxes

        def on_outbox(waiting: bool) -> None:
            poller.register(fd, _POLLIN | _POLLOUT if waiting else _POLLIN)
            (outboxes.add if waiting else outboxes.discard)(fd)

        link.on_outbox = on_outbox
        self._polled[fd] = link
        poller.register(fd, _POLLIN)

    def drop_neighbour(self, sock) -> None:
        """A stage's neighbour (a link or a DEALER) is closed: no longer polled."""
        if isinstance(sock, Link):
            self._unwatch(sock)
        elif not sock.closed:
            self.poller.unregister(sock)
        sock.close(linger=0)

    def _unwatch(self, link: LinkEnd) -> None:
        fd = link.fileno()
        self._outboxes.discard(fd)
        if self._polled.get(fd) is link:
            del self._polled[fd]
            self.poller.unregister(fd)

    def on_link(self, fd: int, events: int) -> None:
        """The poller says the listener or a link (its descriptor ``fd``) is ready."""
        end = self._polled.get(fd)
        if end is None or end.closed:  # closed by a job of this round
            return
        if end is self.listener:
            self._accept_links()
            return
        try:
            if events & _POLLOUT:
                end.flush()
            if events & _READ:
                self._read_link(end)
        except LinkClosed as exc:
            self._link_gone(end, str(exc), exc.ended)

    def links_first(self) -> bool:
        """Take what has come on the accepted links without a round of the loop (a waiting
        stage's record is often there already; the kernel is asked once which links hold
        bytes, and only those are read): whether anything came. Nothing while the loop's
        tick is due or an outbox waits for the poller, so that the whole loop (the
        endpoint, the coordinator, the flushes) still comes round at least once a tick."""
        if not self.links_in or self._outboxes or time.monotonic() >= self._next_tick:
            return False
        came = False
        for fd, _ in self._links_ready.poll(0):  # (no read of a link with nothing)
            link = self._polled.get(fd)
            if link is None or link.closed:
                continue
            try:
                came = self._read_link(link) or came
            except LinkClosed as exc:
                self._link_gone(link, str(exc), exc.ended)
                came = True
        return came

    def wait_on_links(self, keys: tuple) -> bool:
        """Wait for one of the mailbox ``keys`` (a training step's next record) on the
        accepted links alone, past the loop's round: one blocking ``poll`` of a set made once
        (the links, and the endpoint's and the coordinator's ZeroMQ descriptors, so that a
        request or a word from the coordinator ends the wait at once), what comes on the
        links read as ``links_first`` reads it, no wait opened, no thread handed over.
        Whether one of ``keys`` came; False (nothing taken from ZeroMQ) as soon as anything
        else needs the loop: a job to start or go on, an outbox to flush, a ZeroMQ socket
        with something to read, a second tick (the first runs here), a link that closed, the
        worker stopping: the caller then waits through the loop as before (``sleep_on``)."""
        if (not self.links_in or self._outboxes or self._todo or self.runners.ready
                or not self._running):
            return False
        poll = self._links_wait
        if poll is None:
            poll = self._links_wait = select.poll()
            self._zmq_fds = (self.router.getsockopt(zmq.FD), self.control.getsockopt(zmq.FD))
            for fd in (*self._zmq_fds, *(link.fileno() for link in self.links_in.values())):
                poll.register(fd, select.POLLIN)
        # a ZeroMQ socket's descriptor says only that its state changed since it was last
        # asked (edge-triggered): what came before now is seen by asking it
        router, control, mailbox = self.router, self.control, self.state.mailbox
        if self._held:  # replies kept for a batch go before the thread waits (sleep_on's)
            self.flush_replies()
        holding, self.holding = self.holding, False  # (as in sleep_on)
        try:
            return self._links_alone(keys, poll, router, control, mailbox)
        finally:
            self.holding = holding

    def _links_alone(self, keys, poll, router, control, mailbox) -> bool:
        """``wait_on_links``'s loop. The first tick that falls due meanwhile runs here (the
        beat, other jobs' deadlines: ``tick_now``) and the wait goes on; the next one ends it,
        so that a wait longer than a tick interval goes the general way, under its deadline
        (``WorkerState.wait_for_pipe``), as before."""
        zmq_fds, polled = self._zmq_fds, self._polled
        ticked = False
        while True:
            if (router.getsockopt(zmq.EVENTS) & _POLLIN
                    or control.getsockopt(zmq.EVENTS) & _POLLIN):
                return False
            timeout = self._next_tick - time.monotonic()
            if timeout <= 0:
                if ticked:
                    return False
                ticked = True
                self.tick_now()
                self.wait_ticks += 1
                if self._todo or self.runners.ready or self._outboxes or not self._running:
                    return False  # (what the tick ended or sent needs the loop)
                continue  # (the tick may have read ZeroMQ: asked again at the top)
            for fd, _ in poll.poll(math.ceil(timeout * 1000)):
                if fd in zmq_fds:
                    continue  # (asked again at the top)
                link = polled.get(fd)
                if link is None or link.closed:
                    return False
                try:
                    self._read_link(link)
                except LinkClosed as exc:
                    self._link_gone(link, str(exc), exc.ended)
                    return False
            for key in keys:
                if key in mailbox:
                    self.link_waits += 1
                    return True
            if self._todo or self.runners.ready or self._outboxes or not self._running:
                return False

    def _accept_links(self) -> None:
        while True:
            link = self.listener.accept()
            if link is None:
                return
            if len(self.links_in) + len(self._links_waiting) >= MAX_LINKS_IN:
                self.log.warning("worker %s: refused a local link: %d held already",
                                 self.id, MAX_LINKS_IN)
                link.close()
                continue
            self._links_waiting.add(link)
            self._watch(link)

    def _read_link(self, link: Link) -> bool:
        """Take what came on ``link``: whether anything did."""
        messages = link.read()
        if not link.accepted:  # neighbours send nothing on the links their stages dial
            for frames in messages:  # but the answer to a message they refused
                self._neighbour_answered(frames)
            return bool(messages)
        identity = link.identity
        for frames in messages:
            if identity is None:  # its first message is the hello
                identity = read_hello(frames)
                if identity in self.links_in:
                    raise LinkClosed("its hello names the identity of another link")
                link.identity = identity
                self._links_waiting.discard(link)
                self.links_in[identity] = link
                self._links_ready.register(link.fileno(), select.POLLIN)
                if self._links_wait is not None:
                    self._links_wait.register(link.fileno(), select.POLLIN)
                self.peers.linked(identity)
                continue
            if frames[0][:_PIPE_MAGIC_LEN] == wire.PIPE_MAGIC:  # a pipe record: to the mailbox
                self._pipe_in(identity, frames, link.limits)
                continue
            try:
                msgs = self.messages_in(identity, frames)
            except wire.WireError as exc:
                self.refuse(identity, exc)
                continue
            for msg in msgs:
                self._execute(self.state.handle(MessageIn(identity, msg, True)))
        return bool(messages)

    def _pipe_in(self, identity: bytes, frames: list, limits: wire.Limits) -> None:
        """A pipe record in its short form on a link (frame 0 its bytes, whose size the link
        and whose magic ``_read_link`` checked): its fields, read by the short form's reader,
        go to the mailbox as they are, past the general decode and the state's dispatch
        (which, for a worker's pipe record, check nothing the link's hello did not)."""
        try:
            msg = wire.pipe_fields(frames[0], frames, limits)
        except wire.WireError as exc:
            self.refuse(identity, exc)
            return
        self._execute(self.state.pipe_arrived(msg))

    def _neighbour_answered(self, frames: list) -> None:
        """What came on a link to a neighbour stage: an error is its answer to a message of
        this worker's it refused (a forward whose client left meanwhile, its graph gone with
        it): expected, said at debug level; anything else is a warning."""
        try:
            head, parts = wire.split_batch(frames)
            msgs = [wire.decode(frames, _head=head)] if parts is None else [
                wire.decode(part) for part in parts]
        except wire.WireError:
            msgs = []
        if msgs and all(msg.type == "error" for msg in msgs):
            for msg in msgs:
                self.log.debug("worker %s: a neighbour stage refused a message of this "
                               "worker's: %s: %s", self.id, msg.get("kind"), msg.get("message"))
            return
        self.log.warning("worker %s: unexpected message on a local link to a neighbour (%d "
                         "frames)", self.id, len(frames))

    def _link_gone(self, link: Link, why: str, ended: bool = False) -> None:
        """``link`` closed (or is closed now, for what came on it): forgotten; the peer of
        an accepted link is gone as a ZeroMQ peer whose connection closed."""
        self._unwatch(link)
        link.close()
        self._links_waiting.discard(link)
        identity = link.identity
        if not link.accepted:  # (its neighbour stopped or died: the client hears of a death
            # from the coordinator, and a cluster that closes closes every link)
            self.log.info("worker %s: the local link to a neighbour stage closed: %s",
                          self.id, why)
        elif identity is None:  # a connection that ends before a word is nothing to warn
            # of (a same-user program that looked); one that sends what is off is
            (self.log.info if ended else self.log.warning)(
                "worker %s: closed a local link before its hello: %s", self.id, why)
        elif self.links_in.get(identity) is link:
            del self.links_in[identity]
            self._links_ready.unregister(link.fileno())
            if self._links_wait is not None:
                self._links_wait.unregister(link.fileno())
            self.log.info("worker %s: the local link from %s closed: %s", self.id,
                          self.who(identity), why)
            self.peer_gone(identity)

    def _send(self, sock, to: bytes, frames: list, since: float | None = None):
        """A reply to a peer on a link goes on that link (the ROUTER has no route to it)."""
        link = self.links_in.get(to) if sock is self.router else None
        if link is None:
            return super()._send(sock, to, frames, since)
        link.send_multipart(frames)

    def link_status(self) -> dict:
        """Status: where this worker listens, the links it accepted, how each stage reaches
        its neighbours (``local``: a link, ``zeromq``: a DEALER), the records that went
        through the links' arenas."""
        dialed = [n for st in self.stages.values() for n in st.neighbours.values()
                  if isinstance(n, Link)]
        return {"listening": None if self.listener is None else self.listener.path,
                "in": sorted(self.who(i) for i in self.links_in),
                "stages": {st.name: {side: "local" if isinstance(n, Link) else "zeromq"
                                     for side, n in st.neighbours.items()}
                           for st in self.stages.values()},
                # records whose arrays went through the links' arenas (workers/arena.py):
                # placed by this worker's stages, taken from its neighbours'
                "waits": self.link_waits,  # a step's waits that ended on the links alone
                "wait_ticks": self.wait_ticks,  # the loop's ticks run inside those waits
                "arena_records": {
                    "placed": sum(n.arena.records for n in dialed if n.arena is not None),
                    "taken": sum(n.arena.records for n in self.links_in.values()
                                 if n.arena is not None)}}

    def close(self) -> None:
        """The links and the listener go (its socket file and directory removed)."""
        # (also called by Service.__init__ when its bind fails, before _links_init)
        for link in [*getattr(self, "links_in", {}).values(),
                     *getattr(self, "_links_waiting", ())]:
            link.close()
        for st in getattr(self, "stages", {}).values():
            for n in st.neighbours.values():
                if isinstance(n, Link):
                    n.close()
        if getattr(self, "listener", None) is not None:
            self.listener.close()
        super().close()
