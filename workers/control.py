"""A worker's connection to its coordinator, capped as the coordinator's own socket is.

Nothing the coordinator sends a worker carries an array (an answer to a registration or a
beat, ``shutdown``), so the connection takes no frame over a header's cap
(``ZMQ_MAXMSGSIZE``): whatever listens at the coordinator's address (without keys, any
process bound there; with keys, a holder of the servers' key) can no longer make the worker
hold a frame of any size. ZeroMQ closes a connection that brought a frame over the cap and
never dials it again, where a connection lost otherwise is dialed again at once; so a close
with no redial within ``frame_cap.RETRY_WITHIN_S`` is taken for the cap, logged, and the
worker makes a new connection and registers again (see docs/security.md)."""
from __future__ import annotations

import time

import zmq

from disthook import wire
from disthook.service import frame_cap
from disthook.service.loop import monitor_event
from disthook.service.monitors import watch
from workers.peers import neighbour_identity

# what a socket a worker dials takes: the coordinator's messages to it are headers, and a
# neighbour stage or a peer worker sends nothing on it (their answers are a fault, logged)
DIALED_CAP = wire.DEFAULT_LIMITS.frame_cap(arrays=False)
# addresses of the cluster's workers kept (each registration's list is added to those told
# before, so that a coordinator that restarts, whose workers register again one by one,
# takes none away meanwhile); past this the oldest go
MAX_KNOWN_WORKERS = 4096


class ControlLine:
    """The control connection's socket and its monitor (a mixin of ``Worker``)."""

    def _dial_control(self) -> None:
        self.control = self._dial(self.coordinator_address,
                                  neighbour_identity(self.id, "coordinator"), linger=0)
        self.poller.register(self.control, zmq.POLLIN)
        self._control_monitor = watch(self.control, frame_cap.EVENTS)
        self.poller.register(self._control_monitor, zmq.POLLIN)
        self._control_closed: float | None = None  # when it closed, not dialed again since

    def note_workers(self, addresses) -> None:
        """The coordinator says these are its workers' addresses (see ``is_worker``)."""
        known = self.__dict__.setdefault("_cluster_workers", {})
        for address in addresses:
            known.pop(address, None)
            known[address] = None  # (the latest last)
        while len(known) > MAX_KNOWN_WORKERS:
            known.pop(next(iter(known)))

    def check_worker(self, address: str, what: str = "send_value") -> None:
        """Refuse (``PermissionError``) an address a client names for this worker to dial
        (``send_value``'s, a ``load_stage``'s neighbours and their local links) that no
        worker of this cluster registered: the client would have this worker dial any host
        and port, or any Unix socket of its host. A registration the coordinator told of
        while this request waited is read first."""
        known = self.__dict__.setdefault("_cluster_workers", {})
        while address not in known and self.control.poll(0):
            self._on_control()
        if address not in known:
            raise PermissionError(
                f"{what} goes only to the workers of this cluster (those registered at "
                f"its coordinator, {len(known)} known to worker {self.id}), and {address!r} "
                "is none of them: name a worker's address as status() lists it")

    def _on_control_monitor(self) -> None:
        while self._control_monitor.poll(0):
            event = monitor_event(self._control_monitor)["event"]
            if event == zmq.EVENT_DISCONNECTED:
                self._control_closed = time.monotonic()
            else:  # dialed again (or a handshake that failed: not the cap)
                self._control_closed = None

    def _redial_control(self, now: float) -> None:
        """Dial the coordinator again if ZeroMQ closed the connection for good (a frame
        over the cap) more than ``RETRY_WITHIN_S`` ago; called from the worker's tick."""
        closed = self._control_closed
        if closed is None or now - closed <= frame_cap.RETRY_WITHIN_S:
            return
        self.log.warning(
            "worker %s: what answers at the coordinator's address %s sent a frame over this "
            "worker's cap of %g MiB (a coordinator's messages are headers of at most 1 MiB); "
            "ZeroMQ closed the connection unread. Dialing again and registering anew: if this "
            "repeats, what listens there is not a disthook coordinator of this version",
            self.id, self.coordinator_address, DIALED_CAP / (1 << 20))
        for sock in (self._control_monitor, self.control):
            self.poller.unregister(sock)
        self.control.disable_monitor()
        self._control_monitor.close(linger=0)
        self.control.close(linger=0)
        self._dial_control()
        self._links_wait = None  # (its poll holds the old socket's descriptor: made anew)
        self.registered, self.asked_at = False, None
        self._register()
