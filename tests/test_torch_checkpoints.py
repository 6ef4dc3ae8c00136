"""Checkpoints across real torch and disthook, both ways: torch.save -> disthook.load and
disthook.save -> torch.load, for state dicts, whole modules, optimizers, nested containers,
and a GPT-2-shaped state dict with Hugging Face's key names (synthetic weights)."""
from __future__ import annotations

import math

import numpy as np
import pytest

import disthook

torch = pytest.importorskip("torch")


def arrays_equal(ours, theirs) -> bool:
    a = ours.detach().numpy() if isinstance(ours, disthook.Tensor) else ours
    b = theirs.detach().numpy() if isinstance(theirs, torch.Tensor) else theirs
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)


def make_net(lib):
    """The same small network in torch or disthook (by the library passed)."""
    nn = lib.nn
    return nn.Sequential(nn.Conv2d(1, 3, 3, padding=1), nn.BatchNorm2d(3), nn.ReLU(),
                         nn.Flatten(), nn.Linear(3 * 4 * 4, 6), nn.LayerNorm(6), nn.Tanh(),
                         nn.Linear(6, 2))


def run(model, lib, x):
    model.eval()
    with lib.no_grad():
        return model(lib.tensor(x)).numpy()


X = np.random.default_rng(0).standard_normal((2, 1, 4, 4)).astype(np.float32)


def test_state_dict_saved_by_torch_loads_into_our_model_and_back(tmp_path):
    torch.manual_seed(0)
    theirs = make_net(torch)
    theirs(torch.randn(5, 1, 4, 4))  # running stats move off their initial values
    torch.save(theirs.state_dict(), tmp_path / "sd.pt")
    sd = disthook.load(tmp_path / "sd.pt")
    assert list(sd) == list(theirs.state_dict())
    assert sd._metadata == theirs.state_dict()._metadata
    assert all(arrays_equal(sd[k], v) for k, v in theirs.state_dict().items())
    ours = make_net(disthook)
    ours.load_state_dict(sd)
    np.testing.assert_allclose(run(ours, disthook, X), run(theirs, torch, X), atol=1e-6)

    # and back: torch reads our file with its default weights_only=True
    disthook.save(ours.state_dict(), tmp_path / "ours.pt")
    again = make_net(torch)
    again.load_state_dict(torch.load(tmp_path / "ours.pt"))
    np.testing.assert_allclose(run(again, torch, X), run(theirs, torch, X), atol=0)
    # our records are aligned as torch aligns its own, so torch can map them too
    mapped = torch.load(tmp_path / "ours.pt", mmap=True)
    assert all(arrays_equal(sd[k], mapped[k]) for k in sd)


def test_whole_modules_both_ways(tmp_path):
    torch.manual_seed(1)
    theirs = make_net(torch)
    torch.save(theirs, tmp_path / "model.pt")
    with pytest.raises(__import__("pickle").UnpicklingError,
                       match=r"(?s)^Weights only load failed\. .*weights_only=False.*trust.*"
                             r"Unsupported global: GLOBAL torch\.nn\.modules\.container\."
                             r"Sequential is not an allowed global"):
        disthook.load(tmp_path / "model.pt")
    ours = disthook.load(tmp_path / "model.pt", weights_only=False)
    assert type(ours) is disthook.nn.Sequential and type(ours[4]) is disthook.nn.Linear
    assert isinstance(ours[0].weight, disthook.nn.Parameter) and ours[0].weight.requires_grad
    np.testing.assert_allclose(run(ours, disthook, X), run(theirs, torch, X), atol=1e-6)
    ours[4].weight.data.mul_(2)  # a change torch must see

    disthook.save(ours, tmp_path / "ours.pt")
    back = torch.load(tmp_path / "ours.pt", weights_only=False)
    assert type(back) is torch.nn.Sequential and type(back[5]) is torch.nn.LayerNorm
    np.testing.assert_allclose(run(back, torch, X), run(ours, disthook, X), atol=1e-6)
    assert arrays_equal(ours[4].weight, back[4].weight)


def test_recurrent_and_attention_modules_both_ways(tmp_path):
    torch.manual_seed(4)
    x = torch.randn(3, 2, 8)
    for theirs in (torch.nn.LSTM(8, 5, 2), torch.nn.GRU(8, 4),
                   torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0)):
        theirs.eval()
        torch.save(theirs, tmp_path / "m.pt")
        ours = disthook.load(tmp_path / "m.pt", weights_only=False)
        assert type(ours).__name__ == type(theirs).__name__
        first = (lambda out: out[0] if isinstance(out, tuple) else out)
        with torch.no_grad(), disthook.no_grad():
            expected = first(theirs(x)).numpy()
            np.testing.assert_allclose(first(ours(disthook.tensor(x.numpy()))).numpy(),
                                       expected, atol=1e-5)
            disthook.save(ours, tmp_path / "ours.pt")
            back = torch.load(tmp_path / "ours.pt", weights_only=False)
            np.testing.assert_allclose(first(back(x)).numpy(), expected, atol=1e-6)


