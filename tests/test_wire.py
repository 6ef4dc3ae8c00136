"""The wire codec: round trips, zero copy, and rejection of every kind of malformed message."""
import random

import msgpack
import numpy as np
import pytest
import zmq

from disthook import wire
from disthook.wire import Limits, WireError, decode, encode

ALL_DTYPES = [np.float16, np.float32, np.float64, np.int8, np.int16, np.int32, np.int64,
              np.uint8, np.bool_]


def roundtrip(msg_type, fields, **kw):
    frames = encode(msg_type, fields, **kw)
    # what a zmq receiver holds: plain bytes per frame
    return decode([bytes(f) for f in frames])


# ---- round trips ------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", [(), (0,), (3,), (2, 3), (1, 0, 4), (2, 1, 2, 1, 2)])
def test_array_roundtrip_every_dtype_and_shape(dtype, shape):
    rng = np.random.default_rng(0)
    a = np.asarray(rng.standard_normal(shape) * 10).astype(dtype)
    msg = roundtrip("hook_reply", {"hook": 3, "result": a})
    got = msg["result"]
    assert got.dtype == a.dtype and got.shape == a.shape
    np.testing.assert_array_equal(got, a)


def test_header_fields_roundtrip():
    msg = roundtrip("hook_event", {"hook": 7, "kind": "forward", "path": "net.2",
                                   "args": [None, True, 1.5, -3, "s", b"\x00\xff", {"k": [1]}]},
                    req=42, ctx="ctx-1")
    assert (msg.type, msg.req, msg.ctx) == ("hook_event", 42, "ctx-1")
    assert msg["args"] == [None, True, 1.5, -3, "s", b"\x00\xff", {"k": [1]}]
    assert msg.get("missing", "dflt") == "dflt"


def test_nested_arrays_keep_their_places():
    a, b, c = np.arange(3.0), np.ones((2, 2), np.float32), np.array([True, False])
    msg = roundtrip("forward", {"model": "m", "stage": 1, "inputs": [a, {"x": b, "y": [c, 5]}],
                                "grad_enabled": True, "reply_to": "c1"})
    got_a, rest = msg["inputs"]
    np.testing.assert_array_equal(got_a, a)
    np.testing.assert_array_equal(rest["x"], b)
    np.testing.assert_array_equal(rest["y"][0], c)
    assert rest["y"][1] == 5


def test_numpy_scalars_travel_as_numbers():
    msg = roundtrip("ok", {"result": [np.float32(1.5), np.int64(3), np.bool_(True)]})
    assert msg["result"] == [1.5, 3, True]
    assert [type(v) for v in msg["result"]] == [float, int, bool]


def test_tuples_arrive_as_lists():
    assert roundtrip("ok", {"result": (1, (2, 3))})["result"] == [1, [2, 3]]


def test_non_contiguous_and_big_endian_arrays_are_sent_correctly():
    base = np.arange(24, dtype=np.float64).reshape(4, 6)
    view = base[::2, 1::2].T
    big = np.arange(5, dtype=">i4")
    got = roundtrip("ok", {"result": [view, big]})["result"]
    np.testing.assert_array_equal(got[0], view)
    np.testing.assert_array_equal(got[1], big)
    assert got[1].dtype == np.dtype("<i4")


def test_contiguous_arrays_are_not_copied_on_send():
    a = np.arange(1000, dtype=np.float32)
    frames = encode("ok", {"result": a})
    assert np.shares_memory(np.frombuffer(frames[1], np.float32), a)


def test_received_arrays_are_read_only_views_of_the_frames():
    frames = [bytes(f) for f in encode("ok", {"result": np.arange(4.0)})]
    got = decode(frames)["result"]
    assert not got.flags.writeable
    with pytest.raises(ValueError):
        got[0] = 1.0


def test_roundtrip_over_a_zmq_socket_without_copies():
    ctx = zmq.Context.instance()
    a_sock, b_sock = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    try:
        a_sock.bind("inproc://wire-test")
        b_sock.connect("inproc://wire-test")
        arr = np.random.default_rng(1).standard_normal((64, 128)).astype(np.float32)
        a_sock.send_multipart(encode("backward", {"model": "m", "stage": 0, "grads": [arr, None],
                                                  "retain_graph": False, "reply_to": "c1"},
                                     ctx="c"), copy=False)
        assert b_sock.poll(5000)
        msg = decode(b_sock.recv_multipart(copy=False))
        np.testing.assert_array_equal(msg["grads"][0], arr)
        assert msg["grads"][1] is None and msg.ctx == "c"
    finally:
        a_sock.close(linger=0)
        b_sock.close(linger=0)


