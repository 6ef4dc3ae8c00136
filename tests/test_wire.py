"""The wire codec: round trips, zero copy, and rejection of every kind of malformed message."""
import random
import struct

import msgpack
import numpy as np
import pytest
import zmq

from disthook import wire
from disthook.wire import Limits, WireError, decode, encode

ALL_DTYPES = [np.float16, np.float32, np.float64, np.int8, np.int16, np.int32, np.int64,
              np.uint8, np.bool_, np.complex64, np.complex128]


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
    msg = roundtrip("ok", {"result": a})
    got = msg["result"]
    assert got.dtype == a.dtype and got.shape == a.shape
    np.testing.assert_array_equal(got, a)


def test_header_fields_roundtrip():
    msg = roundtrip("ok", {"result": [None, True, 1.5, -3, "s", b"\x00\xff", {"k": [1]}]},
                    req=42, ctx="ctx-1")
    assert (msg.type, msg.req, msg.ctx) == ("ok", 42, "ctx-1")
    assert msg["result"] == [None, True, 1.5, -3, "s", b"\x00\xff", {"k": [1]}]
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
    with pytest.raises(WireError, match="dtype uint16 cannot be sent"):
        encode("ok", {"result": np.zeros(2, np.uint16)})
    with pytest.raises(WireError, match="dtype object cannot be sent"):
        encode("ok", {"result": np.array([None, 1], dtype=object)})


def test_a_table_of_plain_rows_is_sent_as_it_is_and_anything_else_in_it_still_walked(
        monkeypatch):
    """A training step's reply carries its timeline, a row of plain values per action:
    copied value by value before it was packed (about 100 us of a worker's CPU a step);
    a table whose rows hold only plain values goes to msgpack as it is."""
    rows = [["forward", i, 1.5e-3, 10.25 + i, 10.5 + i] for i in range(200)]
    calls = []
    real = wire._extract
    monkeypatch.setattr(wire, "_extract", lambda *a: calls.append(1) or real(*a))
    msg = roundtrip("ok", {"result": {"timeline": rows, "flat": [1, "a", None, 2.5, b"x"]}})
    assert msg["result"] == {"timeline": rows, "flat": [1, "a", None, 2.5, b"x"]}
    assert len(calls) < 5, len(calls)
    # an array, a numpy scalar, a map or a subclass anywhere in a row: walked as before
    msg = roundtrip("ok", {"result": [["a", np.float64(2.5)], (1, np.ones(2)), [True, {"k": 1}]]})
    r = msg["result"]
    assert r[0] == ["a", 2.5] and type(r[0][1]) is float and r[1][1].tolist() == [1.0, 1.0]
    assert r[2] == [True, {"k": 1}]
    with pytest.raises(WireError, match="map keys must be strings, got int"):
        encode("ok", {"result": [[1, 2], [3, {4: 5}]]})
    with pytest.raises(WireError, match="cannot send a value of type object"):
        encode("ok", {"result": [[1, 2], [3, object()]]})


def test_every_schema_kind_is_known():
    for schema in [*wire.SCHEMAS.values(), *wire.RECORDS.values()]:
        for kind in schema.values():
            assert wire._known_kind(kind.rstrip("?")), kind


# ---- what decode refuses ------------------------------------------------------------------------

def good_frames():
    return [bytes(f) for f in encode("ok", {"result": np.arange(3.0)})]


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
    with pytest.raises(WireError, match=f"protocol version 99, expected {wire.PROTOCOL_VERSION}"):
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
    (["<u2", [3]], "dtype '<u2' is not allowed"),
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
    reply = {"hook": 1, "result": {"tensor": np.arange(3.0), "requires_grad": False}}
    h = header([bytes(f) for f in encode("hook_reply", reply)])
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
    frames = [bytes(f) for f in encode("ok", {"result": [a, {"b": b}]})]
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


# ---- sub-records: every nested message is typed and checked -------------------------------------

HOOK = {"hook": 1, "kind": "forward", "path": "net.0", "options": {"prepend": True}}
OPT = {"id": 3, "class": "SGD", "kwargs": {"lr": 0.1}, "params": ["0.weight"],
       "action": "zero_grad", "set_to_none": True}