def test_optimizer_state_both_ways(tmp_path):
    torch.manual_seed(2)
    theirs = torch.nn.Linear(3, 2)
    ours = disthook.nn.Linear(3, 2)
    ours.load_state_dict({k: disthook.tensor(v.numpy()) for k, v in
                          theirs.state_dict().items()})
    t_opt = torch.optim.Adam(theirs.parameters(), lr=0.1)
    for _ in range(2):
        t_opt.zero_grad()
        theirs(torch.ones(4, 3)).square().sum().backward()
        t_opt.step()
    torch.save({"model": theirs.state_dict(), "optimizer": t_opt.state_dict()},
               tmp_path / "ckpt.pt")
    ckpt = disthook.load(tmp_path / "ckpt.pt")
    ours.load_state_dict(ckpt["model"])
    d_opt = disthook.optim.Adam(ours.parameters(), lr=0.5)
    d_opt.load_state_dict(ckpt["optimizer"])
    assert d_opt.param_groups[0]["lr"] == 0.1
    # one more step on both from the same state gives the same weights
    t_opt.zero_grad()
    theirs(torch.ones(4, 3)).square().sum().backward()
    t_opt.step()
    d_opt.zero_grad()
    ours(disthook.ones(4, 3)).square().sum().backward()
    d_opt.step()
    np.testing.assert_allclose(ours.weight.detach().numpy(), theirs.weight.detach().numpy(),
                               rtol=1e-6)

    disthook.save(d_opt.state_dict(), tmp_path / "ours.pt")
    again = torch.optim.Adam(theirs.parameters(), lr=0.5)
    again.load_state_dict(torch.load(tmp_path / "ours.pt"))
    for key in ("step", "exp_avg", "exp_avg_sq"):
        assert arrays_equal(d_opt.state_dict()["state"][0][key],
                            again.state_dict()["state"][0][key])

    # a whole optimizer, pickled, both ways (trusted files)
    torch.save(t_opt, tmp_path / "opt.pt")
    whole = disthook.load(tmp_path / "opt.pt", weights_only=False)
    assert type(whole) is disthook.optim.Adam
    assert arrays_equal(whole.state_dict()["state"][0]["exp_avg"],
                        t_opt.state_dict()["state"][0]["exp_avg"])
    disthook.save(d_opt, tmp_path / "ours_opt.pt")
    assert type(torch.load(tmp_path / "ours_opt.pt", weights_only=False)) is torch.optim.Adam


def nested(lib):
    w = lib.arange(12, dtype=lib.float32).reshape(3, 4)
    return {"epoch": 3, "best": float("inf"), "tag": None, "name": "run-1", "big": 2**70,
            "raw": b"\x00\xff", "flags": {1, 2}, "ratio": 0.25,
            "tensors": [w, (w[1], "row"), {"t": w.t(), "ints": lib.tensor([1, -2, 3]),
                                           "half": lib.ones(2, dtype=lib.float16),
                                           "mask": lib.tensor([True, False]),
                                           "scalar": lib.tensor(2.5)}],
            "dtype": lib.float64, "size": lib.Size([2, 3]), "device": lib.device("cpu"),
            "grad": lib.ones(2, requires_grad=True)}


def check_nested(ours, theirs) -> None:
    for key in ("epoch", "best", "tag", "name", "big", "raw", "flags", "ratio"):
        assert ours[key] == theirs[key] and type(ours[key]) is type(theirs[key])
    for (a, b) in ((ours["tensors"][0], theirs["tensors"][0]),
                   (ours["tensors"][1][0], theirs["tensors"][1][0])):
        assert arrays_equal(a, b)
    assert ours["tensors"][1][1] == theirs["tensors"][1][1] == "row"
    for key, value in theirs["tensors"][2].items():
        assert arrays_equal(ours["tensors"][2][key], value), key
    assert str(ours["dtype"]) == str(theirs["dtype"]) == "torch.float64"
    assert tuple(ours["size"]) == tuple(theirs["size"]) == (2, 3)
    assert type(ours["size"]).__name__ == type(theirs["size"]).__name__ == "Size"
    assert str(ours["device"]) == str(theirs["device"]) == "cpu"
    assert ours["grad"].requires_grad and theirs["grad"].requires_grad


