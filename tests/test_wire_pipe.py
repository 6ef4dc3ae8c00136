"""The pipe record's short form (disthook/wire.py): an exact inverse of its encode, the same
Message as the general form, and every malformed short header refused with a WireError."""
import struct

import numpy as np
import pytest

from disthook import wire
from disthook.wire import WireError, decode, decode_all, encode

ALL_DTYPES = sorted(wire.DTYPES)


def _general(fields):
    """The frames of a pipe record in the general (msgpack) form."""
    return encode("pipe", fields, req=1)  # a request id: the short form does not carry one


def _bytes(frames):
    return [bytes(f) for f in frames]


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("shape", [(), (0,), (5,), (2, 3), (1, 0, 4), (2, 1, 2, 1, 2)])
def test_a_pipe_array_round_trips_in_the_short_form(dtype, shape):
    rng = np.random.default_rng(0)
    data = np.asarray(rng.standard_normal(shape) * 10).astype(dtype)
    fields = {"model": "m-ü", "step": "s1", "kind": "act", "mb": 7, "data": data,
              "reason": None}
    frames = encode("pipe", fields)
    assert bytes(frames[0]).startswith(wire.PIPE_MAGIC) and len(frames) == 2
    msg = decode(_bytes(frames))
    assert (msg.type, msg.req, msg.ctx) == ("pipe", 0, None)
    got = msg["data"]
    assert got.dtype == data.dtype and got.shape == data.shape
    assert np.array_equal(got, data)
    assert {k: v for k, v in msg.fields.items() if k != "data"} == {
        "model": "m-ü", "step": "s1", "kind": "act", "mb": 7, "reason": None}


@pytest.mark.parametrize("fields", [
    {"model": "m", "step": "s", "kind": "abort", "mb": -1, "reason": "stage 1 failed: é"},
    {"model": "m", "step": "s", "kind": "abort", "mb": -1, "reason": ""},
    {"model": "", "step": "", "kind": "grad", "mb": (1 << 63) - 1, "data": None},
    {"model": "m", "step": "s", "kind": "value", "mb": -(1 << 63)},
])
def test_records_without_an_array_decode_as_the_general_form_does(fields):
    short = decode(_bytes(encode("pipe", fields)))
    general = decode(_bytes(_general(fields)))
    assert short.fields == {**general.fields, "data": general.get("data"),
                            "reason": general.get("reason")}
    assert bytes(encode("pipe", fields)[0]).startswith(wire.PIPE_MAGIC)


def test_decode_all_and_a_batch_take_the_short_form_too():
    a = {"model": "m", "step": "s", "kind": "grad", "mb": 2, "data": np.ones(3, np.float32)}
    b = {"model": "m", "step": "s", "kind": "abort", "mb": -1, "reason": "r"}
    (one,) = decode_all(_bytes(encode("pipe", a)))
    assert one["data"].tolist() == [1.0, 1.0, 1.0]
    both = decode_all(_bytes(wire.encode_batch([encode("pipe", a), encode("pipe", b)])))
    assert [m["kind"] for m in both] == ["grad", "abort"]


def test_the_array_is_sent_from_its_buffer_and_received_as_a_view():
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    frames = encode("pipe", {"model": "m", "step": "s", "kind": "act", "mb": 0, "data": data})
    assert np.shares_memory(np.frombuffer(frames[1], np.float32), data)  # not copied
    received = bytearray(frames[1])  # a writable frame, as pyzmq's are
    msg = decode([bytes(frames[0]), received])
    assert np.shares_memory(msg["data"], np.frombuffer(received, np.float32))


def test_what_the_short_form_cannot_hold_goes_in_the_general_form():
    big = {"model": "m", "step": "s", "kind": "act", "mb": 1 << 63}
    frames = encode("pipe", big)
    assert not bytes(frames[0]).startswith(wire.PIPE_MAGIC)
    assert decode(_bytes(frames))["mb"] == 1 << 63
    # a request id or a context: the general form
    assert not bytes(encode("pipe", {**big, "mb": 1}, ctx="c")[0]).startswith(wire.PIPE_MAGIC)


