"""Checkpoints as real programs make them (R5): views keep their storage through a load and
a save, training checkpoints resume (LR schedulers, the RNG), every dtype torch writes. The
files are made at test time, by disthook itself or (where installed) by torch."""
from __future__ import annotations

import io

import pytest

import disthook


def saved(obj, **kwargs) -> io.BytesIO:
    buf = io.BytesIO()
    (kwargs.pop("lib", None) or disthook).save(obj, buf, **kwargs)
    buf.seek(0)
    return buf


def views(lib) -> dict:
    w = lib.arange(24, dtype=lib.float32).reshape(4, 6)
    return {"w": w, "row": w[2], "col": w[:, 1], "block": w[1:3, 2:5], "every": w[::2, 1::3],
            "t": w.t()}


# where each view starts in w's storage, and its strides (as torch gives them)
GEOMETRY = {"w": (0, (6, 1)), "row": (12, (1,)), "col": (1, (6,)), "block": (8, (6, 1)),
            "every": (1, (12, 3)), "t": (0, (1, 6))}


def check_views(loaded) -> None:
    root = loaded["w"].untyped_storage()
    for name, (offset, stride) in GEOMETRY.items():
        t = loaded[name]
        assert (t.storage_offset(), t.stride()) == (offset, stride), name
        assert t.untyped_storage().nbytes() == 96, name  # w's whole storage, as in torch
        assert t.untyped_storage().data_ptr() == root.data_ptr(), name


def test_loaded_views_keep_their_offset_and_storage(tmp_path):
    disthook.save(views(disthook), tmp_path / "v.pt")
    for kwargs in ({}, {"mmap": True}):
        loaded = disthook.load(tmp_path / "v.pt", **kwargs)
        check_views(loaded)
        # saved again, they are still views of one storage
        again = disthook.load(saved(loaded))
        check_views(again)
        again["w"][2, 1] = -1.0
        assert again["row"][1].item() == again["col"][2].item() == -1.0


def test_torch_views_load_with_torchs_offsets_and_go_back_as_one_storage(tmp_path):
    torch = pytest.importorskip("torch")
    torch.save(views(torch), tmp_path / "v.pt")
    for kwargs in ({}, {"mmap": True}):
        loaded = disthook.load(tmp_path / "v.pt", **kwargs)
        check_views(loaded)
        back = torch.load(saved(loaded))
        for name, (offset, stride) in GEOMETRY.items():
            assert (back[name].storage_offset(), back[name].stride()) == (offset, stride)
            assert back[name].untyped_storage().data_ptr() == \
                back["w"].untyped_storage().data_ptr()
    # a 0-d buffer (BatchNorm's num_batches_tracked) read from torch and written again
    bn = torch.nn.BatchNorm1d(2)
    torch.save(bn.state_dict(), tmp_path / "bn.pt")
    back = torch.load(saved(disthook.load(tmp_path / "bn.pt")))
    assert back["num_batches_tracked"].shape == () and back["num_batches_tracked"].item() == 0


def test_a_0d_tensor_read_from_safetensors_saves_as_0d(tmp_path):
    from disthook.safetensors import load_file, save_file

    save_file({"step": disthook.tensor(3), "w": disthook.ones(2, 3)}, tmp_path / "m.safetensors")
    state = load_file(tmp_path / "m.safetensors")  # typed views of the file's one buffer
    back = disthook.load(saved(state))
    assert back["step"].shape == () and back["step"].item() == 3
    assert back["w"].tolist() == [[1.0] * 3] * 2
