"""Checkpoints as real programs make them: views keep their storage through a load and
a save, training checkpoints resume (LR schedulers, the RNG), every dtype torch writes. The
files are made at test time, by disthook itself or (where installed) by torch."""
from __future__ import annotations

import io

import numpy as np
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


# ---- a training checkpoint, as a training script writes one ----------------------------------

def trainer(lib, optimizer: str, schedule: str):
    lib.manual_seed(0)
    nn, sched = lib.nn, lib.optim.lr_scheduler
    model = nn.Sequential(nn.BatchNorm1d(4), nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    if optimizer == "adamw":
        opt = lib.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1, amsgrad=True)
    else:
        opt = lib.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True)
    if schedule == "onecycle":
        scheduler = sched.OneCycleLR(opt, max_lr=0.05, total_steps=20, three_phase=True)
    else:
        scheduler = sched.SequentialLR(opt, [sched.LinearLR(opt, 0.1, total_iters=2),
                                             sched.CosineAnnealingLR(opt, 10)], milestones=[2])
    return model, opt, scheduler, lib.amp.GradScaler("cpu", init_scale=256.0, growth_interval=2)


BATCHES = np.random.default_rng(1).standard_normal((6, 5, 6)).astype(np.float32)


def train(lib, parts, steps) -> None:
    model, opt, scheduler, scaler = parts
    for i in steps:
        x, y = lib.tensor(BATCHES[i, :, :4]), lib.tensor(BATCHES[i, :, 4:])
        opt.zero_grad()
        scaler.scale(((model(x) - y) ** 2).mean()).backward()
        scaler.step(opt)
        scaler.update()
        scheduler.step()


def checkpoint(parts) -> dict:
    model, opt, scheduler, scaler = parts
    return {"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 3,
            "scheduler": scheduler.state_dict(), "scaler": scaler.state_dict()}


def resume(lib, parts, ckpt) -> None:
    model, opt, scheduler, scaler = parts
    model.load_state_dict(ckpt["model"])
    opt.load_state_dict(ckpt["optimizer"])
    scheduler.load_state_dict(ckpt["scheduler"])
    scaler.load_state_dict(ckpt["scaler"])


def same_state(ours, theirs, where="") -> None:
    """Every tensor bit for bit, every other value equal, container by container."""
    torch = pytest.importorskip("torch")
    if isinstance(theirs, torch.Tensor):
        assert ours.dtype.__repr__() == str(theirs.dtype) and ours.shape == theirs.shape, where
        assert ours.numpy().tobytes() == theirs.numpy().tobytes(), where
    elif isinstance(theirs, dict):
        assert sorted(map(str, ours)) == sorted(map(str, theirs)), where
        for key in theirs:
            same_state(ours[key], theirs[key], f"{where}/{key}")
    elif isinstance(theirs, (list, tuple)):
        assert type(ours) is type(theirs) and len(ours) == len(theirs), where
        for i, (a, b) in enumerate(zip(ours, theirs)):
            same_state(a, b, f"{where}[{i}]")
    else:
        assert type(ours) is type(theirs) and ours == theirs, (where, ours, theirs)


@pytest.mark.parametrize("optimizer,schedule", [("adamw", "onecycle"), ("sgd", "sequential")])
def test_a_training_run_torch_checkpointed_resumes_here_and_back(tmp_path, optimizer,
                                                                 schedule):
    torch = pytest.importorskip("torch")
    theirs = trainer(torch, optimizer, schedule)
    train(torch, theirs, range(3))
    torch.save(checkpoint(theirs), tmp_path / "ckpt.pt")
    ours = trainer(disthook, optimizer, schedule)
    resume(disthook, ours, disthook.load(tmp_path / "ckpt.pt"))
    same_state(checkpoint(ours), checkpoint(theirs))  # what was loaded is what was saved
    train(torch, theirs, range(3, 6))
    train(disthook, ours, range(3, 6))
    assert ours[1].param_groups[0]["lr"] == theirs[1].param_groups[0]["lr"]
    assert ours[3].get_scale() == theirs[3].get_scale()
    for (name, a), b in zip(ours[0].state_dict().items(), theirs[0].state_dict().values()):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-7, err_msg=name)

    # and our checkpoint of the run resumes in torch
    disthook.save(checkpoint(ours), tmp_path / "ours.pt")
    again = trainer(torch, optimizer, schedule)
    resume(torch, again, torch.load(tmp_path / "ours.pt"))
    same_state(checkpoint(ours), checkpoint(again))
    train(torch, again, range(3, 5))
    train(disthook, ours, range(3, 5))
    assert ours[1].param_groups[0]["lr"] == again[1].param_groups[0]["lr"]