def test_nested_containers_both_ways_and_views_stay_views(tmp_path):
    torch.save(nested(torch), tmp_path / "theirs.pt")
    ours = disthook.load(tmp_path / "theirs.pt")
    check_nested(ours, nested(torch))
    ours["tensors"][0][1, 2] = 100.0  # w[1] and w.t() are views of w's storage, as in torch
    assert ours["tensors"][1][0][2].item() == 100.0
    assert ours["tensors"][2]["t"][2, 1].item() == 100.0

    disthook.save(nested(disthook), tmp_path / "ours.pt")
    theirs = torch.load(tmp_path / "ours.pt")
    check_nested(nested(disthook), theirs)
    theirs["tensors"][0][1, 2] = 100.0
    assert theirs["tensors"][1][0][2].item() == 100.0
    assert theirs["tensors"][2]["t"][2, 1].item() == 100.0


def test_checkpoints_from_other_devices_dtypes_and_options(tmp_path):
    t = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    torch.save({"w": t, "h": t.to(torch.bfloat16)}, tmp_path / "a.pt")
    back = disthook.load(tmp_path / "a.pt", map_location="cpu")
    assert back["h"].dtype == disthook.bfloat16 and back["h"].tolist() == t.tolist()
    torch.save({"w": t}, tmp_path / "a.pt")
    for where in (None, "cpu", disthook.device("cpu"), {"cuda:0": "cpu"},
                  lambda storage, loc: storage):
        assert disthook.load(tmp_path / "a.pt", map_location=where)["w"].tolist() == t.tolist()
    mapped = disthook.load(tmp_path / "a.pt", mmap=True)
    assert mapped["w"].tolist() == t.tolist()
    mapped["w"][0, 0] = 9.0  # copy-on-write: the file keeps its values
    assert disthook.load(tmp_path / "a.pt")["w"][0, 0].item() == 0.0
    with open(tmp_path / "a.pt", "rb") as fh, pytest.raises(
            ValueError, match="f must be a file path in order to use the mmap"):
        disthook.load(fh, mmap=True)
    with pytest.raises(RuntimeError, match="^Attempting to deserialize object on a CUDA "
                                           "device but torch.cuda.is_available"):
        disthook.load(tmp_path / "a.pt", map_location="cuda:0")
    # a storage saved on a GPU: its location is cuda:0, as torch writes it on a GPU machine
    import io
    import zipfile
    buf = io.BytesIO()
    torch.save(t, buf)
    data = zipfile.ZipFile(buf).read("archive/data.pkl").replace(b"X\x03\x00\x00\x00cpu",
                                                                 b"X\x06\x00\x00\x00cuda:0")
    out = io.BytesIO()
    with zipfile.ZipFile(buf) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            dst.writestr(info.filename, data if info.filename.endswith("data.pkl")
                         else src.read(info))
    out.seek(0)
    with pytest.raises(RuntimeError, match="map_location=torch.device\\('cpu'\\)"):
        disthook.load(out)
    out.seek(0)
    assert disthook.load(out, map_location="cpu").tolist() == t.tolist()
    out.seek(0)
    assert disthook.load(out, map_location={"cuda:0": "cpu"}).tolist() == t.tolist()


def test_safe_globals_admit_what_the_user_allows(tmp_path):
    torch.save({"counter": __import__("collections").Counter(a=2), "c": 1 + 2j,
                "slice": slice(1, 2)}, tmp_path / "a.pt")
    with pytest.raises(__import__("pickle").UnpicklingError,
                       match=r"Unsupported global: GLOBAL builtins\.slice .*"
                             r"add_safe_globals\(\[builtins\.slice\]\)"):
        disthook.load(tmp_path / "a.pt")
    with disthook.serialization.safe_globals([slice]):
        back = disthook.load(tmp_path / "a.pt")
    assert back["slice"] == slice(1, 2) and back["counter"]["a"] == 2 and back["c"] == 1 + 2j
    with pytest.raises(__import__("pickle").UnpicklingError):
        disthook.load(tmp_path / "a.pt")  # the allowance ended with the block


# ---- a GPT-2-shaped state dict with Hugging Face's key names ------------------------------