# ---- what encode refuses ------------------------------------------------------------------------

def test_encode_unknown_type():
    with pytest.raises(WireError, match="unknown message type 'nope'"):
        encode("nope", {})


def test_encode_missing_and_unexpected_fields():
    with pytest.raises(WireError, match="'hook_reply' message: field 'hook' \\(int\\) is missing"):
        encode("hook_reply", {"result": 1})
    with pytest.raises(WireError, match=r"unexpected field\(s\) \['extra'\]"):
        encode("hook_reply", {"hook": 1, "extra": 2})


def test_encode_wrong_kind_names_field_and_type():
    with pytest.raises(WireError, match="field 'hook' must be int, got str"):
        encode("hook_reply", {"hook": "1"})
    with pytest.raises(WireError, match="field 'hook' must be int, got bool"):
        encode("hook_reply", {"hook": True})


def test_encode_unsendable_values():
    with pytest.raises(WireError, match="cannot send a value of type object"):
        encode("ok", {"result": object()})
    with pytest.raises(WireError, match="map keys must be strings, got int"):
        encode("ok", {"result": {1: 2}})
    with pytest.raises(WireError, match="dtype complex128 cannot be sent"):
        encode("ok", {"result": np.zeros(2, np.complex128)})
    with pytest.raises(WireError, match="dtype object cannot be sent"):
        encode("ok", {"result": np.array([None, 1], dtype=object)})


def test_every_schema_kind_is_known():
    for schema in wire.SCHEMAS.values():
        for kind in schema.values():
            assert kind.rstrip("?") in wire._KINDS


# ---- what decode refuses ------------------------------------------------------------------------

def good_frames():
    return [bytes(f) for f in encode("hook_reply", {"hook": 1, "result": np.arange(3.0)})]


def header(frames):
    return msgpack.unpackb(frames[0], raw=False, ext_hook=msgpack.ExtType)


def repack(h):
    return msgpack.packb(h, use_bin_type=True)


def test_decode_empty():
    with pytest.raises(WireError, match="empty message"):
        decode([])


def test_decode_garbage_header():
    with pytest.raises(WireError, match="malformed header"):
        decode([b"\xc1\xc1\xc1"])
    with pytest.raises(WireError, match="header must be a map, got int"):
        decode([msgpack.packb(5)])


def test_decode_trailing_bytes_in_header():
    frames = good_frames()
    with pytest.raises(WireError, match="1 trailing bytes"):
        decode([frames[0] + b"\x00"] + frames[1:])


def test_decode_header_keys():
    h = header(good_frames())
    del h["r"]
    h["zz"] = 1
    with pytest.raises(WireError, match=r"missing \['r'\], unexpected \['zz'\]"):
        decode([repack(h), good_frames()[1]])


def test_decode_wrong_version():
    h = header(good_frames())
    h["v"] = 99
    with pytest.raises(WireError, match="protocol version 99, expected 1"):
        decode([repack(h), good_frames()[1]])


@pytest.mark.parametrize("key,value,text", [
    ("t", 5, "message type must be a string, got int"),
    ("r", "x", "request id must be an int, got str"),
    ("c", 5, "context id must be a string or None, got int"),
    ("f", [1], "fields must be a map, got list"),
    ("a", {}, "array table must be a list, got dict"),
])
def test_decode_header_value_types(key, value, text):
    h = header(good_frames())
    h[key] = value
    with pytest.raises(WireError, match=text):
        decode([repack(h), good_frames()[1]])


def test_decode_frame_count_mismatch():
    frames = good_frames()
    with pytest.raises(WireError, match=r"describes 1 array\(s\) but 0 array frame\(s\) came"):
        decode(frames[:1])
    with pytest.raises(WireError, match=r"describes 1 array\(s\) but 2 array frame\(s\) came"):
        decode(frames + [b""])