def test_an_rng_state_torch_made_is_refused_saying_why():
    torch = pytest.importorskip("torch")
    state = disthook.tensor(torch.get_rng_state().numpy())
    with pytest.raises(RuntimeError, match=r"PyTorch's \(its CPU generator's mt19937 state\).*"
                                           r"torch\.manual_seed"):
        disthook.set_rng_state(state)


def test_rng_states_disthook_saved_resume_the_stream():
    state = disthook.get_rng_state()
    expected = disthook.rand(4)
    disthook.set_rng_state(disthook.load(saved({"rng": state}))["rng"])
    assert disthook.equal(disthook.rand(4), expected)
    with pytest.raises(RuntimeError, match="not one that disthook's get_rng_state"):
        disthook.set_rng_state(disthook.zeros(7, dtype=disthook.uint8))
    with pytest.raises(TypeError, match="RNG state must be a torch.ByteTensor"):
        disthook.set_rng_state(disthook.zeros(7))


# ---- dtypes --------------------------------------------------------------------------------

DTYPES = ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32",
          "float64")


def every_dtype(torch) -> dict:
    values = torch.tensor([[0.0, -1.5, 3.25], [65504.0, -0.0, 1e-3]])
    out = {name: values.to(getattr(torch, name)) for name in DTYPES}
    out.update(scalar=torch.tensor(2.5, dtype=torch.float64), empty=torch.zeros(2, 0, 3))
    return out


@pytest.mark.parametrize("legacy", [False, True])
def test_every_dtype_torch_writes_loads_bit_for_bit(tmp_path, legacy):
    torch = pytest.importorskip("torch")
    theirs = every_dtype(torch)
    torch.save(theirs, tmp_path / "d.pt", _use_new_zipfile_serialization=not legacy)
    ours = disthook.load(tmp_path / "d.pt")
    for name, t in theirs.items():  # (bfloat16 as its bits: neither gives it to numpy)
        bf16 = t.dtype == torch.bfloat16
        want = (t.view(torch.int16) if bf16 else t).numpy()
        got = (ours[name].view(disthook.int16) if bf16 else ours[name]).numpy()
        assert str(ours[name].dtype) == str(t.dtype)
        assert (got.dtype, got.shape, got.tobytes()) == (want.dtype, want.shape, want.tobytes())


def test_unsigned_dtypes_disthook_lacks_are_refused_saying_what_to_do(tmp_path):
    torch = pytest.importorskip("torch")
    torch.save({"ids": torch.tensor([1, 2]).to(torch.uint16)}, tmp_path / "u.pt")
    for weights_only in (True, False):
        with pytest.raises(__import__("pickle").UnpicklingError) as caught:
            disthook.load(tmp_path / "u.pt", weights_only=weights_only)
        text = str(caught.value)
        assert "torch.uint16" in text and "t.to(torch.int64)" in text
        assert "weights_only=False will load it" not in text


# ---- state dicts of older versions ----------------------------------------------------------

def old_batchnorm_state(lib) -> dict:
    """A Sequential(Linear, BatchNorm1d) state dict as torch before 0.4.1 wrote it: BatchNorm
    at version 1, without num_batches_tracked."""
    model = lib.nn.Sequential(lib.nn.Linear(3, 4), lib.nn.BatchNorm1d(4))
    state = model.state_dict()
    del state["1.num_batches_tracked"]
    state._metadata["1"]["version"] = 1
    return state