VALID = [
    ("add_hooks", {"model": "m", "reply_to": "c1",
                   "hooks": [HOOK, {**HOOK, "kind": "tensor", "worker_hook": {"name": "x"},
                                    "tag": "toolkit", "options": {}}]}),
    ("step", {"model": "m", "optimizer": OPT}),
    ("forward", {"model": "m", "stage": 0, "inputs": [np.zeros(2)], "grad_enabled": True,
                 "reply_to": "c1", "optimizer_calls": [[OPT, {**OPT, "action": "step",
                                                               "call": 7}], []]}),
    ("train_step", {"model": "m", "step": "s", "reply_to": "c1", "loss": {"function": "mse"},
                    "schedule": [["forward", 0], ["send_act", 0], ["backward", 0]],
                    "optimizer_calls": [OPT]}),
    ("pipe", {"model": "m", "step": "s", "kind": "abort", "mb": -1, "reason": "r"}),
    ("hook_event", {"hook": 1, "kind": "vjp", "path": "k", "diff": True,
                    "args": [{"tensor": np.ones(2), "requires_grad": True}, None, 1.5]}),
    ("hook_event", {"hook": 1, "kind": "forward", "path": "0", "spec": "w.1",
                    "args": [{"tuple": [{"again": 0}]},
                             {"tensor": np.ones(2), "requires_grad": False}]}),
    ("hook_reply", {"hook": 1, "stale": True}),
    ("hook_reply", {"hook": 1, "watch": [0], "retain": [], "key": "c:1:1",
                    "result": {"tuple": [{"same": 0}, {"tensor": np.ones(1), "vjp": "k"},
                                         {"dict": {"a": {"list": [True, "s"]}}},
                                         {"opaque": "Linear"}, None]}}),
    ("release", {"model": "m", "contexts": ["a", "b"]}),
]


@pytest.mark.parametrize("msg_type,fields", VALID, ids=[v[0] for v in VALID])
def test_sub_records_round_trip(msg_type, fields):
    msg = roundtrip(msg_type, fields)
    assert wire.encode(msg_type, msg.fields)  # what arrives is valid to send again


def test_records_arrive_with_their_fields_as_attributes():
    msg = roundtrip(*VALID[0])
    entry = msg["hooks"][0]
    assert isinstance(entry, wire.Record) and entry.kind == "forward" and entry.options.prepend
    assert entry.get("tag") is None
    with pytest.raises(AttributeError, match="no field 'tag'"):
        entry.tag
    assert roundtrip(*VALID[1])["optimizer"].action == "zero_grad"


