"""disthook.save / disthook.load without torch: round trips, sharing, whole modules, the
earlier disthook format and .npz, refusals (hostile files are in test_hostile_checkpoints)."""
from __future__ import annotations

import io
import json
import pickle
import zipfile
from collections import OrderedDict

import numpy as np
import pytest

import disthook
from disthook import nn
from disthook.serialization import load, save


def round_trip(obj):
    buf = io.BytesIO()
    save(obj, buf)
    buf.seek(0)
    return load(buf)


def test_tensors_keep_dtype_shape_values_and_requires_grad():
    ints = disthook.arange(6).reshape(2, 3)
    floats = disthook.randn(3, dtype=disthook.float64, requires_grad=True)
    back = round_trip({"ints": ints, "floats": floats, "scalar": disthook.tensor(2.5)})
    assert back["ints"].dtype == disthook.int64 and back["ints"].tolist() == ints.tolist()
    assert back["floats"].dtype == disthook.float64 and back["floats"].requires_grad
    assert back["floats"].is_leaf and disthook.equal(back["floats"], floats)
    assert back["scalar"].shape == () and back["scalar"].item() == 2.5


def test_state_dicts_load_back_into_a_model_and_optimizer(tmp_path):
    disthook.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 1))
    opt = disthook.optim.Adam(model.parameters(), lr=0.01)
    model(disthook.randn(5, 3)).sum().backward()
    opt.step()
    path = tmp_path / "ckpt.pt"
    save({"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 7,
          "best": float("inf"), "tag": None}, path)
    ckpt = load(path)
    assert ckpt["epoch"] == 7 and ckpt["best"] == float("inf") and ckpt["tag"] is None
    assert type(ckpt["model"]) is OrderedDict
    assert ckpt["model"]._metadata == model.state_dict()._metadata
    fresh = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 1))
    fresh.load_state_dict(ckpt["model"])
    assert all(disthook.equal(a, b) for a, b in zip(fresh.state_dict().values(),
                                                     model.state_dict().values()))
    fresh_opt = disthook.optim.Adam(fresh.parameters(), lr=0.5)
    fresh_opt.load_state_dict(ckpt["optimizer"])
    assert fresh_opt.param_groups[0]["lr"] == 0.01
    assert fresh_opt.param_groups[0]["betas"] == (0.9, 0.999)
    assert ckpt["optimizer"]["param_groups"][0]["params"] == [0, 1, 2, 3, 4, 5]


def test_containers_keys_and_sharing():
    w = nn.Parameter(disthook.ones(2))
    back = round_trip({"a": [w, (w, 1)], 3: "int key", (1, 2): "tuple key", 1.5: True,
                       "dtype": disthook.float16, "device": disthook.device("cpu")})
    assert back["a"][0] is back["a"][1][0] and isinstance(back["a"][0], nn.Parameter)
    assert back[3] == "int key" and back[(1, 2)] == "tuple key" and back[1.5] is True
    assert back["dtype"] is disthook.float16 and back["device"] == disthook.device("cpu")
    assert type(back["a"][1]) is tuple and back["a"][1][1] == 1
    assert round_trip(2**70) == 2**70 and round_trip([]) == []


def test_whole_modules_save_and_load_as_trusted_files():
    disthook.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))
    buf = io.BytesIO()
    save(model, buf)
    buf.seek(0)
    with pytest.raises(pickle.UnpicklingError, match=r"(?s)^Weights only load failed.*GLOBAL "
                       r"torch\.nn\.modules\.container\.Sequential is not an allowed global"):
        load(buf)
    buf.seek(0)
    back = load(buf, weights_only=False)
    assert type(back) is nn.Sequential and type(back[0]) is nn.Linear
    x = disthook.randn(2, 3)
    assert disthook.equal(back(x), model(x))
    with pytest.raises(pickle.PicklingError):
        save([lambda: 1], io.BytesIO())