def test_decode_frame_size_mismatch_names_dtype_and_shape():
    frames = good_frames()
    with pytest.raises(WireError, match=r"frame has 23 bytes, dtype <f8 and shape \(3,\) need 24"):
        decode([frames[0], frames[1][:-1]])


@pytest.mark.parametrize("entry,text", [
    (["<c16", [3]], "dtype '<c16' is not allowed"),
    (["|O", [3]], "dtype '|O' is not allowed"),
    (["<f8", [-3]], "shape must be a list"),
    (["<f8", 3], "shape must be a list"),
    (["<f8", [1] * 9], "at most 8"),
    (["<f8"], "descriptor must be"),
])
def test_decode_bad_array_descriptor(entry, text):
    h = header(good_frames())
    h["a"] = [entry]
    with pytest.raises(WireError, match=text):
        decode([repack(h), good_frames()[1]])


def test_decode_limits():
    frames = good_frames()
    with pytest.raises(WireError, match="header of .* bytes exceeds 10"):
        decode(frames, limits=Limits(max_header_bytes=10))
    with pytest.raises(WireError, match="too many frames: 2 > 1"):
        decode(frames, limits=Limits(max_frames=1))
    with pytest.raises(WireError, match="array 0: 24 bytes exceeds 16"):
        decode(frames, limits=Limits(max_array_bytes=16))
    with pytest.raises(WireError, match="arrays exceed 16 bytes in all"):
        decode(frames, limits=Limits(max_total_bytes=16))


def test_decode_huge_declared_shape_is_refused_before_allocation():
    h = header(good_frames())
    h["a"] = [["<f8", [1 << 40, 1 << 40]]]
    with pytest.raises(WireError, match="exceeds"):
        decode([repack(h), b""])


def test_decode_array_references():
    frames = good_frames()
    h = header(frames)
    ref = h["f"]["result"]
    h["f"]["result"] = [ref, ref]
    with pytest.raises(WireError, match="array 0 referenced twice"):
        decode([repack(h), frames[1]])
    h["f"]["result"] = msgpack.ExtType(wire.ARRAY_EXT, (5).to_bytes(4, "little"))
    with pytest.raises(WireError, match=r"array reference 5 out of range \(message has 1"):
        decode([repack(h), frames[1]])
    h["f"]["result"] = None
    with pytest.raises(WireError, match=r"1 array frame\(s\) not referenced"):
        decode([repack(h), frames[1]])


def test_decode_unknown_extension():
    h = header(good_frames())
    h["f"]["result"] = msgpack.ExtType(9, b"x")
    with pytest.raises(WireError, match="unknown msgpack extension 9 of 1 bytes"):
        decode([repack(h), good_frames()[1]])


def test_decode_bool_frame_with_other_bytes():
    frames = [bytes(f) for f in encode("ok", {"result": np.array([True, False])})]
    with pytest.raises(WireError, match="bool array holds bytes other than 0 and 1"):
        decode([frames[0], b"\x01\x07"])


def test_decode_validates_schema():
    h = header(good_frames())
    h["f"]["hook"] = "one"
    with pytest.raises(WireError, match="field 'hook' must be int, got str"):
        decode([repack(h), good_frames()[1]])
    h["t"] = "launch_missiles"
    with pytest.raises(WireError, match="unknown message type 'launch_missiles'"):
        decode([repack(h), good_frames()[1]])


def test_decode_non_string_map_keys_are_refused():
    h = header(good_frames())
    h["f"] = {1: 2}
    with pytest.raises(WireError, match="malformed header"):
        decode([repack(h), good_frames()[1]])


def test_decode_deep_nesting_is_refused_not_a_crash():
    deep = b"\x91" * 100_000 + b"\xc0"  # 100k nested one-element lists
    h = repack({"v": 1, "t": "ok", "r": 0, "c": None, "a": []})
    # splice the deep value in as the fields map's "result"
    fields = b"\x81\xa6result" + deep
    bad = b"\x86" + h[1:] + b"\xa1f" + fields
    with pytest.raises(WireError):
        decode([bad])


# ---- fuzz: nothing but WireError ever comes out ---------------------------------------------