def make_gpt2(lib, vocab=50, n_ctx=16, d=24, n_head=3, n_layer=2):
    """GPT-2 as Hugging Face lays it out (Conv1D weights stored (in, out), tied lm_head, the
    causal mask as a buffer), written for torch; run with ``lib`` as torch."""
    nn, F = lib.nn, lib.nn.functional

    class Conv1D(nn.Module):
        def __init__(self, nf, nx):
            super().__init__()
            self.weight = nn.Parameter(lib.empty(nx, nf).normal_(std=0.02))
            self.bias = nn.Parameter(lib.zeros(nf))

        def forward(self, x):
            return x @ self.weight + self.bias

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("bias", lib.tril(lib.ones(n_ctx, n_ctx, dtype=lib.bool))
                                 .view(1, 1, n_ctx, n_ctx), persistent=True)
            self.c_attn = Conv1D(3 * d, d)
            self.c_proj = Conv1D(d, d)

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.c_attn(x).split(d, dim=2)
            q, k, v = (z.view(b, t, n_head, d // n_head).transpose(1, 2) for z in (q, k, v))
            att = (q @ k.transpose(-1, -2)) / math.sqrt(d // n_head)
            att = att.masked_fill(~self.bias[:, :, :t, :t], float("-inf"))
            y = F.softmax(att, dim=-1) @ v
            return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, d))

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_fc = Conv1D(4 * d, d)
            self.c_proj = Conv1D(d, 4 * d)

        def forward(self, x):
            return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.attn = nn.LayerNorm(d, eps=1e-5), Attention()
            self.ln_2, self.mlp = nn.LayerNorm(d, eps=1e-5), MLP()

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class Transformer(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(n_ctx, d)
            self.h = nn.ModuleList([Block() for _ in range(n_layer)])
            self.ln_f = nn.LayerNorm(d, eps=1e-5)

    class GPT2LMHeadModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.transformer = Transformer()
            self.lm_head = nn.Linear(d, vocab, bias=False)
            self.lm_head.weight = self.transformer.wte.weight  # tied, as in Hugging Face

        def forward(self, ids):
            tr = self.transformer
            x = tr.wte(ids) + tr.wpe(lib.arange(ids.shape[1]))
            for block in tr.h:
                x = block(x)
            return self.lm_head(tr.ln_f(x))

    return GPT2LMHeadModel()


def test_gpt2_state_dict_from_torch_gives_torch_logits(tmp_path):
    torch.manual_seed(3)
    theirs = make_gpt2(torch).eval()
    with torch.no_grad():  # synthetic weights: every tensor moved off its initial value
        for p in theirs.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    sd = theirs.state_dict()
    assert "transformer.h.1.attn.c_attn.weight" in sd and "lm_head.weight" in sd
    torch.save(sd, tmp_path / "pytorch_model.bin")
    ids = torch.randint(0, 50, (2, 11))
    with torch.no_grad():
        expected = theirs(ids).numpy()

    loaded = disthook.load(tmp_path / "pytorch_model.bin", map_location="cpu")
    assert loaded["transformer.h.0.attn.bias"].dtype == disthook.bool
    ours = make_gpt2(disthook).eval()
    ours.load_state_dict(loaded)
    assert ours.lm_head.weight is ours.transformer.wte.weight
    with disthook.no_grad():
        got = ours(disthook.tensor(ids.numpy())).numpy()
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)


def test_our_classes_are_saved_under_names_torch_resolves():
    """Each class of ours that torch has too (in the same module, or public) is written under
    a name that real torch resolves to that class."""
    import importlib
    import pkgutil

    from disthook._serialization.names import torch_name

    pairs = [(disthook.nn, torch.nn), (disthook.optim, torch.optim),
             (disthook.optim.lr_scheduler, torch.optim.lr_scheduler)]
    for info in pkgutil.iter_modules(disthook.nn.modules.__path__):
        try:
            theirs = importlib.import_module(f"torch.nn.modules.{info.name}")
        except ImportError:
            continue
        pairs.append((importlib.import_module(f"disthook.nn.modules.{info.name}"), theirs))
    checked = 0
    for ours, theirs in pairs:
        for name in dir(ours):
            cls = getattr(ours, name)
            if not isinstance(cls, type) or not isinstance(getattr(theirs, name, None), type) \
                    or not cls.__module__.startswith("disthook"):
                continue
            module, qualname = torch_name(cls)
            found = importlib.import_module(module)
            for part in qualname.split("."):
                found = getattr(found, part, None)
            assert found is getattr(theirs, name), (name, module, qualname)
            checked += 1
    assert checked > 80


def test_gpt2_from_a_safetensors_file_gives_torch_logits(tmp_path):
    st_torch = pytest.importorskip("safetensors.torch")
    from disthook.safetensors import load_file, load_model

    torch.manual_seed(5)
    theirs = make_gpt2(torch).eval()
    st_torch.save_model(theirs, str(tmp_path / "model.safetensors"))  # drops the tied copy
    ids = torch.randint(0, 50, (1, 9))
    with torch.no_grad():
        expected = theirs(ids).numpy()
    ours = make_gpt2(disthook).eval()
    missing, unexpected = load_model(ours, tmp_path / "model.safetensors")
    assert missing == [] and unexpected == []
    with disthook.no_grad():
        got = ours(disthook.tensor(ids.numpy())).numpy()
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)

    st_torch.save_file({"h": torch.tensor([1.5, -2.25], dtype=torch.bfloat16)},
                       str(tmp_path / "bf16.safetensors"))
    h = load_file(tmp_path / "bf16.safetensors")["h"]
    assert h.dtype == disthook.bfloat16 and h.tolist() == [1.5, -2.25]


