"""A worker's own connection to its coordinator takes no frame over the coordinator's cap
(1 MiB, a header: nothing the coordinator sends a worker carries an array). Who can write
to it: whatever listens at the coordinator's address, so without keys any process bound
there first (or after the coordinator went), with keys only a holder of the servers' key.
Before, it had no cap: such a process made a worker hold a frame of any size (then the
decoder refused it). Now ZeroMQ closes the connection unread, the worker logs that and
dials the coordinator again (a closed connection is not redialed by ZeroMQ), and registers
again. A fake coordinator on a real socket; no process is started."""
import logging
import time

import zmq

from disthook import wire
from workers.server import Worker

BIG = 8 << 20  # a frame eight times the cap


def _coordinator():
    router = zmq.Context.instance().socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    return router, f"tcp://127.0.0.1:{port}"


def _next(router, w, seconds=10.0):
    """The next message the worker sends the fake coordinator, running the worker's loop
    meanwhile (its ticks dial again)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        w._serve_round(start_jobs=False)
        if router.poll(10):
            sender, *frames = router.recv_multipart()
            return sender, wire.decode(frames)
    return None, None


def test_a_frame_over_the_cap_from_the_coordinator_is_not_read(caplog):
    router, address = _coordinator()
    w = Worker(address, worker_id="capped")
    try:
        sender, msg = _next(router, w)
        assert msg.type == "register"
        router.send_multipart([sender, *wire.encode("ok", {"result": {"heartbeat": 0.5}})])
        deadline = time.monotonic() + 10
        while not w.registered and time.monotonic() < deadline:
            w._serve_round(start_jobs=False)
        assert w.registered
        read = []
        on_control = w._on_control
        w._on_control = lambda: (read.append(w.control.getsockopt(zmq.RCVMORE)), on_control())
        caplog.set_level(logging.WARNING)
        router.send_multipart([sender, b"\x00" * BIG])  # (a ROUTER drops what has no route)
        # the worker dials again and registers anew, on a new connection
        deadline, again = time.monotonic() + 15, None
        while time.monotonic() < deadline:
            sender2, msg = _next(router, w, deadline - time.monotonic())
            if msg is not None and msg.type == "register":
                again = sender2
                break
        assert again is not None, (
            f"the worker did not register again after the frame over its cap; it read "
            f"{len(read)} message(s) from its coordinator, logs: {caplog.text[-500:]}")
        assert not read  # the big frame never reached the worker's decoder
        assert "over" in caplog.text and "MiB" in caplog.text, caplog.text
        router.send_multipart([again, *wire.encode("ok", {"result": {"heartbeat": 0.5}})])
        deadline = time.monotonic() + 10
        while not w.registered and time.monotonic() < deadline:
            w._serve_round(start_jobs=False)
        assert w.registered
    finally:
        w.close()
        router.close()


def test_a_frame_over_the_cap_from_a_peer_worker_is_not_read():
    """The sockets a worker dials to other workers (a neighbour stage's, ``send_value``'s)
    take nothing from them in the protocol (a fault, logged): a frame over a header's cap
    from what answers at such an address is not received either. Before, a process at an
    address registered as a worker's (without keys, any peer may register one) made the
    worker that dialed it hold a frame of any size."""
    router, address = _coordinator()
    ghost = zmq.Context.instance().socket(zmq.ROUTER)
    ghost.setsockopt(zmq.LINGER, 0)
    ghost_address = f"tcp://127.0.0.1:{ghost.bind_to_random_port('tcp://127.0.0.1')}"
    w = Worker(address, worker_id="dialer")
    try:
        sock = w._peer(ghost_address)
        sock.send_multipart(wire.encode("status", {}))
        assert ghost.poll(10_000)
        identity, *_ = ghost.recv_multipart()
        ghost.send_multipart([identity, b"\x00" * BIG])
        assert not sock.poll(3000)  # before: the 8 MiB frame was there to read
    finally:
        w.close()
        ghost.close()
        router.close()