def test_a_non_contiguous_or_big_endian_array_arrives_as_it_was():
    data = np.arange(12, dtype=">f4").reshape(3, 4)[:, ::2]
    msg = decode(_bytes(encode("pipe", {"model": "m", "step": "s", "kind": "act", "mb": 0,
                                        "data": data})))
    assert msg["data"].dtype == np.dtype("<f4") and np.array_equal(msg["data"], data)


def test_an_unsendable_dtype_is_refused_at_the_sender():
    with pytest.raises(WireError, match="dtype uint16 cannot be sent"):
        encode("pipe", {"model": "m", "step": "s", "kind": "act", "mb": 0,
                        "data": np.zeros(2, np.uint16)})


# ---- malformed short headers: a WireError, never another exception -----------------------------

def _head(version=wire.PROTOCOL_VERSION, kind=1, flags=1, dtype=1, rank=2, mb=0,
          model=b"m", step=b"s", reason=b"", shape=(2, 3), n_model=None):
    fixed = struct.pack("<6sBBBBBqHHI", wire.PIPE_MAGIC, version, kind, flags, dtype, rank, mb,
                        len(model) if n_model is None else n_model, len(step), len(reason))
    return fixed + struct.pack(f"<{len(shape)}Q", *shape) + model + step + reason


GOOD = [_head(), bytes(24)]  # a (2, 3) float32 array


def test_the_helper_makes_a_valid_record():
    assert decode(GOOD)["data"].shape == (2, 3)


@pytest.mark.parametrize("frames,text", [
    ([wire.PIPE_MAGIC + b"\x09"], "pipe header of 7 bytes: expected at least"),
    ([_head(version=3), bytes(24)], "protocol version 3, expected"),
    ([_head(kind=9), bytes(24)], r"field 'kind' must be one of \['abort', 'act'"),
    ([_head(flags=5), bytes(24)], "unknown flags 0x5"),
    ([_head(flags=0, dtype=0, rank=0, shape=())], None),  # valid: no array
    ([_head(flags=0, rank=2)], "describes an array but says none follows"),
    ([_head(dtype=200), bytes(24)], "dtype code 200 is not allowed"),
    ([_head(rank=9, shape=(1,) * 9), bytes(4)], "at most 8"),
    ([_head(n_model=5), bytes(24)], "does not hold what it describes"),
    ([_head() + b"x", bytes(24)], "does not hold what it describes"),
    ([_head()], "pipe message of 1 frames: its header says 2"),
    ([_head(), bytes(24), b""], "pipe message of 3 frames: its header says 2"),
    ([_head(), bytes(20)], "frame has 20 bytes"),
    ([_head(model=b"\xff\xfe"), bytes(24)], "a name is not UTF-8"),
    ([_head(reason=b"r"), bytes(24)], "reason bytes without a reason"),
    ([_head(dtype=wire.PIPE_DTYPES.index("|b1"), rank=1, shape=(2,)), b"\x00\x02"],
     "bool array holds bytes other than 0 and 1"),
    ([_head(shape=(1 << 40, 1 << 40)), b""], "exceeds"),
    ([_head(shape=(1 << 63, 1)), b""], "too large"),
])
def test_a_malformed_short_header_is_refused(frames, text):
    if text is None:
        assert decode(frames)["data"] is None
        return
    with pytest.raises(WireError, match=text):
        decode(frames)
    with pytest.raises(WireError, match=text):
        decode_all(frames)


def test_random_short_headers_never_raise_anything_but_wire_error():
    rng = np.random.default_rng(1)
    base = _head()
    for _ in range(3000):
        head = bytearray(base)
        for _ in range(int(rng.integers(1, 4))):
            head[int(rng.integers(6, len(head)))] = int(rng.integers(0, 256))
        cut = int(rng.integers(6, len(head) + 1))
        frames = [bytes(head[:cut]), bytes(int(rng.integers(0, 40)))][:int(rng.integers(1, 3))]
        try:
            decode(frames)
        except WireError:
            pass
