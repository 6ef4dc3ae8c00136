"""Files a victim is handed: an empty tensor whose other dimensions multiply past what numpy
lets an array declare (torch saves and loads ``torch.empty(0, 2**62)``). Before, a
safetensors file holding one raised numpy's bare ``ValueError`` ('array is too big'), naming
neither the file nor the tensor, and a torch file said its pickle was malformed; now each
says which tensor of which file cannot be loaded, and why."""
import json
import struct

import numpy as np
import pytest
from test_hostile_checkpoints import tensor_pickle, torch_zip

from disthook.safetensors import SafetensorError, load, safe_open, save_file
from disthook.serialization import load as torch_load


def _safetensors(shape, dtype="F32"):
    head = json.dumps({"a": {"dtype": dtype, "shape": shape, "data_offsets": [0, 0]}}).encode()
    return struct.pack("<Q", len(head)) + head


@pytest.mark.parametrize("shape", [[0, 2**62], [2**62, 0], [0, 2**70], [0] + [2**40] * 10,
                                   [0, 2**31, 2**30]])
def test_an_empty_tensor_too_large_to_declare_is_named(shape, tmp_path):
    with pytest.raises(SafetensorError, match=r"tensor 'a' cannot be loaded: its dimensions "
                                              r".* multiply .* torch holds such an empty"):
        load(_safetensors(shape))
    path = tmp_path / "a.safetensors"
    path.write_bytes(_safetensors(shape))
    with pytest.raises(SafetensorError, match=r"a.safetensors'?: tensor 'a' cannot be"):
        safe_open(str(path))
    with pytest.raises(RuntimeError, match=r"cannot be loaded: its dimensions .* multiply"):
        torch_load(torch_zip(tensor_pickle(0, tuple(shape), (1,) * len(shape)),
                             {"0": b""}))


def test_empty_tensors_numpy_can_declare_still_load(tmp_path):
    for shape, dtype in (([0, 2**60], "F32"), ([0, 2**62], "U8"), ([3, 0, 5], "F64")):
        t = load(_safetensors(shape, dtype))["a"]
        assert list(t.shape) == shape and t.numel() == 0
    t = torch_load(torch_zip(tensor_pickle(0, (0, 2**60), (1, 1)), {"0": b""}))
    assert list(t.shape) == [0, 2**60]
    path = tmp_path / "b.safetensors"
    save_file({"b": load(_safetensors([0, 7]))["a"]}, str(path))
    with safe_open(str(path)) as f:
        assert list(f.get_tensor("b").shape) == [0, 7]
        assert f.get_tensor("b").numpy().dtype == np.float32
