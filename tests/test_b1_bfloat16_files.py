"""bfloat16 tensors in files: torch.save / torch.load (zip and legacy formats) and safetensors
keep them bfloat16, bit for bit, views sharing their storage; torch reads what we write."""
import warnings

import numpy as np
import pytest

import disthook
from disthook import safetensors as st

try:
    import torch
except ImportError:
    torch = None

VALUES = [1.5, -2.25, 3.140625, 0.00099945068359375]
BITS = [16320, -16368, 16457, 14979]  # their bfloat16 patterns (as torch's int16 view)


def _bf16():
    return disthook.tensor(VALUES, dtype=disthook.bfloat16)


def test_save_load_round_trip_keeps_bfloat16_and_views(tmp_path):
    x = _bf16()
    path = tmp_path / "x.pt"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "loads as float32" warning any more
        disthook.save({"w": x, "v": x[1:3]}, path)
        got = disthook.load(path)
    assert got["w"].dtype is disthook.bfloat16
    assert got["w"].view(disthook.int16).tolist() == BITS
    got["w"][1] = 7.0  # the view shares the storage, as saved
    assert got["v"].tolist() == [7.0, 3.140625]


def test_safetensors_round_trip(tmp_path):
    path = str(tmp_path / "x.safetensors")
    st.save_file({"w": _bf16()}, path)
    got = st.load_file(path)["w"]
    assert got.dtype is disthook.bfloat16 and got.view(disthook.int16).tolist() == BITS


@pytest.mark.skipif(torch is None, reason="checks files against torch's own reader")
def test_torch_reads_ours_and_we_read_torchs(tmp_path):
    disthook.save({"w": _bf16()}, tmp_path / "ours.pt")
    theirs = torch.load(tmp_path / "ours.pt")["w"]
    assert theirs.dtype == torch.bfloat16 and theirs.view(torch.int16).tolist() == BITS
    torch.save({"w": torch.tensor(VALUES, dtype=torch.bfloat16)}, tmp_path / "t.pt")
    torch.save({"w": torch.tensor(VALUES, dtype=torch.bfloat16)}, tmp_path / "legacy.pt",
               _use_new_zipfile_serialization=False)
    for name in ("t.pt", "legacy.pt"):
        got = disthook.load(tmp_path / name)["w"]
        assert got.dtype is disthook.bfloat16 and got.view(disthook.int16).tolist() == BITS
    from safetensors.torch import load_file, save_file

    st.save_file({"w": _bf16()}, str(tmp_path / "ours.safetensors"))
    assert load_file(str(tmp_path / "ours.safetensors"))["w"].view(torch.int16).tolist() == BITS
    save_file({"w": torch.tensor(VALUES, dtype=torch.bfloat16)}, str(tmp_path / "t.safetensors"))
    got = st.load_file(str(tmp_path / "t.safetensors"))["w"]
    assert np.array_equal(got.view(disthook.int16)._data, np.array(BITS, np.int16))
