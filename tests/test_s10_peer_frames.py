"""What a ``Peer`` (a client's connection to its coordinator, ``disthook status``'s to each
worker, ``connect``'s greeting) takes from the server it dials: before, no
``ZMQ_MAXMSGSIZE`` was set on it, so whatever answered there (a process bound to the
coordinator's address before it, a server that lies) made it hold a frame of any size, and
a frame it then refused read as no answer at all, after the request's whole timeout. Now
it takes a header's worth (1 MiB, all a coordinator's or a worker's answer to it can be),
``Peer(max_frame_mb=)`` for more, and a larger frame fails the request at once saying so,
naming the cap and the option."""
import threading
import time

import pytest
import zmq

from disthook import wire
from disthook.service.rpc import NotACoordinator, Peer, RemoteTimeout, greet

pytestmark = pytest.mark.timeout(60)

TIMEOUT = 20.0
BIG = 64 << 20


class FakeServer:
    """A ROUTER answering the first request it gets with ``answer(client)``."""

    def __init__(self, answer):
        self.sock = zmq.Context.instance().socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.address = f"tcp://127.0.0.1:{self.sock.bind_to_random_port('tcp://127.0.0.1')}"
        self.answer = answer
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        if self.sock.poll(10_000):
            client = self.sock.recv_multipart()[0]
            self.answer(self, client)

    def close(self):
        self.thread.join(10)
        self.sock.close(linger=0)


def _too_large(server, client):
    server.sock.send_multipart([client, b"x" * BIG])


def test_a_peer_caps_a_frame_at_a_header():
    with Peer("tcp://127.0.0.1:1") as peer:
        assert peer._sock.getsockopt(zmq.MAXMSGSIZE) == (1 << 20) + wire.FRAME_SLACK
    with Peer("tcp://127.0.0.1:1", max_frame_mb=8) as peer:
        assert peer._sock.getsockopt(zmq.MAXMSGSIZE) == (8 << 20) + wire.FRAME_SLACK


def test_a_frame_over_the_cap_fails_the_request_at_once():
    server = FakeServer(_too_large)
    try:
        with Peer(server.address, name="the coordinator at X") as peer:
            start = time.monotonic()
            with pytest.raises(ConnectionError,  # (frame_cap.FrameTooLarge)
                               match=r"the coordinator at X answered 'status' with a frame "
                                     r"over this connection's cap of 1 MiB "
                                     r"\(Peer\(max_frame_mb=\.\.\.\)") as caught:
                peer.request("status", timeout=TIMEOUT)
            assert time.monotonic() - start < TIMEOUT / 4, "the request waited its timeout"
            assert caught.value.cap_mb == 1
    finally:
        server.close()


def test_a_server_that_goes_is_still_no_answer():
    def go(server, client):
        server.sock.close(linger=0)

    server = FakeServer(go)
    try:
        with Peer(server.address) as peer, pytest.raises(RemoteTimeout):
            peer.request("status", timeout=3)
    finally:
        server.thread.join(10)


def test_a_greeting_answered_with_a_frame_over_the_cap_is_no_coordinator():
    server = FakeServer(_too_large)
    try:
        with pytest.raises(NotACoordinator, match="a frame over 1 MiB"):
            greet(server.address, timeout=TIMEOUT)
    finally:
        server.close()


@pytest.mark.parametrize("mb", [0.5, "64", True, None])
def test_a_cap_below_a_header_is_refused(mb):
    with pytest.raises(ValueError, match="max_frame_mb takes a size in MiB of at least 1"):
        Peer("tcp://127.0.0.1:1", max_frame_mb=mb)
