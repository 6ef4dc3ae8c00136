"""A local link's arena (workers/arena.py), without worker processes: large pipe records
travel in it and arrive as views of it; a block is not written again while anything of the
reader's can still see it; a full arena sends on the socket; what is off closes the link;
nothing is left behind (no name in /dev/shm, no mapping once both ends closed)."""
import gc
import os
import shutil
import socket
import struct
import tempfile

import numpy as np
import pytest

from disthook import wire
from workers import arena as arena_module
from workers.arena import ARENA_MIN_RECORD, Arena, ArenaError, arena_bytes
from workers.links import IN_ARENA, LINK_PROTOCOL, Link, LinkClosed, LinkListener, read_hello

IDENTITY = b"w1>next>7"
pytestmark = pytest.mark.skipif(not arena_bytes(), reason="arenas: x86-64 Linux only")


@pytest.fixture
def linked(monkeypatch):
    """A dialed link and the one its listener accepted, the hello read; closed after."""
    made = tempfile.mkdtemp(prefix="dl-", dir="/tmp")
    monkeypatch.setenv("XDG_RUNTIME_DIR", made)
    listener = LinkListener("worker w2")
    ends = []

    def make(mb: int = 8):
        monkeypatch.setenv("DISTHOOK_LINK_ARENA_MB", str(mb))
        dialer = Link.dial(listener.path, IDENTITY)
        accepted = listener.accept()
        (first,) = accepted.read()
        accepted.identity = read_hello(first)
        ends.extend([dialer, accepted])
        return dialer, accepted

    yield make
    for end in ends:
        end.close()
    listener.close()
    shutil.rmtree(made, ignore_errors=True)


def send(link: Link, mb: int, data: np.ndarray) -> None:
    link.send_multipart(wire.encode_pipe("m", "s", "act", mb, data))


def receive(link: Link) -> list[np.ndarray]:
    return [wire.decode_pipe(frames)["data"] for frames in link.read()]


def arena_maps() -> int:
    """This process's mappings of link arenas."""
    with open("/proc/self/maps") as f:
        return sum("memfd:disthook-link" in line for line in f)