def _long_schedule(at, item, n=100):
    """A schedule of ``n`` actions with ``item`` in place ``at``."""
    actions = [[("forward", "backward")[i % 2], i // 2] for i in range(n)]
    actions[at] = item
    return actions


BAD = [
    ("add_hooks", {"hooks": [{**HOOK, "kind": "fwd"}]},
     r"field 'hooks'\[0\].kind must be one of \['backward', 'forward'"),
    ("add_hooks", {"hooks": [{**HOOK, "options": {"prepend": 1}}]},
     r"field 'hooks'\[0\].options.prepend must be bool, got int"),
    ("add_hooks", {"hooks": [{**HOOK, "options": {"later": True}}]},
     r"'hooks'\[0\].options \(hook_options\): unexpected field\(s\) \['later'\]"),
    ("add_hooks", {"hooks": [{k: v for k, v in HOOK.items() if k != "path"}]},
     r"'hooks'\[0\] \(hook_entry\): field 'path' \(str\) is missing"),
    ("add_hooks", {"hooks": ["forward"]}, r"field 'hooks'\[0\] must be hook_entry, got str"),
    ("step", {"optimizer": {**OPT, "action": "jump"}}, r"field 'optimizer'.action must be one"),
    ("step", {"optimizer": {**OPT, "params": [0]}},
     r"field 'optimizer'.params\[0\] must be str, got int"),
    ("forward", {"optimizer_calls": [OPT]},
     r"field 'optimizer_calls'\[0\] must be list\[optimizer_call\]"),
    ("step", {"optimizer": {**OPT, "call": "7"}}, r"field 'optimizer'.call must be int"),
    ("train_step", {"schedule": [["forward"]]}, r"'schedule'\[0\] must be a pair"),
    ("train_step", {"schedule": [["forward", "0"]]}, r"'schedule'\[0\]\[1\] must be int"),
    ("train_step", {"loss": {"function": "mse", "weights": 1}}, r"'loss' \(loss_spec\)"),
    ("pipe", {"kind": "gradient"}, r"field 'kind' must be one of \['abort', 'act', 'grad', 'value'\]"),
    ("hook_event", {"kind": "backward_pre"}, r"field 'kind' must be one of"),
    ("hook_event", {"args": [b"\x00"]}, r"'args'\[0\] must be a hook value"),
    ("hook_reply", {"result": {"same": True}}, r"'result'.same must be int, got bool"),
    ("hook_event", {"args": [{"again": "0"}]}, r"'args'\[0\].again must be int, got str"),
    ("hook_reply", {"result": {"same": 0, "list": []}}, r"not a hook value: a map with keys"),
    ("hook_reply", {"result": {"tensor": [1.0], "requires_grad": True}},
     r"'result'.tensor must be array, got list"),
    ("hook_reply", {"result": {"tuple": [{"tuple": [{"nope": 1}]}]}},
     r"'result'.tuple\[0\].tuple\[0\]: not a hook value"),
    ("hook_reply", {"watch": ["0"]}, r"field 'watch'\[0\] must be int, got str"),
    ("release", {"contexts": [1]}, r"field 'contexts'\[0\] must be str, got int"),
    # one item off in a long list (its quick test fails, and the full check names it)
    ("train_step", {"schedule": _long_schedule(40, ["jump", 3])},
     r"'schedule'\[40\]\[0\] must be one of \['backward'"),
    ("train_step", {"schedule": _long_schedule(40, ["forward", True])},
     r"'schedule'\[40\]\[1\] must be int, got bool"),
    ("train_step", {"schedule": _long_schedule(40, [["forward"], 3])},
     r"'schedule'\[40\]\[0\] must be schedule_kind, got list"),
    ("train_step", {"schedule": _long_schedule(40, ["forward", 3, 4])},
     r"'schedule'\[40\] must be a pair"),
    ("train_step", {"schedule": _long_schedule(40, "forward")},
     r"'schedule'\[40\] must be schedule_action, got str"),
    ("release", {"contexts": ["a"] * 40 + [None]}, r"'contexts'\[40\] must be str, got NoneType"),
    ("hook_reply", {"watch": [0] * 40 + [1.5]}, r"field 'watch'\[40\] must be int, got float"),
]


@pytest.mark.parametrize("msg_type,change,text", BAD, ids=[b[2][:30] for b in BAD])
def test_a_bad_sub_record_is_refused_naming_where(msg_type, change, text, monkeypatch):
    fields = {**dict(VALID)[msg_type], **change}
    with pytest.raises(WireError, match=text):
        encode(msg_type, fields)
    # and on arrival, from a sender that checks nothing
    with monkeypatch.context() as m:
        m.setattr(wire, "_validate_fields", lambda *args, **kwargs: None)
        frames = [bytes(f) for f in encode(msg_type, fields)]
    with pytest.raises(WireError, match=text):
        decode(frames)


def test_a_long_list_of_plain_items_is_checked_as_a_whole_not_item_by_item(monkeypatch):
    """A training step's schedule (hundreds of actions at large m) cost about 1 ms of a
    worker's CPU to decode, each of its values checked on its own with the path that
    would name it built beforehand; the same checks now run over the whole list."""
    fields = {**dict(VALID)["train_step"], "schedule": _long_schedule(0, ["send_act", 0], 300),
              "optimizer_calls": None}
    frames = [bytes(f) for f in encode("train_step", fields)]
    calls = []
    real = wire._field_value
    monkeypatch.setattr(wire, "_field_value", lambda *a: calls.append(a[0]) or real(*a))
    msg = decode(frames)
    assert msg["schedule"] == fields["schedule"]
    assert all(type(a) is list for a in msg["schedule"])
    assert len(calls) < 10, calls[:12]


def test_hook_values_nested_too_deep_are_refused():
    value = None
    for _ in range(wire.MAX_NESTING + 2):
        value = {"list": [value]}
    with pytest.raises(WireError, match="nested deeper than"):
        encode("hook_reply", {"hook": 1, "result": value})


def _random_hook_value(rng, depth=0):
    """A hook value, valid or nearly so: every tag and tensor form, scalars, junk."""
    arr = np.zeros((2, 2), np.float32)
    leaves = [None, True, 3, 1.5, "s", b"b", arr, {"tensor": arr, "requires_grad": True},
              {"tensor": arr, "requires_grad": 1}, {"tensor": arr, "vjp": "k"},
              {"tensor": arr, "feed": 2}, {"tensor": arr, "grad_fn": "AddBackward0"},
              {"tensor": arr, "requires_grad": False, "grad_fn": "MulBackward0"},
              {"tensor": arr, "requires_grad": False, "vjp": "k"},
              {"tensor": [1.0], "requires_grad": True}, {"ref": "v~1", "requires_grad": True},
              {"ref": "v~1", "requires_grad": True, "from_peer": False},
              {"ref": 7, "requires_grad": True}, {"ref": "v", "requires_grad": True, "x": 1},
              {"same": 0}, {"same": True}, {"again": 2}, {"opaque": "Foo"}, {"opaque": 1},
              {"tensor": arr}, {"nope": 1}, {}, {"tuple": (1, 2)}, {"list": "ab"}]
    if depth > wire.MAX_NESTING + 1 or rng.random() < 0.4:
        return rng.choice(leaves)
    tag = rng.choice(["tuple", "list", "dict"])
    items = [_random_hook_value(rng, depth + 1) for _ in range(rng.randrange(3))]
    if tag == "dict":
        return {"dict": {f"k{i}": v for i, v in enumerate(items)}}
    return {tag: items}


def test_the_fast_hook_value_check_never_passes_what_the_full_check_refuses():
    """``_hook_value_ok`` (no messages built) is the shortcut of the full walk that names
    what is wrong: where it says yes, the walk must pass too; where the walk passes, it
    mostly says yes."""
    rng = random.Random(3)
    agreed = 0
    for _ in range(4000):
        value = _random_hook_value(rng)
        if rng.random() < 0.3:  # deep chains, near and past the nesting limit
            for _ in range(rng.randrange(wire.MAX_NESTING - 3, wire.MAX_NESTING + 3)):
                value = {"list": [value]}
        try:
            wire._walk_hook_value("v", value, 0)
            full = True
        except WireError:
            full = False
        fast = wire._hook_value_ok(value, 0)
        assert not (fast and not full), value
        agreed += fast == full
    assert agreed > 3600


def _mutate(value, rng):
    """``value`` with one leaf (or key) somewhere inside replaced by a random thing."""
    junk = [None, True, 0, -1, 2**40, 1.5, "", "forward", "x" * 3, b"\x00", [], {}, [1, "a"],
            {"k": 1}, {"tuple": 1}, {"same": -1}]
    if isinstance(value, dict) and value and rng.random() < 0.8:
        key = rng.choice(sorted(value))
        out = dict(value)
        if rng.random() < 0.1:
            out[rng.choice(["zz", "kind", "tensor"])] = rng.choice(junk)
        else:
            out[key] = _mutate(value[key], rng)
        return out
    if isinstance(value, list) and value and rng.random() < 0.8:
        i = rng.randrange(len(value))
        return [*value[:i], _mutate(value[i], rng), *value[i + 1:]]
    return rng.choice(junk)


def test_random_changes_inside_sub_records_raise_only_wire_error():
    """Mutated nested fields, sent by a peer that checks nothing: decode accepts them only
    when they are valid (they can be sent on as they came) and otherwise says WireError."""
    rng = random.Random(7)
    outcomes = {"ok": 0, "rejected": 0}
    for _ in range(3000):
        msg_type, fields = rng.choice(VALID)
        # (a request id: the general header, which a pipe record's short form is not)
        good = [bytes(f) for f in encode(msg_type, fields, req=1)]
        h = header(good)
        h["f"] = _mutate(h["f"], rng)
        try:
            msg = decode([repack(h), *good[1:]])
        except WireError:
            outcomes["rejected"] += 1
            continue
        encode(msg.type, msg.fields)  # valid through and through
        outcomes["ok"] += 1
    assert outcomes["rejected"] > 1000 and outcomes["ok"] > 100


def test_maps_with_keys_of_mixed_kinds_are_a_wire_error():
    """msgpack lets str and bytes keys share a map; decode says WireError, never TypeError."""
    good = [bytes(f) for f in encode("status", {})]
    h = header(good)
    h[b"x"] = 1
    with pytest.raises(WireError, match="header keys"):
        decode([repack(h)])
    h = header([bytes(f) for f in encode(*VALID[0])])
    h["f"]["hooks"][0][b"raw"] = 1
    with pytest.raises(WireError, match="unexpected field"):
        decode([repack(h)])
    h = header([bytes(f) for f in encode("hook_reply", {"hook": 1})])
    h["f"]["result"] = {"a": 1, b"b": 2}
    with pytest.raises(WireError, match="not a hook value"):
        decode([repack(h)])


# ---- batches: several messages in one multipart ---------------------------------------------

def test_a_batch_holds_whole_messages_in_order():
    one = wire.encode("hook_reply", {"hook": 1, "result": {"tensor": np.arange(3.0),
                                                          "requires_grad": False}}, req=7)
    two = wire.encode("error", {"kind": "ValueError", "message": "no"}, req=8)
    three = wire.encode("hook_reply", {"hook": 2}, req=9)
    frames = wire.encode_batch([one, two, three])
    assert len(frames) == 1 + len(one) + len(two) + len(three)
    got = wire.decode_all([bytes(f) for f in frames])
    assert [(m.type, m.req) for m in got] == [("hook_reply", 7), ("error", 8),
                                              ("hook_reply", 9)]
    assert got[0]["result"]["tensor"].tolist() == [0.0, 1.0, 2.0]
    # a single message decodes as itself
    assert [m.req for m in wire.decode_all([bytes(f) for f in two])] == [8]


@pytest.mark.parametrize("bad, match", [
    (lambda one: [wire.BATCH_MAGIC + b"\x01\x00", *one], "4 per message"),
    (lambda one: [wire.BATCH_MAGIC, *one], "4 per message"),
    (lambda one: [wire.BATCH_MAGIC + struct.pack("<2I", 1, 5), *one, *one],
     "does not hold messages"),
    (lambda one: [wire.BATCH_MAGIC + struct.pack("<2I", 0, 2), *one, *one],
     "does not hold messages"),
    (lambda one: [wire.BATCH_MAGIC + struct.pack("<1I", 1), b"\x93junk"], "header"),
])
def test_a_wrong_batch_is_refused_whole(bad, match):
    one = wire.encode("hook_reply", {"hook": 1}, req=3)
    with pytest.raises(WireError, match=match):
        wire.decode_all([bytes(f) for f in bad(one)])


def test_a_write_part_stands_for_the_message_it_carries():
    part = {"type": "set_state", "fields": {"state": {"0.weight": np.ones((2, 3), np.float32)}}}
    msg = wire.write_part(part, "m")
    assert (msg.type, msg["model"]) == ("set_state", "m")
    for bad in ({"type": "forward", "fields": {}},  # only writes ride a write
                {"type": "set_state"},
                {"type": "set_state", "fields": {"state": 3}},  # not a set_state
                {"type": "param_op", "fields": {"name": "w", "op": "fill_", "args": [],
                                                "kwargs": {}, "extra": 1}},
                ["set_state", {}]):
        with pytest.raises(wire.WireError):
            wire.write_part(bad, "m")
    frames = wire.encode("write", {"model": "m", "stage": 0, "parts": [[part], []]})
    decoded = wire.decode(frames)  # the arrays of a part travel as frames
    np.testing.assert_array_equal(
        wire.write_part(decoded["parts"][0][0], "m")["state"]["0.weight"], np.ones((2, 3)))


def test_telling_a_frame_from_bytes_reads_no_frame_data():
    """A zmq.Frame's ``bytes`` property copies the whole frame (a 64 MiB input became one
    copy more on the worker): telling what a frame is must not read it."""
    import zmq

    from disthook.wire import _is_frame

    class Counting(zmq.Frame):
        reads = 0

        @property
        def bytes(self):
            type(self).reads += 1
            return super().bytes

    frame = Counting(b"x" * 1024)
    assert _is_frame(frame) and not _is_frame(b"x") and not _is_frame(memoryview(b"x"))
    assert Counting.reads == 0


@pytest.mark.parametrize("arrays", [False, True])
def test_a_msgpack_timestamp_arrives_as_a_number_and_a_refusal_names_its_request(arrays):
    """msgpack reads its own extension -1 (a timestamp) without the ext hook: it must not
    bring a msgpack.Timestamp into a message's fields, which hold plain values only. A
    message refused for its fields carries the request id its header gave."""
    stamp = msgpack.Timestamp(5, 0)
    table = [["<f4", [1]]] if arrays else []
    fields = {"model": "m", "stage": 0, "grad_enabled": False, "reply_to": "00",
              "inputs": [stamp, *([msgpack.ExtType(wire.ARRAY_EXT, bytes(4))] if arrays else [])]}
    head = msgpack.packb({"v": wire.PROTOCOL_VERSION, "t": "forward", "r": 9, "c": None,
                          "a": table, "f": fields}, use_bin_type=True)
    msg = decode([head, *([b"\0" * 4] if arrays else [])])
    assert type(msg["inputs"][0]) is float and msg["inputs"][0] == 5.0
    head = msgpack.packb({"v": wire.PROTOCOL_VERSION, "t": "forward", "r": 9, "c": None,
                          "a": [], "f": {**fields, "inputs": [], "stage": stamp}},
                         use_bin_type=True)
    with pytest.raises(WireError, match="field 'stage' must be int, got float") as caught:
        decode([head])
    assert caught.value.req == 9
