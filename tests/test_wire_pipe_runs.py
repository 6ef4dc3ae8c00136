"""A run of pipe records whose headers differ in the micro-batch number alone (a stage's
sends and receives, disthook/wire.py): the second and later are written and read without
the whole header's work, to the same bytes and fields as the whole path gives, and every
check still holds for a record that differs from the last in anything else."""
import numpy as np
import pytest

from disthook import wire
from disthook.wire import WireError


def _forget_runs():
    for kept in ("_pipe_sent", "_pipe_read"):
        getattr(wire, kept, {}).clear()


@pytest.fixture(autouse=True)
def _fresh_runs():
    _forget_runs()
    yield
    _forget_runs()


def _whole(model, step, kind, mb, data, reason=None):
    """The frames the whole path writes (nothing kept from an earlier record)."""
    sent = getattr(wire, "_pipe_sent", {})
    kept = dict(sent)
    sent.clear()
    try:
        return [bytes(f) for f in wire.encode_pipe(model, step, kind, mb, data, reason)]
    finally:
        sent.clear()
        sent.update(kept)


class _Counted:
    """``wire._PIPE_HEAD`` counting its unpacks (the whole header's read)."""

    def __init__(self, struct):
        self.struct, self.unpacks, self.packs = struct, 0, 0

    def __getattr__(self, name):
        return getattr(self.struct, name)

    def unpack_from(self, *args):
        self.unpacks += 1
        return self.struct.unpack_from(*args)

    def pack(self, *args):
        self.packs += 1
        return self.struct.pack(*args)


def _received(frames):
    """The frames as a link gives them: the header's bytes, the array in a fresh buffer."""
    head = bytes(frames[0])
    return [head] + [np.frombuffer(bytes(f), np.uint8).copy() for f in frames[1:]]


def test_a_run_of_records_is_read_after_one_whole_header(monkeypatch):
    counted = _Counted(wire._PIPE_HEAD)
    monkeypatch.setattr(wire, "_PIPE_HEAD", counted)
    model, step = "m", "s1"
    data = np.arange(32 * 8, dtype=np.float32).reshape(32, 8)
    for mb in range(6):
        frames = _received(wire.encode_pipe(model, step, "act", mb, data + mb))
        got = wire.pipe_fields(frames[0], frames, wire.DEFAULT_LIMITS)
        assert {k: v for k, v in got.items() if k != "data"} == {
            "model": "m", "step": "s1", "kind": "act", "mb": mb, "reason": None}
        assert list(got) == ["model", "step", "kind", "mb", "data", "reason"]
        assert np.array_equal(got["data"], data + mb) and got["data"].dtype == np.float32
        assert got["data"].base is not None  # a view of the received buffer, not a copy
    assert counted.unpacks == 1  # the first record's; the others matched it but for mb


def test_a_run_of_records_is_written_after_one_whole_header(monkeypatch):
    counted = _Counted(wire._PIPE_HEAD)
    monkeypatch.setattr(wire, "_PIPE_HEAD", counted)
    data = np.ones((32, 8), np.float32)
    for mb in range(6):
        wire.encode_pipe("m", "s1", "act", mb, data)
    assert counted.packs == 1


@pytest.mark.parametrize("mb", [0, 5, -1, (1 << 63) - 1, -(1 << 63)])
def test_a_run_of_records_is_written_as_the_whole_path_writes_it(mb):
    data = np.ones((4, 3), np.float32)
    wire.encode_pipe("m", "s", "grad", 1, data)  # the run's first
    assert [bytes(f) for f in wire.encode_pipe("m", "s", "grad", mb, data * 2)] == _whole(
        "m", "s", "grad", mb, data * 2)


