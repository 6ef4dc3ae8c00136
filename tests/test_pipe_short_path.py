"""A pipe record's short path between neighbour stages (issue 33): the short form's encoder
and reader called directly (``wire.encode_pipe``, ``wire.decode_pipe``) give and refuse what
``encode`` and ``decode`` do; a link sends a record's two frames with one prefix; a record
read off an accepted link goes straight to the mailbox, and a waiting stage takes what has
come on its links before it polls."""
import itertools
import logging
import select
import socket
import struct

import numpy as np
import pytest
from helpers import link_bytes

from disthook import wire
from disthook.wire import WireError
from workers import links
from workers.link_handlers import LinkHandlers
from workers.links import Link, LinkClosed
from workers.state import Job, Resume, Tick, WorkerState

IDENTITY = b"w1>prev>3"


def _bytes(frames) -> list[bytes]:
    return [bytes(memoryview(f).cast("B")) for f in frames]


def _raised(fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001
        return type(exc), str(exc)
    return None


RECORDS = [
    ("m", "s1", "act", 3, np.arange(64, dtype=np.float32).reshape(4, 16), None),
    ("m", "s1", "grad", -1, np.zeros((2, 0, 3), np.float64), None),
    ("model-é", "step", "act", 7, np.arange(6, dtype=np.int64)[::2], None),  # a view
    ("m", "s", "abort", -1, None, "stage 2 failed: ValueError: x"),
    ("m", "s", "value", 0, np.full((), 1.5, np.float32), None),
]


@pytest.mark.parametrize("fields", RECORDS)
def test_encode_pipe_writes_what_encode_writes(fields):
    names = ("model", "step", "kind", "mb", "data", "reason")
    assert _bytes(wire.encode_pipe(*fields)) == _bytes(wire.encode("pipe",
                                                                   dict(zip(names, fields))))


@pytest.mark.parametrize("fields", [
    ("m", "s", "act", True, None, None),  # a bool is no micro-batch number
    ("m", "s", "forward", 0, None, None),
    (3, "s", "act", 0, None, None),
    ("m", "s", "act", 0, [1.0, 2.0], None),
    ("m", "s", "act", 0, np.zeros(2, np.uint16), None),
    ("m", "s", "abort", 0, None, b"bytes"),
])
def test_encode_pipe_refuses_what_encode_refuses(fields):
    names = ("model", "step", "kind", "mb", "data", "reason")
    expected = _raised(wire.encode, "pipe", dict(zip(names, fields)))
    assert expected is not None and _raised(wire.encode_pipe, *fields) == expected


def test_fields_the_short_form_cannot_hold_go_in_the_general_form():
    model = "m" * 70000  # over the short form's 64 KiB a name
    frames = wire.encode_pipe(model, "s", "act", 1, None)
    assert not bytes(frames[0]).startswith(wire.PIPE_MAGIC)
    assert wire.decode(frames)["model"] == model


@pytest.mark.parametrize("fields", RECORDS)
def test_decode_pipe_reads_what_decode_reads(fields):
    frames = _bytes(wire.encode_pipe(*fields))
    got, expected = wire.decode_pipe(frames), wire.decode(frames)
    assert (got.type, got.req, got.ctx) == (expected.type, expected.req, expected.ctx)
    for name in ("model", "step", "kind", "mb", "reason"):
        assert got[name] == expected[name]
    if expected["data"] is None:
        assert got["data"] is None
    else:
        assert got["data"].dtype == expected["data"].dtype
        np.testing.assert_array_equal(got["data"], expected["data"])


def test_decode_pipe_refuses_a_record_in_another_form():
    general = wire.encode("pipe", {"model": "m", "step": "s", "kind": "act", "mb": 0}, req=4)
    with pytest.raises(WireError, match="not a pipe record in its short form"):
        wire.decode_pipe(general)
    with pytest.raises(WireError, match="empty message"):
        wire.decode_pipe([])
    with pytest.raises(WireError, match="header of .* bytes exceeds"):
        wire.decode_pipe([wire.PIPE_MAGIC + bytes(wire.DEFAULT_LIMITS.max_header_bytes)])


def _mutated(seed: int, count: int):
    """``count`` short records of a (2, 3) float32 array with one to three bytes past the
    magic changed, cut short, one or both frames kept."""
    head, body = _bytes(wire.encode_pipe("m", "s1", "act", 3,
                                         np.ones((2, 3), np.float32)))
    rng = np.random.default_rng(seed)
    for _ in range(count):
        mutated = bytearray(head)
        for _ in range(int(rng.integers(1, 4))):
            mutated[int(rng.integers(6, len(mutated)))] = int(rng.integers(0, 256))
        cut = int(rng.integers(6, len(mutated) + 1))
        yield [bytes(mutated[:cut]), body[:int(rng.integers(0, 30))]][:int(rng.integers(1, 3))]


def test_decode_pipe_refuses_whatever_decode_refuses_with_its_words():
    """Mutated short records: each refused by both with one message, or read alike."""
    refused = 0
    for frames in _mutated(7, 3000):
        expected = _raised(wire.decode, frames)
        assert _raised(wire.decode_pipe, frames) == expected
        refused += expected is not None
    assert refused > 2500


# ---- a link's send of two frames -----------------------------------------------------------------

def _sent(frames) -> bytes:
    return link_bytes(frames, IDENTITY)


@pytest.mark.parametrize("data", [np.arange(12, dtype=np.float32).reshape(3, 4),
                                  np.zeros((0, 4), np.float32)])
def test_two_frames_go_as_the_general_framing_writes_them(data):
    frames = wire.encode_pipe("m", "s", "act", 2, data)
    general = b"".join(bytes(v) for v in links._framed(frames))
    assert _sent(frames) == general
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    Link(a, IDENTITY).send_multipart(frames)
    read = Link(b, accepted=True).read()
    assert _bytes(read[0]) == _bytes(frames)
    # a non-contiguous second frame is refused as before, nothing sent
    with pytest.raises(TypeError):
        Link(a, IDENTITY).send_multipart([b"h", memoryview(np.ones((4, 4))[:, ::2])])


def test_pipe_fields_are_the_fields_decode_pipe_reads_and_refuse_alike():
    """A link's receive path reads a record's fields alone (``pipe_fields``, frame 0 as
    bytes, its magic checked): the fields ``decode_pipe`` reads, and its errors, word for
    word, for records intact and mutated."""
    def both(frames):
        expected = _raised(wire.decode_pipe, frames)
        assert _raised(wire.pipe_fields, frames[0], frames, wire.DEFAULT_LIMITS) == expected
        if expected is None:
            got, msg = wire.pipe_fields(frames[0], frames, wire.DEFAULT_LIMITS), \
                wire.decode_pipe(frames)
            assert list(got) == list(msg.fields) and type(got) is dict
            for name, value in got.items():
                if isinstance(value, np.ndarray):
                    np.testing.assert_array_equal(value, msg[name])
                    assert value.dtype == msg[name].dtype
                else:
                    assert value == msg[name] and type(value) is type(msg[name])
        return expected

    for fields in RECORDS:
        assert both(_bytes(wire.encode_pipe(*fields))) is None
    head, body = _bytes(wire.encode_pipe("m", "s1", "act", 3, np.ones((2, 3), np.float32)))
    assert both([head, np.frombuffer(body, np.uint8).copy()]) is None  # (as a link gives it)
    refused = sum(both(frames) is not None for frames in _mutated(11, 600))
    assert refused > 450


# ---- the worker's side: a record read off a link -----------------------------------------------

class _Worker(LinkHandlers):
    """What LinkHandlers needs of a worker, without sockets but the links."""

    def __init__(self):
        self.id, self.log = "w", logging.getLogger("test")
        self.state = WorkerState("w")
        self.state.models.add("m")
        self.links_in, self._links_waiting, self._polled = {}, set(), {}
        self._outboxes, self._next_tick = set(), float("inf")
        self._links_ready, self._links_wait = select.poll(), None
        self.refused, self.done, self.general = [], [], []

    def refuse(self, sender, exc):
        self.refused.append((sender, str(exc)))

    def _execute(self, instructions):
        self.done += instructions

    def messages_in(self, sender, body):
        self.general.append(body)
        return [wire.decode(body)]

    def _link_gone(self, link, why, ended=False):
        self.gone = why


def _linked(worker):
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    dialled, accepted = Link(a, IDENTITY), Link(b, IDENTITY, accepted=True)
    worker.links_in[IDENTITY] = accepted
    worker._polled[accepted.fileno()] = accepted
    worker._links_ready.register(accepted.fileno(), select.POLLIN)
    return dialled, accepted


def _waiting(worker, key):
    job = Job(b"client", None, b"client", "m")
    worker.state.jobs.add(job)
    return worker.state.wait_for_pipe(job, (key, ("m", "s", "abort", -1)), "a record")


def test_a_record_on_a_link_goes_to_the_mailbox_and_ends_the_wait():
    w = _Worker()
    dialled, accepted = _linked(w)
    wait = _waiting(w, ("m", "s", "act", 5))
    data = np.arange(8, dtype=np.float32).reshape(2, 4)
    dialled.send_multipart(wire.encode_pipe("m", "s", "act", 5, data))
    assert w._read_link(accepted)
    assert wait.done and [type(i) for i in w.done] == [Resume]
    np.testing.assert_array_equal(w.state.mailbox[("m", "s", "act", 5)]["data"], data)
    assert w.general == [] and w.refused == []
    # what is not a pipe record takes the general path as before
    dialled.send_multipart(wire.encode("pipe", {"model": "m", "step": "s", "kind": "act",
                                                "mb": 6}, req=9))
    assert w._read_link(accepted) and len(w.general) == 1


def test_a_record_on_a_link_is_read_into_the_mailbox_without_a_message_built(monkeypatch):
    """The link's receive path in one step: the record's fields (its array a view of the
    frame the link filled) go to the mailbox as they are, no ``Message`` around them, and
    the wait for them ends; a stage takes them as it takes a message's."""
    def no_message(*args, **kwargs):
        raise AssertionError("a Message was built for a pipe record off a link")

    w = _Worker()
    dialled, accepted = _linked(w)
    wait = _waiting(w, ("m", "s", "grad", 2))
    data = np.arange(4096, dtype=np.float32).reshape(64, 64)
    monkeypatch.setattr(wire, "Message", no_message)
    dialled.send_multipart(wire.encode_pipe("m", "s", "grad", 2, data))
    dialled.send_multipart(wire.encode_pipe("gone", "s", "grad", 2, data))  # no such model
    assert w._read_link(accepted)
    assert wait.done and wait.outcome == ("m", "s", "grad", 2) and w.refused == []
    assert [type(i) for i in w.done] == [Resume] and list(w.state.mailbox) == [wait.outcome]
    kept = w.state.mailbox[wait.outcome]
    np.testing.assert_array_equal(kept["data"], data)
    assert kept["data"].base is not None and kept["reason"] is None


def test_a_record_cut_short_ends_no_wait_and_the_wait_times_out_as_before():
    """A neighbour that stops mid-array: the stage's look at its links takes nothing and
    never blocks, and its wait ends at the pipe timeout with the error it always had."""
    w = _Worker()
    now = [0.0]
    w.state = WorkerState("w", pipe_timeout=5.0, clock=lambda: now[0])
    w.state.models.add("m")
    dialled, _ = _linked(w)
    job = Job(b"client", wire.Message("train_step"), b"client", "m")
    w.state.jobs.add(job)
    wait = w.state.wait_for_pipe(job, (("m", "s", "act", 5),), "a record")
    stream = link_bytes(wire.encode_pipe("m", "s", "act", 5, np.ones((32, 1024), np.float32)))
    dialled.sock.sendall(stream[:len(stream) // 2])
    for _ in range(3):
        assert not w.links_first() and not wait.done and w.state.mailbox == {}
    now[0] = 5.0
    resume, log = w.state.handle(Tick(now[0]))
    assert resume.wait is wait and isinstance(wait.error, TimeoutError)
    assert str(wait.error) == "worker w waited 5 s for a record"
    assert "its request (train_step from" in log.text
    dialled.sock.sendall(stream[len(stream) // 2:])  # the rest, late: taken, no wait ends
    assert w.links_first() and ("m", "s", "act", 5) in w.state.mailbox


def test_a_malformed_short_record_on_a_link_is_refused_as_decode_refuses_it():
    w = _Worker()
    dialled, accepted = _linked(w)
    head, body = _bytes(wire.encode_pipe("m", "s", "act", 5, np.ones((2, 3), np.float32)))
    bad = head[:6] + bytes([wire.PROTOCOL_VERSION, 9]) + head[8:]  # kind code 9
    dialled.send_multipart([bad, body])
    dialled.send_multipart([head, body[:-4]])  # the array's frame 4 bytes short
    w._read_link(accepted)
    expected = [(IDENTITY, _raised(wire.decode, [bad, body])[1]),
                (IDENTITY, _raised(wire.decode, [head, body[:-4]])[1])]
    assert w.refused == expected and "'kind' must be one of" in expected[0][1]
    assert w.state.mailbox == {} and not accepted.closed
    dialled.send_multipart([head, body])  # the link goes on
    w._read_link(accepted)
    assert ("m", "s", "act", 5) in w.state.mailbox


def test_a_record_for_an_unknown_model_or_a_finished_step_is_dropped():
    w = _Worker()
    dialled, accepted = _linked(w)
    w.state.finish_step("m", "old")
    dialled.send_multipart(wire.encode_pipe("other", "s", "act", 0, np.ones(2, np.float32)))
    dialled.send_multipart(wire.encode_pipe("m", "old", "grad", 0, np.ones(2, np.float32)))
    assert w._read_link(accepted)
    assert w.state.mailbox == {} and w.done == [] and w.refused == []


def test_the_finished_steps_kept_are_the_latest_and_each_is_found_without_a_walk():
    from workers.state import FINISHED_STEPS_KEPT

    state = WorkerState("w")
    state.models.add("m")
    for i in range(FINISHED_STEPS_KEPT + 5):
        state.finish_step("m", f"s{i}")
    assert len(state.finished_steps) == FINISHED_STEPS_KEPT
    late = {"model": "m", "kind": "act", "mb": 0, "data": None}
    state.pipe_arrived({**late, "step": f"s{FINISHED_STEPS_KEPT + 4}"})  # late: dropped
    state.pipe_arrived({**late, "step": "s4"})  # finished too long ago to be known
    assert list(state.mailbox) == [("m", "s4", "act", 0)]
    assert isinstance(state.finished_steps, dict)  # (a look-up is a hash, not a scan)


def test_a_waiting_stage_takes_what_came_on_its_links_before_it_polls():
    w = _Worker()
    dialled, _ = _linked(w)
    assert not w.links_first()  # nothing came
    dialled.send_multipart(wire.encode_pipe("m", "s", "act", 1, np.ones(2, np.float32)))
    w._next_tick = 0.0  # the tick is due: the whole loop comes round first
    assert not w.links_first() and w.state.mailbox == {}
    w._next_tick = float("inf")
    w._outboxes.add(99)  # a link's outbox waits for the poller: likewise
    assert not w.links_first() and w.state.mailbox == {}
    w._outboxes.clear()
    assert w.links_first() and ("m", "s", "act", 1) in w.state.mailbox
    dialled.close()
    assert w.links_first() and w.gone == "the other end closed it"


def test_a_waiting_stage_reads_only_the_links_that_hold_something():
    """links_first asks the kernel once which accepted links hold bytes (the one its hello
    made known included) and reads those alone: a link with nothing costs no read."""
    w = _Worker()
    w.peers = type("Peers", (), {"linked": lambda self, identity: None})()
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    dialled, accepted = Link(a, IDENTITY), Link(b, accepted=True)
    w._polled[accepted.fileno()] = accepted
    dialled.send_multipart([links.hello(IDENTITY)])
    assert w._read_link(accepted) and w.links_in == {IDENTITY: accepted}
    counting = accepted.sock = _Counting(accepted.sock)
    assert not w.links_first() and counting.calls == []  # nothing came: nothing read
    dialled.send_multipart(wire.encode_pipe("m", "s", "act", 1, np.ones(2, np.float32)))
    assert w.links_first() and ("m", "s", "act", 1) in w.state.mailbox
    calls = len(counting.calls)
    assert not w.links_first() and len(counting.calls) == calls
    accepted.sock = counting.real


def test_a_stage_whose_record_came_already_opens_no_wait():
    from workers.steps import StepHandlers

    w = _Worker()
    dialled, _ = _linked(w)
    key, abort = ("m", "s", "grad", 4), ("m", "s", "abort", -1)
    assert not StepHandlers._came_on_links(w, (key, abort))  # not come: the stage waits
    dialled.send_multipart(wire.encode_pipe("m", "s", "grad", 4, np.ones(2, np.float32)))
    assert StepHandlers._came_on_links(w, (key, abort)) and key in w.state.mailbox
    dialled.send_multipart(wire.encode_pipe("m", "s", "act", 5, np.ones(2, np.float32)))
    assert not StepHandlers._came_on_links(w, (("m", "s", "act", 6), abort))  # another's
    assert w.state.waits == {}


def test_an_outbox_that_fills_and_empties_is_known_to_the_worker():
    w = _Worker()

    class Poller:
        def register(self, fd, events):
            pass

        def unregister(self, fd):
            pass

    w.poller = Poller()
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    link = Link(a, IDENTITY)
    w._watch(link)
    big = np.ones(16 << 20, np.uint8)
    link.send_multipart([b"h", big])  # more than the kernel takes at once
    assert w._outboxes == {link.fileno()}
    reader = Link(b, accepted=True)
    while link.outbox:
        reader.read()
        link.flush()
    assert w._outboxes == set()
    w._unwatch(link)


def test_the_prefix_of_two_frames_is_the_general_prefix_and_table():
    assert links._PREFIX_PAIR.pack(2, 5, 9) == struct.pack("<II", 2, 5) + struct.pack("<Q", 9)


def test_an_array_frame_off_a_link_decodes_as_a_bytes_frame_does():
    """A link hands the array's frame over as a fresh uint8 array, which the record's array
    is then a view of: read and refused as the same bytes are."""
    rng = np.random.default_rng(3)
    for dtype in wire.PIPE_DTYPES:
        data = (rng.integers(0, 2, (3, 5)) if dtype == "|b1" else rng.integers(-9, 9, (3, 5)))
        head, body = _bytes(wire.encode_pipe("m", "s", "act", 1, data.astype(dtype)))
        for cut in (len(body), len(body) - 1, 0):
            as_bytes = [head, body[:cut]]
            as_array = [head, np.frombuffer(body[:cut], np.uint8).copy()]
            expected = _raised(wire.decode_pipe, as_bytes)
            assert _raised(wire.decode_pipe, as_array) == expected
            if expected is None:
                got = wire.decode_pipe(as_array)["data"]
                np.testing.assert_array_equal(got, data.astype(dtype))
                assert got.flags.writeable and got.base is not None
    small = wire.Limits(max_array_bytes=8)
    head, body = _bytes(wire.encode_pipe("m", "s", "act", 1, np.ones(4, np.float32)))
    assert _raised(wire.decode_pipe, [head, np.frombuffer(body, np.uint8).copy()],
                   limits=small) == _raised(wire.decode_pipe, [head, body], limits=small)
    assert "exceeds 8" in _raised(wire.decode_pipe, [head, body], limits=small)[1]


# ---- a link's read: prefix, table and header in one read ------------------------------------------

def _whole_head_buffered(link) -> bool:
    have = link._hi - link._lo
    if link._target is not None or have < links._PREFIX.size:
        return False
    count, head = links._PREFIX.unpack_from(link._buf, link._lo)
    return have >= links._PREFIX.size + links._SIZE.size * (count - 1) + head


def test_what_the_buffer_holds_is_read_whole_and_a_large_header_grows_it_for_a_while():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    dialled, accepted = Link(a, IDENTITY), Link(b, accepted=True)
    sent = [[b"x" * (i % 7 + 1)] for i in range(200)]  # small: many to one kernel read
    sent.append([b"h" * 10000, np.arange(50000, dtype=np.uint8), b"", b"t"])  # over a page
    sent.append([b"after", b"\x01" * 3])
    for frames in sent:
        dialled.send_multipart(frames)
    got, reads = [], 0
    while len(got) < len(sent):
        got += accepted.read(at_most=4)
        reads += 1
        assert not _whole_head_buffered(accepted)  # none left where a poll would not see it
    assert [_bytes(f) for f in got] == [_bytes(f) for f in sent]
    assert reads < len(sent) // 4  # (a page holds many of the small ones)
    assert len(accepted._buf) == links._BUFFER or accepted.read() == []
    dialled.send_multipart([b"again"])
    assert accepted.read() == [[b"again"]] and len(accepted._buf) == links._BUFFER


class _Counting:
    """A link's socket that records each read: ("recv", bytes asked) or ("recvmsg", bytes
    asked per buffer)."""

    def __init__(self, real):
        self.real, self.calls = real, []

    def recv_into(self, into, n):
        self.calls.append(("recv", n))
        return self.real.recv_into(into, n)

    def recvmsg_into(self, buffers, *rest):  # (rest: the ancillary buffer a link reads)
        self.calls.append(("recvmsg", [len(b) for b in buffers]))
        return self.real.recvmsg_into(buffers, *rest)


def test_a_pipe_record_takes_two_reads_the_header_with_the_arrays_first_bytes():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    dialled, accepted = Link(a, IDENTITY), Link(b, accepted=True)
    data = np.arange(32 * 1024, dtype=np.float32).reshape(32, 1024)
    dialled.send_multipart(wire.encode_pipe("m", "s", "act", 0, data))
    counting = accepted.sock = _Counting(accepted.sock)
    (frames,) = accepted.read()
    accepted.sock = counting.real
    # the header with the array's first bytes, then the rest of the array together with
    # what came after it (nothing): no third read that finds nothing
    # (until the dialer's hello has come, the accepted end reads with recvmsg: the hello
    # may carry the link's shared-memory arena)
    assert len(counting.calls) == 2 and counting.calls[1][0] == "recvmsg"
    first = counting.calls[0][1]
    assert (first if counting.calls[0][0] == "recv" else first[0]) == links._BUFFER
    assert counting.calls[1][1][1] == links._BUFFER
    np.testing.assert_array_equal(wire.decode_pipe(frames)["data"], data)
    assert accepted.read() == []


def test_what_comes_after_an_array_is_read_with_it_and_taken_in_the_same_read():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    dialled, accepted = Link(a, IDENTITY), Link(b, accepted=True)
    arrays = [np.full((32, 1024), i, np.float32) for i in range(3)]
    for i, x in enumerate(arrays):
        dialled.send_multipart(wire.encode_pipe("m", "s", "act", i, x))
    dialled.send_multipart([b"small"])
    counting = accepted.sock = _Counting(accepted.sock)
    got = accepted.read()
    accepted.sock = counting.real
    assert len(got) == 4 and got[3] == [b"small"]
    for i, frames in enumerate(got[:3]):
        np.testing.assert_array_equal(wire.decode_pipe(frames)["data"], arrays[i])
    # each array's rest brought the next record's header and first bytes with it
    assert [kind for kind, _ in counting.calls].count("recv") <= 2
    assert accepted.read() == []


def test_a_record_in_pieces_and_a_sender_that_stops_mid_array():
    """The array's rest comes in pieces (each read takes what came, never waits); a sender
    that stops mid-array leaves the read with nothing, and its close ends the link."""
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    accepted = Link(b, accepted=True)
    data = np.arange(32 * 1024, dtype=np.float32).reshape(32, 1024)
    record = link_bytes(wire.encode_pipe("m", "s", "grad", 2, data))
    stream = record + link_bytes([b"next"])
    cuts = [0, 50, 5000, 70000, len(record) - 1, len(record) + 3, len(stream)]
    got = []
    for lo, hi in itertools.pairwise(cuts):
        a.sendall(stream[lo:hi])
        got += accepted.read()
        assert len(got) == (hi >= len(record)) + (hi == len(stream))
    assert wire.decode_pipe(got[0])["mb"] == 2 and got[1] == [b"next"]
    np.testing.assert_array_equal(wire.decode_pipe(got[0])["data"], data)
    a.sendall(stream[:70000])  # another record, cut short
    assert accepted.read() == [] and accepted.read() == []  # no hang: nothing yet
    a.close()
    with pytest.raises(LinkClosed, match="the other end closed it"):
        accepted.read()
    assert accepted.closed
