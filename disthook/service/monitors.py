"""ZeroMQ socket monitors that can never stop a process's ZeroMQ I/O thread.

libzmq delivers a monitor's events by a blocking send, from the context's I/O thread, on the
PAIR socket the monitor binds. With the reader's usual high-water mark (1000 messages each
side) an event stream nobody reads fills the pipe in a few minutes: a client idle in a
notebook while a worker or the coordinator is gone gets an ``EVENT_CONNECT_RETRIED`` each
redial (ten a second), about 2000 events later the I/O thread blocks for good, and from then
on no socket of that context connects, sends or receives (measured with libzmq 4.3.5: a new
socket pair in the same context got nothing within 3 s; draining the monitor set it free).

``watch`` makes the reader's queue unbounded (``ZMQ_RCVHWM`` 0: libzmq then never blocks the
inproc pipe), so an unread monitor costs memory, never the I/O thread. For a socket whose
owner reads the monitor only while it uses the socket (a client's connections: a program may
sit idle for hours), ``idle_owner=True`` also lets ZeroMQ back off its redials of a peer that
is gone, from 0.1 s to one every ``IDLE_REDIAL_MAX_MS``: what waits unread then grows by about
one event (some 300 bytes) every 5 s, about 200 KiB an hour, and is read at the next use.
The first redial after a close still comes at once (``frame_cap.redialed`` relies on it).

The other way a monitor stops the I/O thread: its reader closed while the monitor still
sends (a PAIR with no peer blocks the send). An owner that closes its sockets disables the
monitor first; an owner dropped without closing them closed them in whatever order Python
freed them (a test that dropped a cluster object stopped its process's ZeroMQ at once). So
the reader ``watch`` returns holds the watched socket and, however it is closed (by its
owner, by the garbage collector, by ``Context.destroy``), disables the monitor first."""
from __future__ import annotations

import itertools
import os

import zmq

__all__ = ["IDLE_REDIAL_MAX_MS", "watch"]

# the longest wait between redials of a gone peer, for a socket whose monitor an idle owner
# does not read; a peer back at its address is dialed again within this
IDLE_REDIAL_MAX_MS = 5000

_numbers = itertools.count()


class _Reader(zmq.Socket):
    """A monitor's PAIR reader that stops its monitor before it closes (see above)."""

    _watched: zmq.Socket | None = None  # (class attributes: pyzmq takes unknown ones for
    _watch_pid: int = -1                # socket options)

    def close(self, linger: int | None = None) -> None:
        watched, self._watched = self._watched, None
        if watched is not None and not watched.closed and os.getpid() == self._watch_pid:
            watched.disable_monitor()
        super().close(linger=linger)


def watch(sock: zmq.Socket, events: int, *, idle_owner: bool = False) -> zmq.Socket:
    """A PAIR socket that receives ``sock``'s monitor ``events`` (read them with
    ``zmq.utils.monitor.recv_monitor_message``), its queue unbounded; events before the call
    are not seen. Closing the reader stops the monitor first; close it before ``sock``
    (it keeps ``sock`` alive until then)."""
    address = f"inproc://disthook-monitor-{os.getpid()}-{next(_numbers)}"
    if idle_owner:
        sock.setsockopt(zmq.RECONNECT_IVL_MAX, IDLE_REDIAL_MAX_MS)
    sock.monitor(address, events)
    reader = sock.context.socket(zmq.PAIR, socket_class=_Reader)
    reader._watched, reader._watch_pid = sock, os.getpid()
    reader.setsockopt(zmq.LINGER, 0)
    reader.setsockopt(zmq.RCVHWM, 0)  # (before it connects: the pipe takes it then)
    reader.connect(address)
    return reader
