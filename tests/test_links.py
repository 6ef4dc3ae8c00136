"""Local links between neighbour stages (workers/links.py), without processes: framing
across partial reads and writes, large messages both ways at once, what is off closes the
link, and who may connect."""
import logging
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
import zmq
from helpers import link_bytes

from disthook import wire
from workers import link_dirs, links
from workers.links import Link, LinkClosed, LinkListener, hello, read_hello

IDENTITY = b"w1>next>7"


def pair(**kw):
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    return Link(a, IDENTITY), Link(b, accepted=True, **kw)


def raw_bytes(frames) -> bytes:
    """What a link writes for ``frames``, as the kernel carries it."""
    return link_bytes(frames, IDENTITY)


def pipe_frames(n=32 * 64):
    data = np.arange(n, dtype=np.float32).reshape(32, -1)
    return data, wire.encode("pipe", {"model": "m", "step": "s1", "kind": "act", "mb": 3,
                                      "data": data, "reason": None})


def test_a_pipe_record_read_one_byte_at_a_time():
    data, frames = pipe_frames()
    stream = raw_bytes(frames)
    writer, reader = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    link = Link(reader, accepted=True)
    got = []
    for i in range(len(stream)):
        writer.send(stream[i:i + 1])
        got += link.read()
        assert len(got) == (1 if i == len(stream) - 1 else 0)
    msg = wire.decode(got[0])
    assert msg.type == "pipe" and msg["mb"] == 3 and msg["kind"] == "act"
    np.testing.assert_array_equal(msg["data"], data)
    assert msg["data"].flags.writeable  # a fresh buffer of its own, as a ZeroMQ frame's view
    assert isinstance(got[0][1], np.ndarray)  # read straight into it


def test_messages_back_to_back_and_empty_frames():
    a, b = pair()
    sent = [[b"one"], [b"two", b"", b"xyz"], [b"\x00" * 5, np.ones(3, np.float64)]]
    for frames in sent:
        a.send_multipart(frames)
    got = b.read()
    assert [[bytes(memoryview(f).cast("B")) for f in m] for m in got] == [
        [bytes(memoryview(f).cast("B")) for f in m] for m in sent]
    assert b.read() == []  # nothing more: no block


class _CountedSocket:
    """A socket whose reads are counted (each a call of the kernel)."""

    def __init__(self, sock):
        self._sock, self.reads = sock, 0

    def recv_into(self, *args):
        self.reads += 1
        return self._sock.recv_into(*args)

    def recvmsg_into(self, *args):
        self.reads += 1
        return self._sock.recvmsg_into(*args)

    def __getattr__(self, name):
        return getattr(self._sock, name)


@pytest.mark.parametrize("messages, reads", [
    ([[b"one"]], 1),  # a message all in the first read: no second read that finds nothing
    ([[b"one"], [b"two", b"xyz"], [b"three"]], 1),  # back to back: one read takes them all
    ([[b"head", np.arange(1 << 14, dtype=np.float32)]], 2),  # the array's rest read straight
])
def test_what_came_whole_is_taken_without_a_read_that_finds_nothing(messages, reads):
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    counted = _CountedSocket(b)
    writer, reader = Link(a, IDENTITY), Link(counted, b"w2>prev>1", accepted=True)
    for frames in messages:
        writer.send_multipart(frames)
    got = reader.read()
    assert len(got) == len(messages) and counted.reads == reads
    assert [[bytes(memoryview(f).cast("B")) for f in m] for m in got] == [
        [bytes(memoryview(f).cast("B")) for f in m] for m in messages]
    writer.send_multipart([b"later"])  # what comes after is read by the next call
    assert [bytes(m[0]) for m in reader.read()] == [b"later"]


def _exchange(ends, expected_bytes):
    """Poll both links as the worker does (writes only while an outbox holds anything)
    until each took ``expected_bytes`` of array; what each received."""
    poller = zmq.Poller()
    received = {id(e): [] for e in ends}
    by_fd = {e.fileno(): e for e in ends}
    for e in ends:
        e.on_outbox = (lambda waiting, e=e: poller.register(
            e.fileno(), zmq.POLLIN | (zmq.POLLOUT if waiting else 0)))
        poller.register(e.fileno(), zmq.POLLIN | (zmq.POLLOUT if e.outbox else 0))
    rounds = 0
    while any(sum(m[1].nbytes for m in received[id(e)]) < expected_bytes for e in ends):
        rounds += 1
        assert rounds < 100000, "no progress: deadlock"
        for fd, events in poller.poll(5000):
            e = by_fd[fd]
            if events & zmq.POLLOUT:
                e.flush()
            if events & zmq.POLLIN:
                received[id(e)] += e.read()
    return received