def test_a_large_record_lies_in_the_arena_and_arrives_as_a_view_of_it(linked):
    dialer, accepted = linked()
    assert dialer.arena is not None and accepted.arena is not None
    big = np.arange(ARENA_MIN_RECORD // 4, dtype=np.float32).reshape(16, -1)
    small = np.arange(8, dtype=np.float32)
    send(dialer, 0, big)
    send(dialer, 1, small)
    got_big, got_small = receive(accepted)
    np.testing.assert_array_equal(got_big, big)
    np.testing.assert_array_equal(got_small, small)
    assert dialer.arena.records == accepted.arena.records == 1  # the small one: the socket
    assert got_big.flags.writeable and got_big.base is not None
    assert isinstance(got_big.base.base, memoryview)  # a view of the arena, not a copy


class _CallsOfTheKernel:
    """A socket whose sends are logged by call (``send`` or ``sendmsg``, and the buffers)."""

    def __init__(self, sock):
        self._sock, self.calls = sock, []

    def send(self, data, *args):
        self.calls.append(("send", 1))
        return self._sock.send(data, *args)

    def sendmsg(self, buffers, *args):
        self.calls.append(("sendmsg", len(buffers)))
        return self._sock.sendmsg(buffers, *args)

    def __getattr__(self, name):
        return getattr(self._sock, name)


def test_a_record_in_the_arena_goes_to_the_kernel_as_one_buffer_in_one_send(linked):
    dialer, accepted = linked()
    dialer.sock = logged = _CallsOfTheKernel(dialer.sock)
    big, small = np.ones((64, 256), np.float32), np.ones((2, 2), np.float32)
    send(dialer, 0, big)  # its header alone on the socket: a plain send (cheaper, cold)
    send(dialer, 1, small)  # header and array on the socket: one sendmsg of both
    assert logged.calls == [("send", 1), ("sendmsg", 2)]
    got = receive(accepted)
    assert np.array_equal(got[0], big) and np.array_equal(got[1], small)


def test_a_block_is_not_written_while_a_view_of_its_record_lives(linked):
    dialer, accepted = linked()
    first = np.full((32, 256), 1.0, np.float32)
    send(dialer, 0, first)
    (got,) = receive(accepted)
    kept = got.reshape(-1)[::3]  # a view of a view: the block stays held
    del got
    gc.collect()
    for mb in range(1, 4):  # more records while it is held: elsewhere in the arena
        send(dialer, mb, np.full((32, 256), float(mb + 1), np.float32))
        (later,) = receive(accepted)
        assert (later == mb + 1).all()
        del later
    assert (kept == 1.0).all()
    assert dialer.arena.held[0][0] == 0 and len(dialer.arena.held) >= 2
    del kept
    gc.collect()
    send(dialer, 9, np.full((32, 256), 9.0, np.float32))  # the first block is free again
    assert dialer.arena.held[0][0] == 0 and len(dialer.arena.held) == 1
    (last,) = receive(accepted)
    assert (last == 9.0).all()


def test_a_full_arena_sends_on_the_socket_and_every_record_arrives_in_order(linked):
    dialer, accepted = linked(mb=1)
    records = [np.full((300, 256), float(i), np.float32) for i in range(6)]  # 300 KiB each
    held = []
    for i, data in enumerate(records):
        send(dialer, i, data)
        held += receive(accepted)  # (all kept: the arena fills after three)
    assert [float(h[0, 0]) for h in held] == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    for h, data in zip(held, records):
        np.testing.assert_array_equal(h, data)
    assert dialer.arena.records == 3


def test_a_record_placed_where_no_block_can_be_closes_the_link(linked):
    dialer, accepted = linked(mb=1)
    head = wire.encode_pipe("m", "s", "act", 0, np.zeros(8192, np.float32))[0]
    for start in (1 << 20, 3):  # past the arena's end; not a block's alignment
        dialer.sock.sendall(struct.pack("<IIQQ", IN_ARENA | 2, len(head), 32768, start) + head)
        with pytest.raises(LinkClosed, match="in an arena of"):
            accepted.read()
        dialer, accepted = linked(mb=1)


def test_a_record_in_an_arena_on_a_link_without_one_closes_it():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    accepted = Link(b, IDENTITY, accepted=True)  # (as after its hello: no arena came)
    head = b"x" * 16
    a.sendall(struct.pack("<IIQQ", IN_ARENA | 2, len(head), 32768, 0) + head)
    with pytest.raises(LinkClosed, match="arena that is not there"):
        accepted.read()
    a.close()


def test_the_switch(monkeypatch, linked):
    monkeypatch.setenv("DISTHOOK_LINK_ARENA_MB", "0")
    assert arena_bytes() == 0
    monkeypatch.setenv("DISTHOOK_LINK_ARENA_MB", "4")
    assert arena_bytes() == arena_module.CONTROL + (4 << 20)
    for off in ("lots", "-1", "4096"):
        monkeypatch.setenv("DISTHOOK_LINK_ARENA_MB", off)
        with pytest.raises(ValueError, match="DISTHOOK_LINK_ARENA_MB"):
            arena_bytes()
    dialer, accepted = linked(mb=0)  # no arena: every record on the socket
    assert dialer.arena is None and accepted.arena is None
    send(dialer, 0, np.ones((64, 256), np.float32))
    (got,) = receive(accepted)
    assert got.base.base is None and (got == 1).all()


def test_only_a_sealed_memory_file_of_an_arena_s_size_is_taken():
    fd = os.memfd_create("not-sealed")
    os.ftruncate(fd, 1 << 20)
    with pytest.raises(ArenaError, match="sealed"):
        Arena.adopt(fd)
    with pytest.raises(OSError):  # taken: closed whatever came
        os.fstat(fd)
    tiny = Arena.create(arena_module.CONTROL)  # no room for a block
    with pytest.raises(ArenaError, match="bytes"):
        Arena.adopt(os.dup(tiny.fd))
    tiny.close()


def test_nothing_is_left_behind(linked):
    shm = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    before = arena_maps()
    dialer, accepted = linked()
    assert arena_maps() == before + 2  # one mapping at each end, no name anywhere
    send(dialer, 0, np.ones((64, 256), np.float32))
    (got,) = receive(accepted)
    dialer.close()
    accepted.close()
    assert arena_maps() == before + 1  # the record still held maps the reader's
    assert (got == 1).all()
    del got
    gc.collect()
    assert arena_maps() == before
    if os.path.isdir("/dev/shm"):
        assert set(os.listdir("/dev/shm")) <= shm


def test_the_arena_is_written_by_its_dialer_alone(linked):
    dialer, accepted = linked()
    big = np.ones((64, 256), np.float32)
    accepted.send_multipart(wire.encode_pipe("m", "s", "grad", 0, big))  # (a reply's way)
    assert accepted.arena.records == 0  # on the socket: the arena is the dialer's to write
    (frames,) = dialer.read()
    np.testing.assert_array_equal(wire.decode_pipe(frames)["data"], big)
    head = wire.encode_pipe("m", "s", "act", 0, np.zeros(8192, np.float32))[0]
    accepted.sock.sendall(struct.pack("<IIQQ", IN_ARENA | 2, len(head), 32768, 0) + head)
    with pytest.raises(LinkClosed, match="arena that is not there"):
        dialer.read()  # nor does it read records in it


def test_a_dialer_of_link_version_1_is_refused():
    # (version 1 knew no arena: its acceptor would read the arena's records as frames)
    with pytest.raises(LinkClosed, match="link version 1, this worker 2"):
        read_hello([LINK_PROTOCOL + b"\x01" + IDENTITY])
