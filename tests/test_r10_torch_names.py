"""torch names public programs use that disthook lacked (ranked by how many of 40 code bases use
them): ``torch.nn.modules.utils._pair`` and kin, ``torch.hub.load_state_dict_from_url`` /
``download_url_to_file`` / ``torch.utils.model_zoo.load_url``, ``torch._assert``,
``torch._check``, ``torch.optim.lr_scheduler._LRScheduler``, and ``record_function`` from
``torch.profiler`` / ``torch.autograd.profiler``. Each was an AttributeError or a refusal;
each is compared with torch here."""
import collections
import hashlib
import weakref

import numpy as np
import pytest

import disthook

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("value", [3, (1, 2), [4, 5, 6], "ab", (7,)], ids=repr)
def test_ntuple_helpers_as_torch(value):
    import torch.nn.modules.utils as theirs

    import disthook.nn.modules.utils as ours

    for name in ("_single", "_pair", "_triple", "_quadruple"):
        assert getattr(ours, name)(value) == getattr(theirs, name)(value)
        assert getattr(ours, name).__name__ == name
    assert ours._ntuple(5, "five")(value) == theirs._ntuple(5, "five")(value)
    if isinstance(value, (tuple, list)):
        assert ours._reverse_repeat_tuple(value, 2) == theirs._reverse_repeat_tuple(value, 2)


def test_list_with_default_and_prefix_helper_as_torch():
    import torch.nn.modules.utils as theirs

    import disthook.nn.modules.utils as ours

    assert ours._list_with_default([None, 3], [2, 8, 9]) == theirs._list_with_default(
        [None, 3], [2, 8, 9])
    assert ours._list_with_default(4, [2]) == 4
    for lib in (ours, theirs):
        with pytest.raises(ValueError, match="at least 3"):
            lib._list_with_default([1, 2], [5, 6])
    states = []
    for lib in (ours, theirs):
        sd = collections.OrderedDict([("module.a", 1), ("module.b.c", 2), ("other", 3)])
        sd._metadata = collections.OrderedDict([("", {}), ("module", {"v": 1}),
                                                ("module.b", {"v": 2})])
        lib.consume_prefix_in_state_dict_if_present(sd, "module.")
        states.append((list(sd.items()), list(sd._metadata.items())))
    assert states[0] == states[1]


def test_a_conv_layer_written_with_pair_runs():
    from disthook.nn.modules.utils import _pair

    class Conv(disthook.nn.Module):  # the pattern of timm's and detectron2's wrappers
        def __init__(self):
            super().__init__()
            self.kernel_size, self.stride = _pair(3), _pair(1)
            self.weight = disthook.nn.Parameter(disthook.ones(2, 1, *self.kernel_size))

        def forward(self, x):
            return disthook.nn.functional.conv2d(x, self.weight, stride=self.stride)

    assert Conv()(disthook.ones(1, 1, 5, 5)).shape == (1, 2, 3, 3)


def test_assert_and_check_as_torch():
    for lib in (torch, disthook):
        lib._assert(lib.tensor(True), "unused")
        lib._assert(len("ab") == 2, "unused")
        with pytest.raises(AssertionError, match="^input must be 4-d$"):
            lib._assert(lib.tensor(False), "input must be 4-d")
        lib._check(True)
        with pytest.raises(RuntimeError, match="^size mismatch$"):
            lib._check(False, lambda: "size mismatch")
        with pytest.raises(RuntimeError, match="Expected cond to be True"):
            lib._check(False)


def test_a_schedule_subclassing_the_old_base_steps_as_torch():
    lrs = []
    for lib in (torch, disthook):
        class Halving(lib.optim.lr_scheduler._LRScheduler):
            def get_lr(self):
                return [base * 0.5 ** self.last_epoch for base in self.base_lrs]

        p = lib.nn.Parameter(lib.zeros(1))
        opt = lib.optim.SGD([p], lr=0.8)
        sched = Halving(opt)
        seen = []
        for _ in range(3):
            opt.step()
            sched.step()
            seen.append(opt.param_groups[0]["lr"])
        assert isinstance(sched, lib.optim.lr_scheduler.LRScheduler)
        lrs.append(seen)
    assert lrs[0] == lrs[1] == [0.4, 0.2, 0.1]