def test_sixteen_mib_both_ways_at_once_never_deadlocks():
    a_sock, b_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    a, b = Link(a_sock, IDENTITY), Link(b_sock, b"w2>prev>1")
    for s in (a_sock, b_sock):  # small buffers: most of each message waits in the outbox
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 << 10)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
    size = 16 << 20
    x = np.random.default_rng(0).integers(0, 255, size, dtype=np.uint8)
    y = x[::-1].copy()
    a.send_multipart([b"head-a", x])
    b.send_multipart([b"head-b", y])
    assert a.outbox and b.outbox  # neither send blocked, neither was taken whole
    got = _exchange([a, b], size)
    (from_b,), (from_a,) = got[id(a)], got[id(b)]
    assert bytes(from_a[0]) == b"head-a" and bytes(from_b[0]) == b"head-b"
    np.testing.assert_array_equal(from_a[1], x)
    np.testing.assert_array_equal(from_b[1], y)
    assert not a.outbox and not b.outbox


def test_a_small_frame_left_over_is_copied_to_the_outbox():
    a_sock, b_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    a_sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    a, b = Link(a_sock, IDENTITY), Link(b_sock, accepted=True)
    filler = np.zeros(8 << 20, np.uint8)
    a.send_multipart([b"fill", filler])  # the kernel's buffer full: what follows waits
    buf = np.full(1000, 7, np.uint8)
    a.send_multipart([b"small", buf])
    buf[:] = 0  # the sender reuses its buffer: what went must not change
    got = []
    while len(got) < 2:
        a.flush()
        got += b.read()
    np.testing.assert_array_equal(got[1][1], np.full(1000, 7, np.uint8))


@pytest.mark.parametrize("prefix, why", [
    (struct.pack("<II", 0, 10), "0 frames"),
    (struct.pack("<II", 5000, 10), "5000 frames"),
    (struct.pack("<II", 1, (1 << 20) + 1), "header of"),
])
def test_a_malformed_prefix_closes_the_link(prefix, why):
    writer, reader = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    link = Link(reader, accepted=True)
    writer.send(prefix)
    with pytest.raises(LinkClosed, match=why):
        link.read()
    assert link.closed
    link.send_multipart([b"x"])  # a closed link drops what is sent, and counts it
    assert link.dropped == 1


def test_a_frame_over_the_caps_closes_the_link_before_it_is_allocated():
    writer, reader = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    link = Link(reader, accepted=True, limits=wire.Limits(max_array_bytes=1 << 20))
    writer.send(struct.pack("<II", 2, 4) + struct.pack("<Q", 1 << 40) + b"head")
    with pytest.raises(LinkClosed, match="frames of"):
        link.read()
    assert link.closed


def test_the_other_end_closing_is_told():
    a, b = pair()
    a.close()
    with pytest.raises(LinkClosed, match="closed"):
        b.read()
    assert b.closed


def test_hello():
    assert read_hello([hello(IDENTITY)]) == IDENTITY
    for frames, why in [([b"http/1.1 GET"], "not a disthook-link hello"),
                        ([links.LINK_PROTOCOL + b"\x09" + IDENTITY], "version 9"),
                        ([hello(b"client-7")], "no neighbour identity"),
                        ([hello(IDENTITY), b""], "2 frames")]:
        with pytest.raises(LinkClosed, match=why):
            read_hello(frames)


@pytest.fixture
def short_dir():
    """A directory short enough to hold a Unix socket's path (a pytest tmp_path under
    xdist may not be)."""
    made = tempfile.mkdtemp(prefix="dl-", dir="/tmp")
    yield made
    shutil.rmtree(made, ignore_errors=True)


