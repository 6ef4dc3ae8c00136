"""Malformed and hostile checkpoint files: each is refused with an error that names the file,
runs nothing, and allocates nothing beyond what the file holds."""
from __future__ import annotations

import io
import os
import pickle
import sys
import tracemalloc
import zipfile
from collections import OrderedDict

import numpy as np
import pytest

import disthook
from disthook.serialization import load, save

REFUSED = (RuntimeError, pickle.UnpicklingError)


def torch_zip(data_pkl: bytes, records: dict | None = None, compress=zipfile.ZIP_STORED):
    """A file in torch's layout holding this pickle and these storage records."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compress) as z:
        z.writestr("archive/data.pkl", data_pkl)
        z.writestr("archive/byteorder", "little")
        for key, data in (records or {}).items():
            z.writestr(f"archive/data/{key}", data)
        z.writestr("archive/version", "3\n")
    buf.seek(0)
    return buf


def tensor_pickle(numel: int, size: tuple, stride: tuple, offset: int = 0,
                  legacy: bool = False) -> bytes:
    """What torch pickles for a float32 tensor over storage '0' of ``numel`` elements (in
    the zip format, or with the legacy format's sixth field)."""
    out = [b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\n(("]
    out.append(b"X\x07\x00\x00\x00storage" + b"ctorch\nFloatStorage\n"
               + b"X\x01\x00\x00\x000" + b"X\x03\x00\x00\x00cpu"
               + pickle.dumps(numel, 2)[2:-1] + (b"N" if legacy else b"") + b"tQ")
    for part in (offset, size, stride):
        out.append(pickle.dumps(part, 2)[2:-1])
    out.append(b"\x89ccollections\nOrderedDict\n)RtR.")
    return b"".join(out)


def test_the_hand_made_torch_file_is_right_when_it_is_honest():
    data = np.arange(6, dtype=np.float32)
    t = load(torch_zip(tensor_pickle(6, (2, 3), (3, 1)), {"0": data.tobytes()}))
    assert t.tolist() == [[0, 1, 2], [3, 4, 5]]
    t = load(torch_zip(tensor_pickle(6, (3, 2), (1, 3)), {"0": data.tobytes()}))
    assert t.tolist() == [[0, 3], [1, 4], [2, 5]]


def test_a_pickle_that_would_run_code_runs_nothing(tmp_path):
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    for weights_only in (None, True):
        with pytest.raises(pickle.UnpicklingError,
                           match=r"(?s)^Weights only load failed.*weights_only=False.*"
                                 r"trust.*Unsupported global: GLOBAL (_?io|builtins)\.open"):
            load(torch_zip(pickle.dumps({"x": Evil()}, 2)), weights_only=weights_only)
    assert not marker.exists()

    # nothing is imported either: a module that writes a file when imported stays unimported
    (tmp_path / "plantedmod.py").write_text(
        f"open({str(tmp_path / 'imported')!r}, 'w').close()\ndef fn():\n    pass\n")
    sys.path.insert(0, str(tmp_path))
    try:
        with pytest.raises(pickle.UnpicklingError, match="GLOBAL plantedmod.fn"):
            load(torch_zip(b"\x80\x02cplantedmod\nfn\n)R."))
        assert "plantedmod" not in sys.modules and not (tmp_path / "imported").exists()
    finally:
        sys.path.remove(str(tmp_path))

    # calling an admitted class with a payload, or setting attributes on a tensor: refused
    with pytest.raises(pickle.UnpicklingError, match="BUILD on a Tensor"):
        load(torch_zip(tensor_pickle(1, (1,), (1,))[:-1] + b"}X\x05\x00\x00\x00_dataK\x01sb.",
                       {"0": b"\0" * 4}))


def test_a_declared_shape_larger_than_the_file_allocates_nothing():
    huge = 2 ** 40
    tracemalloc.start()
    try:
        with pytest.raises(RuntimeError, match=r"^disthook.load: the file: record "
                                               r"'archive/data/0' holds 8 bytes where its "
                                               r"tensor needs 4398046511104"):
            load(torch_zip(tensor_pickle(huge, (huge,), (1,)), {"0": b"\0" * 8}))
        # the storage is honest, the view on it is not
        with pytest.raises(RuntimeError, match=r"a tensor of size \[4, 4\] .* reaches element "
                                               r"15 of storage '0', which holds 2"):
            load(torch_zip(tensor_pickle(2, (4, 4), (4, 1)), {"0": b"\0" * 8}))
        with pytest.raises(RuntimeError, match="must not be negative"):
            load(torch_zip(tensor_pickle(2, (2,), (-1,), 1), {"0": b"\0" * 8}))
        assert tracemalloc.get_traced_memory()[1] < 20 * 2 ** 20
    finally:
        tracemalloc.stop()


def declare_size(raw: bytearray, name: str, size: int, local: bool = True) -> None:
    """Rewrite the uncompressed size the zip directory (and the local header) declare."""
    encoded = name.encode()
    at = raw.find(b"PK\x01\x02")
    while at >= 0:
        if raw[at + 46:at + 46 + len(encoded)] == encoded:
            raw[at + 24:at + 28] = size.to_bytes(4, "little")
            if local:
                offset = int.from_bytes(raw[at + 42:at + 46], "little")
                raw[offset + 22:offset + 26] = size.to_bytes(4, "little")
            return
        at = raw.find(b"PK\x01\x02", at + 4)
    raise AssertionError(name)


def legacy_file(numel: int, data: bytes, size=(2,), count=None) -> io.BytesIO:
    """torch's format before 1.6: magic, protocol, sys info, object, keys, then the bytes."""
    head = b"".join(pickle.dumps(v, 2) for v in (
        0x1950A86A20F9469CFC6C, 1001, {"protocol_version": 1001, "little_endian": True}))
    body = tensor_pickle(numel, size, (1,), legacy=True) + pickle.dumps(["0"], 2)
    count = numel if count is None else count
    return io.BytesIO(head + body + count.to_bytes(8, "little") + data)


def test_legacy_files_are_checked_against_the_bytes_they_hold(tmp_path):
    assert load(legacy_file(2, np.array([1, 2], np.float32).tobytes())).tolist() == [1, 2]
    tracemalloc.start()
    try:
        with pytest.raises(RuntimeError, match="storage '0' declares 1099511627776 elements, "
                                               "more than the rest of the file holds"):
            load(legacy_file(2 ** 40, b"\0" * 8))
        assert tracemalloc.get_traced_memory()[1] < 20 * 2 ** 20
    finally:
        tracemalloc.stop()
    with pytest.raises(RuntimeError, match=r"storage '0' is cut short: 4 of 8 bytes"):
        load(legacy_file(2, b"\0" * 4))
    with pytest.raises(RuntimeError, match="holds 3 elements where the object names 2"):
        load(legacy_file(2, b"\0" * 12, count=3))
    (tmp_path / "old.pt").write_bytes(legacy_file(2, b"\0" * 8).getvalue())
    with pytest.raises(RuntimeError, match="mmap can only be used with files saved with"):
        load(tmp_path / "old.pt", mmap=True)


def test_a_member_that_inflates_past_its_size_is_bounded():
    zeros = bytes(32 * 2 ** 20)
    # a deflated storage record of 32 MiB of zeros whose zip entry says 8 bytes, as an
    # attacker would write it: reading stops at 8 bytes and the CRC fails
    raw = bytearray(torch_zip(tensor_pickle(2, (2,), (1,)), {"0": zeros},
                              zipfile.ZIP_DEFLATED).getvalue())
    declare_size(raw, "archive/data/0", 8)
    tracemalloc.start()
    try:
        with pytest.raises(RuntimeError, match=r"^disthook.load: the file is damaged or "
                                               r"truncated \(Bad CRC-32"):
            load(io.BytesIO(bytes(raw)))
        assert tracemalloc.get_traced_memory()[1] < 8 * 2 ** 20
    finally:
        tracemalloc.stop()
    # a real compressed file loads; one that declares more than deflate can make of its
    # bytes is refused before anything is read
    honest = torch_zip(tensor_pickle(8 * 2 ** 20, (8 * 2 ** 20,), (1,)), {"0": zeros},
                       zipfile.ZIP_DEFLATED)
    assert load(honest).shape == (8 * 2 ** 20,)
    raw = bytearray(honest.getvalue())
    declare_size(raw, "archive/data.pkl", 2 ** 31, local=False)
    with pytest.raises(RuntimeError, match=r"record 'archive/data.pkl' declares 2147483648 "
                                           r"bytes from \d+ compressed, more than deflate can"):
        load(io.BytesIO(bytes(raw)))


def test_recursion_bombs_are_refused():
    depth = 100_000
    deep_list = b"\x80\x02" + b"]" * depth + b"a" * (depth - 1) + b"."
    with pytest.raises(pickle.UnpicklingError, match="nests objects more than 1000 deep"):
        load(torch_zip(deep_list))
    # the same depth through the memo, with a constant stack
    chain = b"\x80\x02]q\x00" + b"]h\x00aq\x00" * depth + b"h\x00."
    with pytest.raises(pickle.UnpicklingError, match="nests objects more than 1000 deep"):
        load(torch_zip(chain))
    # a billion laughs: wide sharing is cheap, it loads
    laughs = b"\x80\x02]q\x00" + b"(h\x00h\x00h\x00h\x00h\x00h\x00h\x00h\x00h\x00h\x00lq\x00" * 30
    assert len(load(torch_zip(laughs + b"h\x00."))) == 10
    # the earlier disthook format nests through JSON
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("disthook.json", '{"format": "disthook.save", "version": 1, "arrays": [], '
                   '"object": ' + '{"list": [' * 5000 + "null" + "]}" * 5000 + "}")
    buf.seek(0)
    with pytest.raises(RuntimeError, match="nested too deep"):
        load(buf)


def saved_bytes() -> bytes:
    w = disthook.arange(6, dtype=disthook.float32).reshape(2, 3)
    buf = io.BytesIO()
    save(OrderedDict(w=w, b=disthook.ones(2), n=3), buf)
    return buf.getvalue()


def test_truncated_files_name_the_file(tmp_path):
    data = saved_bytes()
    for cut in (10, len(data) // 2, len(data) - 30):
        path = tmp_path / f"cut{cut}.pt"
        path.write_bytes(data[:cut])
        with pytest.raises(RuntimeError, match=f"^disthook.load: '{path}' is damaged or "
                                               "truncated"):
            load(path)


def test_every_flipped_byte_is_caught_or_harmless():
    data = saved_bytes()
    good = load(io.BytesIO(data))
    outcomes = set()
    for pos in range(len(data)):
        bad = bytearray(data)
        bad[pos] ^= 0x55
        try:
            back = load(io.BytesIO(bytes(bad)))
        except REFUSED as e:
            assert str(e).startswith(("disthook.load: the file", "Weights only load failed")), e
            outcomes.add(type(e).__name__)
            continue
        # a byte nobody reads (padding, an unread record's name): the same checkpoint
        assert list(back) == list(good) and back["n"] == 3, pos
        assert all(disthook.equal(back[k], good[k]) for k in ("w", "b")), pos
    assert "RuntimeError" in outcomes


def test_a_torchscript_archive_and_plain_pickles_are_named(tmp_path):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("model/constants.pkl", b"")
        z.writestr("model/code/__torch__.py", b"")
    buf.seek(0)
    with pytest.raises(RuntimeError, match="TorchScript archive"):
        load(buf)
    with pytest.raises(RuntimeError, match="not torch's magic number"):
        load(io.BytesIO(pickle.dumps({"a": 1}, 2)))


def test_unknown_storages_and_persistent_ids_are_refused():
    bad_pid = b"\x80\x02(X\x03\x00\x00\x00fooK\x01tQ."
    with pytest.raises(RuntimeError, match="unknown persistent id"):
        load(torch_zip(bad_pid))
    quantized_storage = tensor_pickle(1, (1,), (1,)).replace(b"FloatStorage",
                                                            b"QInt8Storage")
    with pytest.raises(RuntimeError, match="holds a QInt8Storage; disthook has no "
                                           "tensors of that element type"):
        load(torch_zip(quantized_storage, {"0": b"\0" * 8}))
    with pytest.raises(pickle.UnpicklingError, match="names the dtype torch.complex32; "
                                                     "disthook has no tensors of it"):
        load(torch_zip(b"\x80\x02ctorch\ncomplex32\n."))
    missing = tensor_pickle(1, (1,), (1,))
    with pytest.raises(RuntimeError, match="has no record 'archive/data/0'"):
        load(torch_zip(missing))


def test_files_on_disk_close_after_a_refusal(tmp_path):
    path = tmp_path / "bad.pt"
    path.write_bytes(b"PK\x03\x04 not really")
    before = len(os.listdir(f"/proc/{os.getpid()}/fd")) if os.path.isdir("/proc") else 0
    for _ in range(5):
        with pytest.raises(RuntimeError):
            load(path)
    if before:
        assert len(os.listdir(f"/proc/{os.getpid()}/fd")) == before


def test_admitted_callables_build_from_the_pickles_own_data_only():
    t = tensor_pickle(1, (2 ** 40,), (0,))[2:-1]  # a broadcast view of 2**40 elements
    storage = {"0": b"\0" * 4}
    cases = [
        (b"\x80\x02c__builtin__\nbytearray\n\x8a\x06\x00\x00\x00\x00\x00\x01\x85R.", {},
         r"bytearray\(int\)"),  # bytearray(2**40): bytes the file does not hold
        (b"\x80\x02c__builtin__\nset\n" + t + b"\x85R.", storage, r"set\(Tensor\)"),
        (b"\x80\x02ctorch\nSize\n" + t + b"\x85R.", storage, r"Size\(Tensor\)"),
        (b"\x80\x02" + t + b"K\x00K\x01s.", storage, "SETITEM into a Tensor"),
        (b"\x80\x02ccollections\nOrderedDict\n)R}X\x04\x00\x00\x00keysK\x01sb.", {},
         "never one that hides a method"),
    ]
    for data, records, message in cases:
        with pytest.raises(pickle.UnpicklingError, match=message):
            load(torch_zip(data, records))


def test_every_flipped_pickle_byte_is_refused_cleanly_or_loads():
    """The pickle itself damaged (the zip's CRC made right again, as a forger would): a
    weights-only load refuses with UnpicklingError or RuntimeError, or loads data."""
    m = disthook.nn.Linear(3, 2)
    buf = io.BytesIO()
    save({"sd": m.state_dict(), "n": 3, "l": [1.5, "x", (2, None)],
          "s": disthook.Size([2]), "d": disthook.float16}, buf)
    with zipfile.ZipFile(buf) as z:
        members = {i.filename: z.read(i.filename) for i in z.infolist()}
    data = members["archive/data.pkl"]
    for pos in range(len(data)):
        for flip in (0x01, 0xFF):
            bad = bytearray(data)
            bad[pos] ^= flip
            out = io.BytesIO()
            with zipfile.ZipFile(out, "w") as z:
                for name, member in members.items():
                    z.writestr(name, bytes(bad) if name.endswith("data.pkl") else member)
            out.seek(0)
            try:
                load(out)
            except REFUSED:
                pass