def test_record_function_labels_a_region_without_changing_it():
    results = []
    for lib in (torch, disthook):
        x = lib.tensor([1.0, -2.0, 3.0], requires_grad=True)

        @lib.autograd.profiler.record_function("scaled")
        def scaled(t):
            return t * 2

        with lib.profiler.record_function("block", "args") as label:
            y = scaled(x).relu().sum()
        assert label is not None
        y.backward()
        results.append((y.item(), x.grad.numpy().tolist()))
    assert results[0] == results[1]
    assert disthook.profiler.record_function is disthook.autograd.profiler.record_function
    with pytest.raises(NotImplementedError, match="torch.profiler.profile"):
        disthook.profiler.profile()
    with pytest.raises(NotImplementedError, match="torch.autograd.profiler.profile"):
        disthook.autograd.profiler.profile()


def _checkpoint(tmp_path, name=None):
    src = tmp_path / "served"
    src.mkdir()
    state = {"weight": torch.arange(6.0).reshape(2, 3), "bias": torch.ones(2)}
    path = src / "plain.pth"
    torch.save(state, path)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    named = src / (name or f"net-{digest[:8]}.pth")
    path.rename(named)
    return named, state


@pytest.mark.parametrize("loader", ["hub", "model_zoo"])
def test_load_state_dict_from_url_downloads_once_and_loads_as_torch(tmp_path, capsys, loader):
    served, state = _checkpoint(tmp_path)
    url = served.as_uri()
    ours_load = (disthook.hub.load_state_dict_from_url if loader == "hub"
                 else disthook.utils.model_zoo.load_url)
    theirs = torch.hub.load_state_dict_from_url(url, model_dir=str(tmp_path / "t"),
                                                check_hash=True)
    ours = ours_load(url, model_dir=str(tmp_path / "d"), check_hash=True)
    assert "Downloading" in capsys.readouterr().err
    assert sorted(ours) == sorted(theirs) == sorted(state)
    for key in state:
        assert isinstance(ours[key], disthook.Tensor)
        np.testing.assert_array_equal(ours[key].numpy(), theirs[key].numpy())
    served.unlink()  # the second call reads the cached copy
    again = ours_load(url, model_dir=str(tmp_path / "d"))
    np.testing.assert_array_equal(again["weight"].numpy(), state["weight"].numpy())


def test_a_download_whose_hash_differs_is_refused_as_torch(tmp_path):
    served, _ = _checkpoint(tmp_path, name="net-00000000.pth")
    for lib, where in ((torch, "t"), (disthook, "d")):
        with pytest.raises(RuntimeError, match="invalid hash value"):
            lib.hub.load_state_dict_from_url(served.as_uri(), model_dir=str(tmp_path / where),
                                             check_hash=True, progress=False)
        assert not (tmp_path / where / "net-00000000.pth").exists()


def test_download_url_to_file_and_the_hub_dir(tmp_path, monkeypatch):
    served, _ = _checkpoint(tmp_path, name="w.bin")
    dst = tmp_path / "copy.bin"
    disthook.hub.download_url_to_file(served.as_uri(), str(dst), progress=False)
    assert dst.read_bytes() == served.read_bytes()
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "home"))
    assert disthook.hub.get_dir() == torch.hub.get_dir() == str(tmp_path / "home" / "hub")
    monkeypatch.setattr(disthook.hub, "_hub_dir", None)
    disthook.hub.set_dir(tmp_path / "elsewhere")
    assert disthook.hub.get_dir() == str(tmp_path / "elsewhere")
    with pytest.raises(NotImplementedError, match="torch.hub.load"):
        disthook.hub.load("owner/repo", "model")


@pytest.mark.parametrize("call", [
    lambda lib: lib.linalg.inv(lib.zeros(2, 2)),
    lambda lib: lib.inverse(lib.zeros(2, 2)),
    lambda lib: lib.linalg.solve(lib.zeros(2, 2), lib.ones(2)),
    lambda lib: lib.linalg.cholesky(-lib.eye(2)),
], ids=["inv", "inverse", "solve", "cholesky"])
def test_a_failed_factorization_is_linalg_error_as_torch(call):
    for lib in (torch, disthook):
        with pytest.raises(lib.linalg.LinAlgError) as caught:
            call(lib)
        assert isinstance(caught.value, RuntimeError)


def test_out_of_memory_error_is_a_runtime_error_a_program_can_catch():
    for lib in (torch, disthook):
        assert lib.OutOfMemoryError is lib.cuda.OutOfMemoryError
        assert issubclass(lib.OutOfMemoryError, RuntimeError)
        with pytest.raises(ValueError, match="other"):  # the pattern of peft's and diffusers'
            try:                                        # benchmark scripts
                raise ValueError("other")
            except lib.OutOfMemoryError:
                pytest.fail("caught what it does not name")