def test_norm_layers_are_at_torchs_version_and_load_older_state_dicts():
    model = disthook.nn.Sequential(disthook.nn.Linear(3, 4), disthook.nn.BatchNorm1d(4),
                                   disthook.nn.InstanceNorm1d(4))
    assert {k: v["version"] for k, v in model.state_dict()._metadata.items()} == \
        {"": 1, "0": 1, "1": 2, "2": 2}
    model[1].num_batches_tracked.fill_(5)
    result = model[:2].load_state_dict(disthook.load(saved(old_batchnorm_state(disthook))))
    assert result.missing_keys == [] and model[1].num_batches_tracked.item() == 5

    # an instance norm state dict from before versions, with running statistics it no
    # longer has
    stale = {"running_mean": disthook.zeros(4), "running_var": disthook.ones(4)}
    with pytest.raises(RuntimeError, match=r'Unexpected running stats buffer\(s\) '
                                           r'"running_mean" and "running_var" for '
                                           r'InstanceNorm1d with track_running_stats=False'):
        disthook.nn.InstanceNorm1d(4).load_state_dict(stale)


def test_an_old_batchnorm_state_dict_from_torch_loads_as_in_torch(tmp_path):
    torch = pytest.importorskip("torch")
    torch.save(old_batchnorm_state(torch), tmp_path / "old.pt")
    ours = disthook.nn.Sequential(disthook.nn.Linear(3, 4), disthook.nn.BatchNorm1d(4))
    theirs = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    assert str(ours.load_state_dict(disthook.load(tmp_path / "old.pt"))) == \
        str(theirs.load_state_dict(torch.load(tmp_path / "old.pt")))
    same_state(ours.state_dict(), theirs.state_dict())
    back = torch.load(saved(ours.state_dict()))
    assert back._metadata == theirs.state_dict()._metadata


# ---- safetensors ---------------------------------------------------------------------------

def test_tensors_read_from_a_safetensors_file_save_again(tmp_path):
    from disthook.safetensors import load_file, save_file

    w = disthook.arange(6.0).reshape(2, 3)
    save_file({"emb.weight": w, "norm.bias": disthook.zeros(3), "empty": disthook.zeros(0)},
              tmp_path / "a.safetensors")
    state = load_file(tmp_path / "a.safetensors")  # disjoint parts of the file's one buffer
    save_file({k.replace("emb.", "embed."): v for k, v in state.items()},
              tmp_path / "b.safetensors")
    assert load_file(tmp_path / "b.safetensors")["embed.weight"].tolist() == w.tolist()
    # each loaded tensor has a storage of its own, as safetensors.torch gives it
    assert state["norm.bias"].untyped_storage().nbytes() == 12
    # disjoint parts of one tensor save; tensors that overlap are refused, naming both
    save_file({"r0": w[0], "r1": w[1]}, tmp_path / "rows.safetensors")
    with pytest.raises(RuntimeError, match="tensors 'w' and 'row' share memory"):
        save_file({"w": w, "row": w[1]}, tmp_path / "c.safetensors")


def test_safetensors_files_both_ways_with_the_libraries_numpy_and_torch_apis(tmp_path):
    st_numpy = pytest.importorskip("safetensors.numpy")
    st_torch = pytest.importorskip("safetensors.torch")
    from disthook.safetensors import load_file, save_file

    arrays = {name: np.array([[0.0, -1.5], [3.25, 1e-3]]).astype(name)
              for name in ("bool", "uint8", "int8", "int16", "int32", "int64", "float16",
                           "float32", "float64")}
    arrays.update(scalar=np.array(2.5), empty=np.zeros((0, 3), np.float32))
    st_numpy.save_file(arrays, str(tmp_path / "np.safetensors"))
    ours = load_file(tmp_path / "np.safetensors")
    for name, a in arrays.items():
        got = ours[name].numpy()
        assert (got.dtype, got.shape, got.tobytes()) == (a.dtype, a.shape, a.tobytes()), name
    save_file(ours, tmp_path / "ours.safetensors")
    for name, a in st_numpy.load_file(str(tmp_path / "ours.safetensors")).items():
        assert a.dtype == arrays[name].dtype and a.tobytes() == arrays[name].tobytes(), name
    for name, t in st_torch.load_file(str(tmp_path / "ours.safetensors")).items():
        assert t.numpy().tobytes() == arrays[name].tobytes(), name


# ---- whole models under weights_only=True ---------------------------------------------------