def test_files_in_torchs_format_before_1_6(tmp_path):
    torch.manual_seed(6)
    theirs = make_net(torch)
    nested_obj = nested(torch)
    del nested_obj["tensors"][2]["half"]  # (any dtype works; keep the file small)
    torch.save(nested_obj, tmp_path / "old.pt", _use_new_zipfile_serialization=False)
    ours = disthook.load(tmp_path / "old.pt")
    expected = nested(torch)
    del expected["tensors"][2]["half"]
    check_nested(ours, expected)
    ours["tensors"][0][1, 2] = 100.0  # views still share their storage
    assert ours["tensors"][2]["t"][2, 1].item() == 100.0
    torch.save(theirs, tmp_path / "old_model.pt", _use_new_zipfile_serialization=False)
    model = disthook.load(tmp_path / "old_model.pt", weights_only=False)
    np.testing.assert_allclose(run(model, disthook, X), run(theirs, torch, X), atol=1e-6)


def test_unsafe_globals_are_listed_and_the_environment_can_force_the_default(tmp_path,
                                                                             monkeypatch):
    from disthook.serialization import get_unsafe_globals_in_checkpoint

    torch.save(torch.nn.Sequential(torch.nn.Linear(2, 2)), tmp_path / "m.pt")
    unsafe = get_unsafe_globals_in_checkpoint(tmp_path / "m.pt")
    assert sorted(unsafe) == sorted(
        torch.serialization.get_unsafe_globals_in_checkpoint(tmp_path / "m.pt"))
    assert "torch.nn.modules.linear.Linear" in unsafe
    torch.save({"w": torch.ones(2)}, tmp_path / "sd.pt")
    assert get_unsafe_globals_in_checkpoint(tmp_path / "sd.pt") == []

    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    with pytest.warns(UserWarning, match="TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"):
        assert type(disthook.load(tmp_path / "m.pt")) is disthook.nn.Sequential
    with pytest.raises(__import__("pickle").UnpicklingError):
        disthook.load(tmp_path / "m.pt", weights_only=True)  # an explicit choice wins
    monkeypatch.setenv("TORCH_FORCE_WEIGHTS_ONLY_LOAD", "1")
    with pytest.raises(__import__("pickle").UnpicklingError):
        disthook.load(tmp_path / "m.pt", weights_only=False)  # forced, whatever was asked


def test_attributes_set_on_tensors_travel_both_ways(tmp_path):
    for lib, loader in ((torch, disthook.load), (disthook, torch.load)):
        t = lib.ones(2)
        t.tag = "x"
        p = lib.nn.Parameter(lib.zeros(2))
        p.note = 3
        lib.save({"t": t, "p": p}, tmp_path / "attrs.pt")
        back = loader(tmp_path / "attrs.pt")
        assert back["t"].tag == "x" and back["p"].note == 3
        assert type(back["p"]).__name__ == "Parameter" and back["p"].requires_grad


def test_a_pickled_model_and_optimizer_from_torch_train_on(tmp_path):
    torch.manual_seed(7)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
    torch.save({"model": model, "opt": opt}, tmp_path / "both.pt")
    back = disthook.load(tmp_path / "both.pt", weights_only=False)
    ours, ours_opt = back["model"], back["opt"]
    assert ours_opt.param_groups[0]["params"][0] is ours.weight  # one object, as pickled
    for m, o, lib in ((model, opt, torch), (ours, ours_opt, disthook)):
        o.zero_grad()
        m(lib.ones(1, 3)).sum().backward()
        o.step()  # momentum from the saved state
    np.testing.assert_allclose(ours.weight.detach().numpy(), model.weight.detach().numpy(),
                               rtol=1e-6)
