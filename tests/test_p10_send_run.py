"""A run of pipe records into a link's arena goes out through ``Link.send_run`` (the header
written into a buffer the link keeps, one send): the same bytes on the socket and in the
arena as ``send_multipart`` of ``wire.encode_pipe``'s frames, read back as the same records;
nothing sent or placed where it cannot go so; a record the kernel did not take whole is
queued as it was, whatever the kept buffer holds later."""
import socket

import numpy as np
import pytest

from disthook import wire
from workers.arena import ARENA_MIN_RECORD, Arena, arena_bytes
from workers.links import Link

pytestmark = pytest.mark.skipif(not arena_bytes(), reason="arenas: x86-64 Linux only")
IDENTITY = b"w1>next>7"


def dialed(arena: bool = True):
    """A dialer's end with an arena (as ``Link.dial`` makes it) and the raw other end."""
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    link = Link(a, IDENTITY)
    if arena:
        link.arena = Arena.create(arena_bytes())
        link.arena.release_fd()
    b.setblocking(False)
    return link, b


def drain(sock) -> bytes:
    out = b""
    while True:
        try:
            got = sock.recv(1 << 20)
        except BlockingIOError:
            return out
        out += got


def records(n: int, model="m", step="s7", kind="act", rows=32):
    """``n`` records of one run (micro-batches 0 ..), each a fresh activation."""
    for mb in range(n):
        yield mb, np.full((rows, 1024), mb + 0.5, np.float32), model, step, kind


def send(link, mb, data, model, step, kind, use_run: bool) -> bool:
    run = wire.pipe_run(model, step, kind, mb, data) if use_run else None
    if run is not None:
        return link.send_run(run[0], mb, run[1])
    link.send_multipart(wire.encode_pipe(model, step, kind, mb, data))
    return False


def test_a_run_sent_so_is_the_general_path_s_bytes_and_reads_back_the_same():
    general, raw_general = dialed()
    short, raw_short = dialed()
    ran = 0
    for mb, data, model, step, kind in records(6):
        send(general, mb, data, model, step, kind, use_run=False)
        ran += send(short, mb, data, model, step, kind, use_run=True)
    assert ran == 6  # (the general end wrote the run's header whole just before each)
    assert drain(raw_short) == drain(raw_general)
    ring = slice(0, 4096 + 8 << 20)
    assert bytes(short.arena.map[ring]) == bytes(general.arena.map[ring])
    assert short.arena.records == general.arena.records == 6 and short.sent == 6
    # and the acceptor reads them as the records they are
    for mb, data, model, step, kind in records(3):
        send(short, mb, data, model, step, kind, use_run=True)
    reader = Link(raw_short, accepted=True)
    reader.identity, reader.arena = IDENTITY, short.arena  # (the hello's, in one process)
    got = [wire.pipe_fields(f[0], f, reader.limits) for f in reader.read()]
    assert [(r["mb"], r["kind"], r["model"], r["step"]) for r in got] == [
        (0, "act", "m", "s7"), (1, "act", "m", "s7"), (2, "act", "m", "s7")]
    for r, (_, data, *_) in zip(got, records(3)):
        np.testing.assert_array_equal(r["data"], data)


def test_what_cannot_go_so_is_left_to_the_caller_untouched():
    for mb, data, model, step, kind in records(1):
        send(dialed()[0], mb, data, model, step, kind, use_run=False)  # (the run's header)
    data = np.ones((32, 1024), np.float32)
    run = wire.pipe_run("m", "s7", "act", 1, data)
    assert run is not None
    no_arena, raw = dialed(arena=False)
    assert not no_arena.send_run(run[0], 1, run[1]) and drain(raw) == b""
    small = np.ones((2, 1024), np.float32)[:1]
    link, raw = dialed()
    assert len(memoryview(small).cast("B")) < ARENA_MIN_RECORD
    assert not link.send_run(run[0], 1, memoryview(small).cast("B"))
    link.outbox.append(memoryview(b"x"))  # something waits for the socket: after it
    assert not link.send_run(run[0], 1, run[1])
    assert link.arena.records == 0 and link.sent == 0 and drain(raw) == b""
    full, raw = dialed()
    while full.arena.place(run[1]) is not None:  # the arena has no room left
        pass
    placed = full.arena.records
    assert not full.send_run(run[0], 1, run[1])
    assert full.arena.records == placed and drain(raw) == b""
    closed, _ = dialed()
    closed.close()
    assert not closed.send_run(run[0], 1, run[1])


def test_a_header_the_kernel_did_not_take_is_queued_as_it_was():
    link, raw = dialed()
    for mb, data, model, step, kind in records(1):
        send(link, mb, data, model, step, kind, use_run=False)
    drain(raw)
    link.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    while True:  # the kernel's buffer full
        try:
            link.sock.send(b"\0" * 4096, socket.MSG_DONTWAIT)
        except BlockingIOError:
            break
    data = np.ones((32, 1024), np.float32)
    run = wire.pipe_run("m", "s7", "act", 9, data)
    assert link.send_run(run[0], 9, run[1]) and link.outbox
    queued = b"".join(bytes(v) for v in link.outbox)
    link._run[1][:] = bytes(len(link._run[1]))  # (the kept buffer written for a next one)
    assert b"".join(bytes(v) for v in link.outbox) == queued
    head = wire.PIPE_MB.unpack_from(queued, len(queued) - len(run[0][6]) - 8)[0]
    assert head == 9
