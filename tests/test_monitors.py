"""A ZeroMQ monitor nobody reads never stops the process's other sockets
(disthook/service/monitors.py)."""
import socket
import time
from pathlib import Path

import pytest
import zmq

from disthook.service.monitors import watch

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def ctx():
    """A context of the test's own; left unterminated when its I/O thread is stuck (its
    term would wait for good), so that a failure fails and does not hang."""
    context = zmq.Context()
    yield context
    if still_moves(context):
        context.destroy(linger=0)


def still_moves(context) -> bool:
    """Whether a new pair of sockets in ``context`` gets a message across within 5 s."""
    server, client = context.socket(zmq.ROUTER), context.socket(zmq.DEALER)
    server.setsockopt(zmq.LINGER, 0)
    client.setsockopt(zmq.LINGER, 0)
    port = server.bind_to_random_port("tcp://127.0.0.1")
    client.connect(f"tcp://127.0.0.1:{port}")
    client.send(b"still moving", zmq.NOBLOCK)
    moved = bool(server.poll(5000)) and server.recv_multipart()[1] == b"still moving"
    client.close()
    server.close()
    return moved


def test_an_unread_monitor_does_not_stop_the_other_sockets_of_its_context(ctx):
    # Before: a monitor's events past about 2000 unread blocked the context's I/O thread for
    # good (a client idle while its worker was gone, redialed ten times a second, stopped
    # after a few minutes); here 2500 connections make 5000 events in a few seconds.
    watched = ctx.socket(zmq.ROUTER)
    watched.setsockopt(zmq.LINGER, 0)
    monitor = watch(watched, zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED)
    port = watched.bind_to_random_port("tcp://127.0.0.1")
    for made in range(2500):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5):
                pass
        except OSError:  # (a stuck I/O thread accepts nothing more)
            pytest.fail(f"the watched socket stopped taking connections after {made}")
    assert still_moves(ctx), "another socket of the context got nothing"
    read = 0
    while read < 5000 and monitor.poll(500):  # every event was kept, none dropped
        monitor.recv_multipart()
        read += 1
    assert read == 5000
    monitor.close()
    watched.close()


class _Owner:
    """A client's connection: a socket dialing a peer that is gone, and its monitor."""

    def __init__(self, ctx, port):
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.RECONNECT_IVL, 1)  # a redial (an event) every millisecond
        self.monitor = watch(self.sock, zmq.EVENT_CONNECT_RETRIED | zmq.EVENT_DISCONNECTED)
        self.sock.connect(f"tcp://127.0.0.1:{port}")


def test_a_connection_dropped_without_close_stops_its_monitor_before_its_reader_closes(ctx):
    # Before: Python freed the owner's socket first (closing it, its monitor still on), then
    # the reader; a redial's event in between went to a reader that was gone and blocked the
    # I/O thread (a test that dropped a Cluster stopped every later test of its process)
    with socket.socket() as gone:
        gone.bind(("127.0.0.1", 0))
        port = gone.getsockname()[1]
    for _ in range(200):
        owner = _Owner(ctx, port)
        time.sleep(0.005)
        del owner  # (no cycle: freed here, the socket first)
    assert still_moves(ctx), "another socket of the context got nothing"


def test_every_monitor_in_the_project_goes_through_watch():
    # pyzmq's own get_monitor_socket gives a reader with the blocking high-water mark
    offenders = [str(path.relative_to(ROOT))
                 for folder in ("disthook", "workers", "coordinator", "deploy")
                 for path in (ROOT / folder).rglob("*.py")
                 if "get_monitor_socket(" in path.read_text(encoding="utf-8")]
    assert offenders == []