def test_refused_warning_and_error_classes_can_be_named_where_python_wants_one():
    import warnings

    for lib in (torch, disthook):
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=lib.jit.TracerWarning)
        with pytest.raises(KeyError):
            try:
                raise KeyError("k")
            except lib.fx.proxy.TraceError:
                pytest.fail("caught what it does not name")
    with pytest.raises(NotImplementedError, match="torch.jit.TracerWarning"):
        disthook.jit.TracerWarning("made")


def test_a_reversible_block_replays_its_dropout_as_torch():
    """The Deterministic wrapper of lucidrains' reversible networks (DALLE-pytorch,
    alphafold2): it reads torch.cuda._initialized, records the generator's state and replays
    it under fork_rng; get/set_device_states come from torch.utils.checkpoint."""
    outs = []
    for lib in (torch, disthook):
        from importlib import import_module

        ckpt = import_module(lib.__name__ + ".utils.checkpoint")
        lib.manual_seed(0)
        net = lib.nn.Dropout(0.5)
        x = lib.ones(8)
        state = lib.get_rng_state()
        assert lib.cuda._initialized is False
        devices, states = ckpt.get_device_states(x)
        assert (devices, states) == ([], [])
        first = net(x)
        with lib.random.fork_rng(devices=devices, enabled=True):
            lib.set_rng_state(state)
            ckpt.set_device_states(devices, states)
            again = net(x)
        np.testing.assert_array_equal(again.numpy(), first.numpy())
        outs.append(first.numpy())
    assert outs[0].shape == outs[1].shape
    with pytest.raises(NotImplementedError, match="no accelerator"):
        disthook.utils.checkpoint.set_device_states([0], [disthook.zeros(1)])


def test_what_timm_and_diffusers_import_from_torch_s_private_corners():
    """timm's _hub: ``from torch.hub import HASH_REGEX, download_url_to_file, urlparse`` (and
    ``_get_torch_home``); diffusers' ControlNet pipelines:
    ``isinstance(unet, torch._dynamo.eval_frame.OptimizedModule)``."""
    for lib in (torch, disthook):
        from importlib import import_module

        hub = import_module(lib.__name__ + ".hub")
        assert hub.urlparse("https://h/x/net-1a2b.pth").path == "/x/net-1a2b.pth"
        assert hub.HASH_REGEX.search("net-1a2b.pth").group(1) == "1a2b"
        assert hub._get_torch_home() == torch.hub._get_torch_home()
        model = lib.nn.Linear(2, 2)
        compiled = lib.compile(model)
        assert isinstance(compiled, lib._dynamo.eval_frame.OptimizedModule)
        assert not isinstance(model, lib._dynamo.eval_frame.OptimizedModule)
        assert compiled._orig_mod is model


def test_swap_tensors_as_torch():
    """peft's LoRA hot-swap and diffusers' group offloading: ``torch.utils.swap_tensors``
    gives a module's parameter object another tensor's contents (it was a refusal)."""
    seen = []
    for lib in (torch, disthook):
        a, b = lib.ones(2), lib.zeros(3, requires_grad=True)
        b.grad = lib.full((3,), 5.0)
        b.note = "kept with the contents"
        lib.utils.swap_tensors(a, b)
        seen.append((a.tolist(), a.requires_grad, a.grad.tolist(), a.note, b.tolist(),
                     b.requires_grad, b.grad, hasattr(b, "note")))
        p, t = lib.nn.Parameter(lib.ones(1)), lib.zeros(1)
        lib.utils.swap_tensors(p, t)
        assert type(p) is lib.Tensor and type(t) is lib.nn.Parameter

        lin = lib.nn.Linear(2, 3)
        with lib.no_grad():
            lin.bias.copy_(lib.tensor([0.1, -0.2, 0.3]))
        x = lib.tensor(np.arange(8.0, dtype=np.float32).reshape(4, 2))
        lin(x).sum().backward()
        weight = lin.weight
        grown = lib.nn.Parameter(lib.tensor(np.arange(6.0, dtype=np.float32).reshape(3, 2)))
        lib.utils.swap_tensors(weight, grown)
        assert lin.weight is weight and weight.grad is None and grown.grad is not None
        lin(x).pow(2).sum().backward()
        seen.append((weight.grad.tolist(), lin(x).tolist() == (x @ weight.T + lin.bias).tolist()))

        held = lib.ones(1)
        keep = weakref.ref(held)
        with pytest.raises(RuntimeError, match="Cannot swap t1 because it has weakref"):
            lib.utils.swap_tensors(held, lib.zeros(1))
        del keep
    assert seen[0] == seen[2]
    np.testing.assert_allclose(seen[1][0], seen[3][0], rtol=1e-6)
    assert seen[1][1] and seen[3][1]