def v1_file(tree, arrays=()) -> io.BytesIO:
    """A file in the format disthook.save wrote before it wrote torch's."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("disthook.json", json.dumps({
            "format": "disthook.save", "version": 1, "object": tree,
            "arrays": [f"{i}.npy" for i in range(len(arrays))]}))
        for i, array in enumerate(arrays):
            inner = io.BytesIO()
            np.save(inner, array, allow_pickle=array.dtype.hasobject)
            z.writestr(f"{i}.npy", inner.getvalue())
    buf.seek(0)
    return buf


def test_files_of_the_earlier_disthook_format_still_load():
    tree = {"ordered_dict": [["w", {"tensor": 0, "requires_grad": True, "parameter": True}],
                             ["v", {"tensor": 0, "requires_grad": True, "parameter": True}],
                             ["n", {"int": "7"}], ["d", {"dtype": "torch.float16"}]],
            "metadata": {"dict": [["", {"dict": [["version", {"int": "1"}]]}]]}}
    back = load(v1_file(tree, [np.arange(3, dtype=np.float32)]))
    assert type(back) is OrderedDict and back._metadata == {"": {"version": 1}}
    assert isinstance(back["w"], nn.Parameter) and back["w"] is back["v"]
    assert back["w"].tolist() == [0.0, 1.0, 2.0] and back["n"] == 7
    assert back["d"] is disthook.float16


def test_npz_archives_load_as_state_dicts(tmp_path):
    np.savez(tmp_path / "w.npz", w=np.ones(2, np.float32))
    np.savez_compressed(tmp_path / "c.npz", w=np.zeros((3, 2)))
    assert load(tmp_path / "w.npz")["w"].tolist() == [1.0, 1.0]
    assert load(tmp_path / "c.npz")["w"].shape == (3, 2)


def test_not_a_checkpoint_and_corrupt_manifests():
    with pytest.raises(RuntimeError, match="^disthook.load: the file is not a checkpoint"):
        load(io.BytesIO(b"plain bytes"))
    with pytest.raises(RuntimeError, match=r"not a valid disthook.save file \(tensor index 5"):
        load(v1_file({"tensor": 5}))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("disthook.json", json.dumps({"format": "disthook.save", "version": 99}))
    buf.seek(0)
    with pytest.raises(RuntimeError, match="file format version 99 is not supported"):
        load(buf)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("notes.txt", "hello")
    buf.seek(0)
    with pytest.raises(RuntimeError, match="is a zip archive but not a checkpoint"):
        load(buf)


def test_arrays_are_never_unpickled():
    with pytest.raises(ValueError, match="allow_pickle=False"):
        load(v1_file({"tensor": 0}, [np.array([object()], dtype=object)]))


def test_map_location_and_weights_only():
    buf = io.BytesIO()
    save(disthook.ones(1), buf)
    for where in (None, "cpu", disthook.device("cpu"), lambda s, loc: s, {"cuda:0": "cpu"}):
        buf.seek(0)
        assert load(buf, map_location=where, weights_only=True).tolist() == [1.0]
    buf.seek(0)
    assert load(buf, weights_only=False).tolist() == [1.0]
    buf.seek(0)
    with pytest.raises(RuntimeError, match="^Attempting to deserialize object on a CUDA device"):
        load(buf, map_location="cuda:0")


class RNNModel(nn.Module):
    """pytorch/examples' word language model, in small: saved and reloaded whole."""

    def __init__(self):
        super().__init__()
        self.encoder = nn.Embedding(10, 4)
        self.rnn = nn.LSTM(4, 5, 2)
        self.decoder = nn.Linear(5, 10)

    def forward(self, ids):
        return self.decoder(self.rnn(self.encoder(ids))[0])


def test_a_language_model_saved_whole_reloads_as_the_examples_do(tmp_path):
    disthook.manual_seed(1)
    model = RNNModel()
    with open(tmp_path / "model.pt", "wb") as f:
        save(model, f)
    with open(tmp_path / "model.pt", "rb") as f:
        back = load(f, weights_only=False)  # torch 2.13 needs weights_only=False here too
    back.rnn.flatten_parameters()
    ids = disthook.tensor([[1, 2], [3, 4], [5, 6]])
    assert type(back) is RNNModel and disthook.equal(back(ids), model(ids))


def test_map_location_callables_may_use_torchs_default_restore_location():
    from disthook.serialization import default_restore_location, location_tag

    buf = io.BytesIO()
    save({"w": disthook.ones(2)}, buf)
    buf.seek(0)
    seen = []

    def to_cpu(storage, location):
        seen.append((location, location_tag(storage)))
        return default_restore_location(storage, "cpu")

    assert load(buf, map_location=to_cpu)["w"].tolist() == [1.0, 1.0]
    assert seen == [("cpu", "cpu")]
    buf.seek(0)
    with pytest.raises(RuntimeError, match="^Attempting to deserialize object on a CUDA"):
        load(buf, map_location=lambda s, loc: default_restore_location(s, "cuda:0"))