def test_random_mutations_raise_only_wire_error():
    rng = random.Random(1234)
    base = [bytes(f) for f in encode(
        "forward", {"model": "m", "stage": 2, "inputs": [np.arange(6, dtype=np.float32).reshape(2, 3),
                                           {"k": np.array([True])}], "grad_enabled": False,
                    "reply_to": "c1"},
        req=9, ctx="abc")]
    outcomes = {"ok": 0, "rejected": 0}
    for _ in range(3000):
        frames = [bytearray(f) for f in base]
        for _ in range(rng.randint(1, 4)):
            which = rng.randrange(len(frames))
            f = frames[which]
            op = rng.random()
            if op < 0.5 and f:
                f[rng.randrange(len(f))] = rng.randrange(256)
            elif op < 0.7 and f:
                del f[rng.randrange(len(f)):]
            elif op < 0.85:
                f[rng.randrange(len(f) + 1):0] = bytes(rng.randrange(256)
                                                       for _ in range(rng.randint(1, 8)))
            elif len(frames) > 1:
                frames.pop(rng.randrange(len(frames)))
        try:
            decode([bytes(f) for f in frames])
            outcomes["ok"] += 1
        except WireError:
            outcomes["rejected"] += 1
    assert outcomes["rejected"] > 1000  # the fuzzer does reach the checks


def test_random_bytes_raise_only_wire_error():
    rng = random.Random(99)
    for _ in range(2000):
        n = rng.randint(0, 3)
        frames = [bytes(rng.randrange(256) for _ in range(rng.randint(0, 64)))
                  for _ in range(n + 1)]
        try:
            decode(frames)
        except WireError:
            pass


# ---- the order of the header's entries ----------------------------------------------------------

def test_encode_puts_the_array_table_before_the_fields():
    keys = list(header(good_frames()))
    assert keys.index("a") < keys.index("f")


def test_decode_takes_the_table_after_the_fields_too():
    # msgpack maps have no order: a sender that writes the fields first is understood as well
    a, b = np.arange(3.0), np.ones((2, 2), np.float32)
    frames = [bytes(f) for f in encode("hook_reply", {"hook": 1, "result": [a, {"b": b}]})]
    h = header(frames)
    reordered = {k: h[k] for k in ("v", "t", "r", "c", "f", "a")}
    msg = decode([repack(reordered)] + frames[1:])
    np.testing.assert_array_equal(msg["result"][0], a)
    np.testing.assert_array_equal(msg["result"][1]["b"], b)
    ref = h["f"]["result"][0]
    reordered["f"]["result"] = [ref, ref]
    with pytest.raises(WireError, match="array 0 referenced twice"):
        decode([repack(reordered)] + frames[1:])


def test_decode_refuses_a_reference_outside_the_fields_in_either_order():
    frames = good_frames()
    h = header(frames)
    ref = h["f"]["result"]
    h["f"]["result"] = None
    h["c"] = ref  # before the table
    with pytest.raises(WireError, match="outside the message fields|not referenced"):
        decode([repack(h), frames[1]])
    h["c"] = None
    h["f"]["result"] = ref
    h["a"] = [["<f8", [3]], ref]  # inside the table itself
    with pytest.raises(WireError, match="descriptor must be"):
        decode([repack(h), frames[1], b""])


def test_decode_refuses_a_header_key_twice():
    frames = good_frames()
    body = repack(header(frames))
    # a map of 7 entries whose last repeats "a" with another table
    twice = b"\x87" + body[1:] + msgpack.packb("a") + msgpack.packb([["<f4", [6]]])
    with pytest.raises(WireError, match="header key 'a' appears twice"):
        decode([twice, frames[1]])


def test_encode_walks_handler_results_for_their_keys_but_not_activations():
    # a handler's result (kind any) is checked key by key on the sending side ...
    with pytest.raises(WireError, match="map keys must be strings, got tuple"):
        encode("ok", {"result": {"fine": [{(1, 2): 3}]}})
    # ... and so is a map field; both keep arrays anywhere inside
    msg = roundtrip("ok", {"result": {"x": [np.ones(2), {"y": np.zeros(1)}]}})
    assert msg["result"]["x"][1]["y"].shape == (1,)
    msg = roundtrip("set_state", {"model": "m", "state": {"w": np.ones(3)}})
    assert msg["state"]["w"].tolist() == [1.0, 1.0, 1.0]