@pytest.mark.parametrize("other", [
    lambda d: d.astype(np.float64),  # another dtype
    lambda d: d.reshape(3, 4),  # another shape
    lambda d: d.T,  # not C-contiguous: copied as the whole path copies it
    lambda d: d.astype(">f4"),  # another byte order
    lambda d: d[:0],  # empty
    lambda d: d.astype(np.bool_),
    lambda d: d.astype(np.complex64),
])
def test_a_record_unlike_the_last_is_written_as_the_whole_path_writes_it(other):
    data = np.arange(12, dtype=np.float32).reshape(4, 3)
    wire.encode_pipe("m", "s", "act", 0, data)
    changed = other(data)
    assert [bytes(f) for f in wire.encode_pipe("m", "s", "act", 1, changed)] == _whole(
        "m", "s", "act", 1, changed)
    # and the next record like the first is written as the whole path writes it again
    assert [bytes(f) for f in wire.encode_pipe("m", "s", "act", 2, data)] == _whole(
        "m", "s", "act", 2, data)


def test_other_names_a_reason_or_no_array_are_written_as_the_whole_path_writes_them():
    data = np.ones((2, 2), np.float32)
    wire.encode_pipe("m", "s", "act", 0, data)
    for args in [("m2", "s", "act", 1, data), ("m", "s2", "act", 1, data),
                 ("m", "s", "act", 1, data, "why"), ("m", "s", "act", 1, None),
                 ("m", "s", "abort", -1, None, "it failed")]:
        assert [bytes(f) for f in wire.encode_pipe(*args)] == _whole(*args)


def _outcome(write):
    try:
        return [bytes(f) for f in write()]
    except Exception as exc:  # noqa: BLE001 (compared: the same type and words)
        return (type(exc), str(exc))


@pytest.mark.parametrize("mb", [1 << 63, -(1 << 63) - 1, 1.0, True, "1"])
def test_a_micro_batch_number_the_short_form_cannot_hold_goes_as_after_no_run(mb):
    data = np.ones((2, 2), np.float32)
    wire.encode_pipe("m", "s", "act", 0, data)
    after_run = _outcome(lambda: wire.encode_pipe("m", "s", "act", mb, data))
    _forget_runs()
    assert after_run == _outcome(lambda: wire.encode_pipe("m", "s", "act", mb, data))


def _refused(frames, limits=wire.DEFAULT_LIMITS):
    with pytest.raises(WireError):
        wire.pipe_fields(bytes(frames[0]), frames, limits)


def test_every_check_holds_for_a_record_that_follows_a_run():
    data = np.ones((4, 4), np.float32)
    good = _received(wire.encode_pipe("m", "s", "act", 0, data))
    wire.pipe_fields(good[0], good, wire.DEFAULT_LIMITS)  # the run's header, kept
    head = bytearray(good[0])
    _refused([bytes(head)])  # no array frame though the header says one
    _refused([bytes(head), good[1], good[1]])  # a frame too many
    _refused([bytes(head), good[1][:-4]])  # an array of the wrong size
    _refused([bytes(head), np.frombuffer(bytes(good[1][:-4]), np.uint8).copy()])
    for at, value in [(6, wire.PROTOCOL_VERSION + 1), (7, 200), (8, 0x80), (9, 250),
                      (10, 9)]:  # version, kind, flags, dtype, rank
        bad = bytearray(head)
        bad[at] = value
        _refused([bytes(bad), good[1]])
    bad = bytearray(head)
    bad[-1] = 0xFF  # the step's name is not UTF-8 any more
    _refused([bytes(bad), good[1]])
    _refused([bytes(head) + b"x", good[1]])  # a byte past what the header describes
    small = wire.Limits(max_array_bytes=16)  # other caps: checked again
    _refused(good, small)
    # and the run's own records still read
    again = _received(wire.encode_pipe("m", "s", "act", 3, data))
    assert wire.pipe_fields(again[0], again, wire.DEFAULT_LIMITS)["mb"] == 3


def test_a_kept_header_never_keeps_the_array_it_came_with():
    import gc
    import weakref

    data = np.ones((8, 8), np.float32)
    frames = _received(wire.encode_pipe("m", "s", "act", 0, data))
    got = wire.pipe_fields(frames[0], frames, wire.DEFAULT_LIMITS)
    gone = weakref.ref(frames[1])
    del frames, got
    gc.collect()
    assert gone() is None  # (a link's arena block is freed when its array goes)
