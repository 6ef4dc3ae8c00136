"""How a client's connection that ZeroMQ closed for a frame over its cap
(``ZMQ_MAXMSGSIZE``) reads as such, and the error its request then raises.

ZeroMQ reads a frame's size first and closes the connection of a peer that sends a larger
one, unread; its monitor reports only that the connection closed (``EVENT_DISCONNECTED``),
as when the peer's process dies. libzmq 4.3.5 has no event of its own for it (a frame over
the cap after the handshake is no ``EVENT_HANDSHAKE_FAILED_PROTOCOL``; measured: the same
events, connected, handshake succeeded, disconnected, in both cases). What tells them
apart: a connection that closed by itself (the peer went, its pings went unanswered) is
dialed again at once (``EVENT_CONNECT_RETRIED``, measured within a millisecond of the
close), one ended for breaking the protocol is never dialed again. A process whose ZeroMQ
I/O thread gets no CPU for ``RETRY_WITHIN_S`` after a loss would read the loss as a refusal
(see docs/security.md)."""
import zmq

# the connection events a capped socket's monitor reports (the last two tell a refusal
# from a loss)
EVENTS = zmq.EVENT_DISCONNECTED | zmq.EVENT_CONNECT_RETRIED | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
# how long after a closed connection its redial is awaited: a loss's comes within a
# millisecond; only a refused frame waits this long, once, before its error
RETRY_WITHIN_S = 1.0


def redialed(monitor: zmq.Socket) -> bool:
    """Whether the connection whose ``EVENT_DISCONNECTED`` was just read from ``monitor``
    is dialed again (it closed by itself) within ``RETRY_WITHIN_S``; False: ZeroMQ ended
    it for breaking the protocol (a frame over the cap). The monitor reports ``EVENTS``."""
    from zmq.utils.monitor import recv_monitor_message

    while monitor.poll(int(RETRY_WITHIN_S * 1000)):
        if recv_monitor_message(monitor)["event"] in (zmq.EVENT_CONNECT_RETRIED,
                                                      zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL):
            return True  # (a failed decryption is announced: not the cap)
    return False


class FrameTooLarge(ConnectionError):
    """The server at the other end of a ``Peer`` (a coordinator, a worker asked for its
    status) sent a frame over the peer's cap: ZeroMQ closed that connection unread."""

    def __init__(self, name: str, what: str, cap_mb: float):
        self.cap_mb = cap_mb
        super().__init__(
            f"{name} answered {what!r} with a frame over this connection's cap of "
            f"{cap_mb:g} MiB (Peer(max_frame_mb=...); a disthook coordinator's or worker's "
            "answer to it is a header of at most 1 MiB, a longer one goes as an error); "
            "the connection was closed unread. What answers there is not a disthook "
            "server of this version, or is not to be trusted")
