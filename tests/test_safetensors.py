"""disthook.safetensors: safetensors files read and written as safetensors.torch does, checked
against the safetensors package where it is installed, and malformed files refused."""
from __future__ import annotations

import json

import numpy as np
import pytest

import disthook
from disthook import nn
from disthook.safetensors import (
    SafetensorError,
    load,
    load_file,
    load_model,
    safe_open,
    save,
    save_file,
    save_model,
)


def tensors():
    return {"w": disthook.arange(6, dtype=disthook.float32).reshape(2, 3),
            "ids": disthook.tensor([1, -2, 3]),
            "i32": disthook.tensor([7], dtype=disthook.int32),
            "half": disthook.ones(2, dtype=disthook.float16),
            "mask": disthook.tensor([True, False]),
            "u8": disthook.tensor([255], dtype=disthook.uint8), "scalar": disthook.tensor(2.5),
            "empty": disthook.zeros(0, 4)}


def same(a: dict, b: dict) -> bool:
    return set(a) == set(b) and all(
        a[k].dtype == b[k].dtype and a[k].shape == b[k].shape and disthook.equal(a[k], b[k])
        for k in a)


def test_round_trips_through_bytes_and_files(tmp_path):
    assert same(load(save(tensors())), tensors())
    save_file(tensors(), tmp_path / "m.safetensors", metadata={"format": "pt"})
    assert same(load_file(tmp_path / "m.safetensors"), tensors())
    with safe_open(tmp_path / "m.safetensors", framework="pt", device="cpu") as f:
        assert f.metadata() == {"format": "pt"} and sorted(f.keys()) == sorted(tensors())
        assert f.get_tensor("w").tolist() == [[0, 1, 2], [3, 4, 5]]
        part = f.get_slice("w")
        assert part.get_shape() == [2, 3] and part.get_dtype() == "F32"
        assert part[:, 1].tolist() == [1.0, 4.0]
    loaded = load_file(tmp_path / "m.safetensors")
    loaded["w"][0, 0] = 9.0  # copy-on-write: the file keeps its bytes
    assert load_file(tmp_path / "m.safetensors")["w"][0, 0].item() == 0.0


def test_the_layout_is_the_specs(tmp_path):
    data = save({"a": disthook.tensor([1.0, 2.0]), "b": disthook.tensor([3], dtype=disthook.int8)})
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    assert n % 8 == 0
    assert header == {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                      "b": {"dtype": "I8", "shape": [1], "data_offsets": [8, 9]}}
    assert data[8 + n:] == np.array([1, 2], "<f4").tobytes() + b"\x03"


def test_tied_and_non_contiguous_tensors_are_refused_and_save_model_ties_again(tmp_path):
    w = disthook.ones(2, 3)
    with pytest.raises(RuntimeError, match="share memory"):
        save_file({"a": w, "b": w}, tmp_path / "x.safetensors")
    with pytest.raises(ValueError, match="not contiguous.*contiguous\\(\\)"):
        save_file({"t": w.t()}, tmp_path / "x.safetensors")
    model = nn.Sequential(nn.Embedding(5, 3), nn.Linear(3, 5, bias=False))
    model[1].weight = model[0].weight  # tied, as language models tie them
    save_model(model, tmp_path / "m.safetensors")
    assert sorted(load_file(tmp_path / "m.safetensors")) == ["0.weight"]
    fresh = nn.Sequential(nn.Embedding(5, 3), nn.Linear(3, 5, bias=False))
    fresh[1].weight = fresh[0].weight
    assert load_model(fresh, tmp_path / "m.safetensors") == ([], [])
    assert disthook.equal(fresh[1].weight, model[0].weight)


def file_with(header: dict, data: bytes, pad: bytes = b"") -> bytes:
    text = json.dumps(header).encode() + pad
    return len(text).to_bytes(8, "little") + text + data


@pytest.mark.parametrize("blob, message", [
    (b"\x01\x00", "too few"),
    ((2 ** 40).to_bytes(8, "little") + b"{}", "header declares 1099511627776 bytes"),
    (file_with({"a": {"dtype": "F32", "shape": [2 ** 30], "data_offsets": [0, 8]}}, b"\0" * 8),
     "needs 4294967296 bytes but data_offsets"),
    (file_with({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 4),
     "declare 8 bytes of data but the file holds 4"),
    (file_with({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                "b": {"dtype": "F32", "shape": [1], "data_offsets": [2, 6]}}, b"\0" * 6),
     "overlap or leave a hole"),
    (file_with({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}, b"\0" * 4),
     "has shape"),
    (file_with({"a": {"dtype": "F8_E4M3", "shape": [1], "data_offsets": [0, 1]}}, b"\0"),
     "element type disthook has no tensors of"),
    (file_with({"a": {"dtype": "X9", "shape": [1], "data_offsets": [0, 1]}}, b"\0"),
     "unknown dtype"),
    (file_with({"__metadata__": {"k": 1}}, b""), "__metadata__ must map strings"),
    (b"\x04\x00\x00\x00\x00\x00\x00\x00[1,2", "not valid JSON"),
    (b"\x04\x00\x00\x00\x00\x00\x00\x00[1]\x20", "not a JSON object"),
])
def test_malformed_files_are_refused_before_allocating(tmp_path, blob, message):
    with pytest.raises(SafetensorError, match=message):
        load(blob)
    path = tmp_path / "bad.safetensors"
    path.write_bytes(blob)
    with pytest.raises(SafetensorError, match=message):
        load_file(path)


def test_files_of_the_safetensors_package_both_ways(tmp_path):
    st_numpy = pytest.importorskip("safetensors.numpy")
    arrays = {k: v.numpy() for k, v in tensors().items()}
    st_numpy.save_file(arrays, str(tmp_path / "theirs.safetensors"), metadata={"a": "b"})
    assert same(load_file(tmp_path / "theirs.safetensors"), tensors())
    save_file(tensors(), tmp_path / "ours.safetensors", metadata={"a": "b"})
    back = st_numpy.load_file(str(tmp_path / "ours.safetensors"))
    assert set(back) == set(arrays)
    for k, v in arrays.items():
        assert back[k].dtype == v.dtype and np.array_equal(back[k], v)


def test_every_flipped_byte_is_refused_as_a_safetensor_error_or_loads():
    data = save({"a": disthook.ones(2, 3), "b": disthook.tensor([1, 2]),
                 "m": disthook.tensor([True])}, {"k": "v"})
    refused = 0
    for pos in range(len(data)):
        for flip in (0x01, 0x55, 0xFF):
            bad = bytearray(data)
            bad[pos] ^= flip
            try:
                load(bytes(bad))
            except SafetensorError:
                refused += 1
    assert refused > len(data)  # header damage is caught; a flipped data byte is just data