class Classifier(disthook.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = disthook.nn.Conv2d(1, 2, 3)
        self.head = disthook.nn.Linear(8, 3)

    def forward(self, x):
        return self.head(self.conv(x).flatten(1))


def test_allowing_our_classes_admits_them_under_the_names_files_give_them():
    model = Classifier()
    allowed = [Classifier, disthook.nn.Conv2d, disthook.nn.Linear]
    buf = saved(model)
    with pytest.raises(__import__("pickle").UnpicklingError,
                       match="GLOBAL torch.nn.modules.conv.Conv2d is not an allowed global"), \
            disthook.serialization.safe_globals([Classifier]):
        disthook.load(buf)
    buf.seek(0)
    with disthook.serialization.safe_globals(allowed):
        back = disthook.load(buf)
        assert disthook.serialization.get_safe_globals() == allowed
    assert type(back.conv) is disthook.nn.Conv2d
    assert back.head.weight.tolist() == model.head.weight.tolist()


def test_a_model_torch_pickled_loads_weights_only_with_its_classes_allowed(tmp_path):
    torch = pytest.importorskip("torch")
    theirs = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.Flatten(),
                                 torch.nn.Linear(8, 3))
    torch.save(theirs, tmp_path / "m.pt")
    nn = disthook.nn
    with disthook.serialization.safe_globals([nn.Sequential, nn.Conv2d, nn.Flatten,
                                              nn.Linear]):
        ours = disthook.load(tmp_path / "m.pt")
    x = np.random.default_rng(0).standard_normal((2, 1, 4, 4)).astype(np.float32)
    with torch.no_grad(), disthook.no_grad():
        np.testing.assert_allclose(ours(disthook.tensor(x)).numpy(),
                                   theirs(torch.tensor(x)).numpy(), atol=1e-6)


# ---- every LR scheduler's state dict is torch's ---------------------------------------------

SCHEDULERS = {
    "StepLR": lambda s, o: s.StepLR(o, 2),
    "MultiStepLR": lambda s, o: s.MultiStepLR(o, [1, 3]),
    "ConstantLR": lambda s, o: s.ConstantLR(o),
    "LinearLR": lambda s, o: s.LinearLR(o),
    "ExponentialLR": lambda s, o: s.ExponentialLR(o, 0.9),
    "CosineAnnealingLR": lambda s, o: s.CosineAnnealingLR(o, 5),
    "PolynomialLR": lambda s, o: s.PolynomialLR(o),
    "CyclicLR": lambda s, o: s.CyclicLR(o, 0.01, 0.1),
    "OneCycleLR": lambda s, o: s.OneCycleLR(o, 0.5, total_steps=10),
    "ReduceLROnPlateau": lambda s, o: s.ReduceLROnPlateau(o),
    "CosineAnnealingWarmRestarts": lambda s, o: s.CosineAnnealingWarmRestarts(o, 3),
    "SequentialLR": lambda s, o: s.SequentialLR(o, [s.ConstantLR(o), s.ExponentialLR(o, 0.9)],
                                                [2]),
}


def scheduled(lib, name: str):
    params = [lib.nn.Parameter(lib.ones(2)), lib.nn.Parameter(lib.ones(2))]
    opt = lib.optim.SGD([{"params": params[:1]}, {"params": params[1:], "lr": 0.2}], lr=0.1,
                        momentum=0.9)
    return opt, SCHEDULERS[name](lib.optim.lr_scheduler, opt)


@pytest.mark.parametrize("name", sorted(SCHEDULERS))
def test_scheduler_state_dicts_are_torchs_both_ways(name):
    torch = pytest.importorskip("torch")
    runs = {}
    for lib in (torch, disthook):
        opt, scheduler = scheduled(lib, name)
        for _ in range(3):
            opt.step()
            scheduler.step(1.0) if name == "ReduceLROnPlateau" else scheduler.step()
        runs[lib] = scheduler
    same_state(runs[disthook].state_dict(), runs[torch].state_dict())
    ours, theirs = scheduled(disthook, name)[1], scheduled(torch, name)[1]
    ours.load_state_dict(disthook.load(saved(runs[torch].state_dict(), lib=torch)))
    theirs.load_state_dict(torch.load(saved(runs[disthook].state_dict())))
    same_state(ours.state_dict(), theirs.state_dict())


def test_warm_restarts_never_warn_about_the_order_of_steps():
    opt, scheduler = scheduled(disthook, "CosineAnnealingWarmRestarts")
    with __import__("warnings").catch_warnings():
        __import__("warnings").simplefilter("error")
        scheduler.step()  # before the optimizer's: torch's warm restarts say nothing either
        opt.step()
        scheduler.step()
    assert scheduler.state_dict()["_step_count"] == 0
