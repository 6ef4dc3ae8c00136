"""disthook.save / disthook.load: round trips, sharing, refusals, torch-made files."""
from __future__ import annotations

import io
import json
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


def test_what_cannot_be_saved_is_named():
    with pytest.raises(TypeError, match=r"^disthook.save cannot store "
                       r"disthook.nn.modules.linear.Linear \(at obj\['m'\]\): it stores "
                       r"tensors, .* and never pickles. Save its state_dict\(\) instead"):
        save({"m": nn.Linear(1, 1)}, io.BytesIO())
    with pytest.raises(TypeError, match="cannot store builtins.function"):
        save([lambda: 1], io.BytesIO())
    with pytest.raises(TypeError, match="cannot store builtins.set"):
        save({1, 2}, io.BytesIO())


def test_files_written_by_torch_are_refused_with_a_way_out(tmp_path):
    torch = pytest.importorskip("torch")
    path = tmp_path / "torch.pt"
    torch.save({"w": torch.ones(2)}, path)
    with pytest.raises(RuntimeError, match=r"was written by torch.save: a pickle archive, "
                       r"which disthook never reads .* numpy.savez"):
        load(path)
    # the suggested conversion works
    npz = tmp_path / "weights.npz"
    np.savez(npz, **{k: v.numpy() for k, v in torch.load(path).items()})
    assert load(npz)["w"].tolist() == [1.0, 1.0]


def test_not_a_zip_and_corrupt_manifests():
    with pytest.raises(RuntimeError, match="is not a disthook.save file"):
        load(io.BytesIO(b"plain bytes"))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("disthook.json", json.dumps({"format": "disthook.save", "version": 1,
                                                "object": {"tensor": 5}, "arrays": []}))
    buf.seek(0)
    with pytest.raises(RuntimeError, match=r"not a valid disthook.save file \(tensor index 5"):
        load(buf)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("disthook.json", json.dumps({"format": "disthook.save", "version": 99}))
    buf.seek(0)
    with pytest.raises(RuntimeError, match="file format version 99 is not supported"):
        load(buf)


def test_arrays_are_never_unpickled():
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("disthook.json", json.dumps({"format": "disthook.save", "version": 1,
                                                "object": {"tensor": 0},
                                                "arrays": ["0.npy"]}))
        inner = io.BytesIO()
        np.save(inner, np.array([object()], dtype=object), allow_pickle=True)
        z.writestr("0.npy", inner.getvalue())
    buf.seek(0)
    with pytest.raises(ValueError, match="allow_pickle=False"):
        load(buf)


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