def test_dial_sends_the_hello_and_the_listener_checks_the_uid(short_dir, monkeypatch, caplog):
    monkeypatch.setenv("XDG_RUNTIME_DIR", short_dir)
    listener = LinkListener("worker w2")
    assert os.path.dirname(listener.directory) == short_dir
    assert os.path.basename(listener.directory).startswith(f"disthook-links-{os.getpid()}-")
    assert os.stat(listener.directory).st_mode & 0o777 == 0o700
    try:
        dialer = Link.dial(listener.path, IDENTITY)
        accepted = listener.accept()
        assert accepted is not None and accepted.accepted
        (first,) = accepted.read()
        assert read_hello(first) == IDENTITY
        # a process of another user: refused, with a warning naming its uid
        monkeypatch.setattr(links, "peer_uid", lambda sock: os.getuid() + 1)
        other = Link.dial(listener.path, IDENTITY)
        with caplog.at_level(logging.WARNING, logger="disthook.worker"):
            assert listener.accept() is None
        assert f"uid {os.getuid() + 1}" in caplog.text
        with pytest.raises(LinkClosed):  # its connection was closed
            other.read()
        dialer.close()
        accepted.close()
    finally:
        listener.close()
    assert not os.path.exists(listener.directory)  # the socket and its directory go


def test_the_real_peer_uid_is_ours():
    a, _b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    assert links.peer_uid(a) in (None, os.getuid())


def test_host_token_and_the_switch(monkeypatch):
    assert links.host_token().startswith(socket.gethostname() + "/")
    monkeypatch.setenv("DISTHOOK_LOCAL_LINKS", "0")
    assert not links.links_enabled()
    monkeypatch.setenv("DISTHOOK_LOCAL_LINKS", "1")
    assert links.links_enabled()


def test_the_directories_of_killed_workers_are_removed(short_dir):
    """A directory whose worker (the pid in its name) no longer runs goes, once it is older
    than a start-up; a live worker's is left, and nothing is sent to its socket."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a pid that ran and ended

    def made(name, listening, age_s):
        directory = Path(short_dir) / name
        directory.mkdir(mode=0o700)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(str(directory / "worker.sock"))
        if listening:
            sock.listen(1)
            sock.setblocking(False)
        else:
            sock.close()  # as SIGKILL leaves it: the file, nothing listening
        then = os.path.getmtime(directory) - age_s
        os.utime(directory, (then, then))
        return directory, sock

    dead, _ = made(f"disthook-links-{gone.pid}-a1", False, 120)
    young, _ = made(f"disthook-links-{gone.pid}-b2", False, 1)  # just made: left a while
    live, keep = made(f"disthook-links-{os.getpid()}-c3", True, 120)
    unnamed, _ = made("disthook-links-d4", False, 120)  # no pid: not one this module made
    other, _ = made("something-else", False, 120)
    try:
        assert link_dirs.remove_stale(short_dir) == 1
        assert not dead.exists()
        assert young.exists() and live.exists() and unnamed.exists() and other.exists()
        with pytest.raises(BlockingIOError):  # nobody connected to the live one to look
            keep.accept()
    finally:
        keep.close()


def test_a_runtime_directory_too_long_for_a_socket_path_is_passed_over(tmp_path, monkeypatch):
    deep = tmp_path / ("d" * 100)
    deep.mkdir()
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(deep))
    listener = LinkListener("worker w3")
    try:
        assert os.path.dirname(listener.directory) != str(deep)
        assert len(os.fsencode(listener.path)) <= 107
        Link.dial(listener.path, IDENTITY).close()  # it listens there
    finally:
        listener.close()


class _Dialled:
    """A link this worker dialled, on which ``messages`` came (its neighbour's answers)."""

    accepted = False

    def __init__(self, messages):
        self.messages = messages

    def read(self):
        return self.messages


def test_a_neighbours_error_answer_on_a_dialled_link_is_no_warning(caplog):
    """A client that leaves mid-forward (L1): the next stage refuses the forward it can no
    longer place and answers with an error on the link; that was a warning ("unexpected
    message"), now a debug line saying what the neighbour refused. Anything else stays one."""
    from types import SimpleNamespace

    from workers.link_handlers import LinkHandlers

    worker = SimpleNamespace(id="w1", log=logging.getLogger("test-links"))
    worker._neighbour_answered = LinkHandlers._neighbour_answered.__get__(worker)
    error = wire.encode("error", {"kind": "RuntimeError", "message": "its client left",
                                  "worker": "w2", "path": None, "stage": None,
                                  "traceback": None}, req=4)
    with caplog.at_level(logging.DEBUG, logger="test-links"):
        assert LinkHandlers._read_link(worker, _Dialled([error]))
        assert [r.levelname for r in caplog.records] == ["DEBUG"]
        assert "refused a message of this worker's: RuntimeError: its client left" in \
            caplog.records[0].getMessage()
        caplog.clear()
        ok = wire.encode("ok", {"result": 1}, req=5)
        assert LinkHandlers._read_link(worker, _Dialled([ok]))
        assert [r.levelname for r in caplog.records] == ["WARNING"]
