"""torch.amp and torch.cuda.amp (issue 20, nanoGPT's train.py): GradScaler disabled is a
pass-through and on "cpu" scales as torch's (scales, skipped steps, growth and backoff, state
dicts: equal to torch's step by step); autocast takes torch's arguments, warns and disables
itself where torch does, and refuses a CPU region that torch would compute in lower precision.

Each test taking ``lib`` runs under disthook and torch (when installed) with the same asserts.
"""
from __future__ import annotations

import contextlib
import copy
import pickle
import re

import numpy as np
import pytest
from test_module_api import lib  # noqa: F401 - the fixture: disthook, then torch

import disthook

CUDA_SCALER = "torch.cuda.amp.GradScaler is enabled, but CUDA is not available.  Disabling."
CUDA_AUTOCAST = "CUDA is not available or torch_xla is imported. Disabling autocast."


def mlp(lib, seed=0):
    """A two-layer float32 MLP with the same weights under both libraries."""
    rng = np.random.default_rng(seed)
    net = lib.nn.Sequential(lib.nn.Linear(4, 8), lib.nn.Tanh(), lib.nn.Linear(8, 2))
    with lib.torch.no_grad():
        for p in net.parameters():
            p.copy_(lib.torch.tensor(rng.standard_normal(tuple(p.shape)).astype(np.float32)))
    return net


def batch(lib, step):
    rng = np.random.default_rng(100 + step)
    x = lib.torch.tensor(rng.standard_normal((5, 4)).astype(np.float32))
    y = lib.torch.tensor(rng.standard_normal((5, 2)).astype(np.float32))
    return x, y


# ---- GradScaler disabled: every method passes through ------------------------------------------

class CountingSGD:
    """Wraps an optimizer and counts its steps."""

    def __init__(self, opt):
        self.opt, self.steps = opt, 0
        self.param_groups = opt.param_groups

    def step(self, *args, **kwargs):
        self.steps += 1
        self.opt.step(*args, **kwargs)
        return "stepped"


def test_disabled_scaler_passes_everything_through(lib):
    torch = lib.torch
    with pytest.warns(FutureWarning, match=re.escape(
            "`torch.cuda.amp.GradScaler(args...)` is deprecated. Please use "
            "`torch.amp.GradScaler('cuda', args...)` instead.")):
        scaler = torch.cuda.amp.GradScaler(enabled=False)
    net = mlp(lib)
    opt = CountingSGD(torch.optim.SGD(net.parameters(), lr=0.1))
    x, y = batch(lib, 0)
    loss = lib.F.mse_loss(net(x), y)
    assert scaler.scale(loss) is loss
    scaler.scale(loss).backward()
    grad = net[0].weight.grad.clone()
    scaler.unscale_(opt)
    assert torch.equal(net[0].weight.grad, grad)
    assert scaler.step(opt) == "stepped" and opt.steps == 1
    scaler.update()
    scaler.update(4.0)
    assert not scaler.is_enabled() and scaler.get_scale() == 1.0 and scaler.state_dict() == {}
    scaler.load_state_dict({})
    assert scaler._get_growth_tracker() == 0


def test_a_cuda_scaler_warns_and_disables_itself(lib):
    torch = lib.torch
    with pytest.warns(UserWarning, match=re.escape(CUDA_SCALER)):
        assert not torch.amp.GradScaler().is_enabled()
    with pytest.warns(UserWarning, match=re.escape(CUDA_SCALER)), \
            pytest.warns(FutureWarning, match="deprecated"):
        assert not torch.cuda.amp.GradScaler(enabled=True).is_enabled()
    assert torch.amp.GradScaler("cpu").is_enabled()
    assert torch.amp.GradScaler("cpu", enabled=False).get_scale() == 1.0


def test_nanogpt_training_step_on_the_cpu(lib):
    # train.py: float16 when there is no bf16 CUDA, a scaler enabled for float16 (so
    # disabled, with CUDA absent), nullcontext on the CPU, unscale_ then clip
    torch = lib.torch
    dtype = "bfloat16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() \
        else "float16"
    with pytest.warns(UserWarning, match=re.escape(CUDA_SCALER)), \
            pytest.warns(FutureWarning):
        scaler = torch.cuda.amp.GradScaler(enabled=(dtype == "float16"))
    ctx = contextlib.nullcontext()
    net = mlp(lib)
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-3)
    x, y = batch(lib, 0)
    with ctx:
        loss = lib.F.mse_loss(net(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    norm = torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    assert float(norm) > 0 and net[0].weight.grad is None


# ---- GradScaler("cpu"): torch's scaling, step by step -------------------------------------------

# numpy warns of the infs and NaNs poisoned steps make (clipping an inf norm, an overflowing
# scale) where torch is silent: the engine's arithmetic, not the scaler's
inf_arithmetic = pytest.mark.filterwarnings("ignore:(overflow|invalid value):RuntimeWarning")


def train_with_scaler(lib, steps=8, poison=(2, 5), **scaler_kwargs):
    """Steps of SGD on the MLP with GradScaler("cpu"); at the steps in ``poison`` one gradient
    becomes inf, so the step must be skipped. What each step left."""
    torch = lib.torch
    net = mlp(lib)
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    scaler = torch.amp.GradScaler("cpu", **scaler_kwargs)
    log = []
    for step in range(steps):
        x, y = batch(lib, step)
        opt.zero_grad()
        scaled = scaler.scale(lib.F.mse_loss(net(x), y))
        scaled.backward()
        if step in poison:
            net[2].bias.grad[0] = float("inf")
        if step % 2:
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(net.parameters(), 5.0)
        scaler.step(opt)
        scaler.update()
        log.append((scaled.item(), scaler.get_scale(), scaler._get_growth_tracker(),
                    [p.detach().numpy().copy() for p in net.parameters()]))
    return log, scaler.state_dict()


@inf_arithmetic
def test_cpu_scaler_scales_skips_backs_off_and_grows(lib):
    log, state = train_with_scaler(lib, init_scale=2.0**10, growth_interval=2)
    scales = [entry[1] for entry in log]
    trackers = [entry[2] for entry in log]
    assert scales == [1024.0, 2048.0, 1024.0, 1024.0, 2048.0, 1024.0, 1024.0, 2048.0]
    assert trackers == [1, 0, 0, 1, 0, 0, 1, 0]
    for skipped in (2, 5):  # parameters untouched by a poisoned step
        for before, after in zip(log[skipped - 1][3], log[skipped][3]):
            np.testing.assert_array_equal(before, after)
    assert state == {"scale": 2048.0, "growth_factor": 2.0, "backoff_factor": 0.5,
                     "growth_interval": 2, "_growth_tracker": 0}


@inf_arithmetic
@pytest.mark.parametrize("kwargs", [
    {},
    {"init_scale": 2.0**10, "growth_interval": 2},
    {"init_scale": 3.0e38, "growth_interval": 1, "growth_factor": 4.0, "backoff_factor": 0.25},
])
def test_cpu_scaler_equals_torchs_step_by_step(kwargs):
    torch = pytest.importorskip("torch")
    from types import SimpleNamespace

    def ns(module):
        return SimpleNamespace(torch=module, nn=module.nn, F=module.nn.functional)

    mine, state = train_with_scaler(ns(disthook), **kwargs)
    theirs, torch_state = train_with_scaler(ns(torch), **kwargs)
    assert state == torch_state
    for step, (a, b) in enumerate(zip(mine, theirs)):
        assert a[1:3] == b[1:3], f"step {step}: scale and growth tracker"
        np.testing.assert_allclose(a[0], b[0], rtol=1e-5, err_msg=f"step {step}: scaled loss")
        for p, q in zip(a[3], b[3]):
            np.testing.assert_allclose(p, q, rtol=1e-5, atol=1e-6, err_msg=f"step {step}")


def test_scale_of_containers(lib):
    torch = lib.torch
    scaler = torch.amp.GradScaler("cpu", init_scale=4.0)
    a, b = torch.ones(2), torch.full((1,), 2.0)
    out = scaler.scale([a, (b, a)])
    assert isinstance(out, list) and isinstance(out[1], tuple)
    assert out[0].tolist() == [4.0, 4.0] and out[1][0].tolist() == [8.0]
    assert [t.tolist() for t in scaler.scale(iter([a]))] == [[4.0, 4.0]]
    with pytest.raises(ValueError, match="^outputs must be a Tensor or an iterable of Tensors$"):
        scaler.scale([a, 3])
    assert scaler.scale(torch.ones((), dtype=torch.float64)).dtype == torch.float64


def test_update_with_a_new_scale(lib):
    torch = lib.torch
    scaler = torch.amp.GradScaler("cpu")
    scaler.scale(torch.ones(1))
    scaler.update(8.0)
    assert scaler.get_scale() == 8.0
    scaler.update(torch.tensor(16.0))
    assert scaler.get_scale() == 16.0
    with pytest.raises(RuntimeError):  # copied into the 0-d scale: torch's 1-element is 0-d
        scaler.update(torch.tensor([32.0]))
    reason = ("new_scale should be a float or a 1-element torch.cuda.FloatTensor or "
              "torch.FloatTensor with requires_grad=False.")
    with pytest.raises(AssertionError, match=re.escape(reason)):
        scaler.update(torch.ones(2))
    with pytest.raises(AssertionError, match=re.escape(reason)):
        scaler.update(torch.ones(1, requires_grad=True))


def test_state_dict_round_trip_and_pickling(lib):
    torch = lib.torch
    scaler = torch.amp.GradScaler("cpu", init_scale=64.0, growth_interval=3)
    other = torch.amp.GradScaler("cpu")
    other.load_state_dict(scaler.state_dict())
    assert other.state_dict() == scaler.state_dict()
    net = mlp(lib)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    x, y = batch(lib, 0)
    scaler.scale(lib.F.mse_loss(net(x), y)).backward()
    pickle.dumps(scaler)  # no optimizer seen yet
    scaler.unscale_(opt)
    with pytest.raises(AssertionError, match="may only be pickled at the beginning"):
        pickle.dumps(scaler)
    scaler.step(opt)
    scaler.update()
    again = pickle.loads(pickle.dumps(scaler))
    assert again.state_dict() == scaler.state_dict() == {
        "scale": 64.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 3,
        "_growth_tracker": 1}
    assert copy.deepcopy(scaler).get_scale() == 64.0
    other.scale(torch.ones(1))
    other.load_state_dict(scaler.state_dict())
    assert other.get_scale() == 64.0 and other._get_growth_tracker() == 1
    with pytest.raises(RuntimeError, match="^The source state dict is empty, possibly because "
                                           "it was saved from a disabled instance of GradScaler."):
        other.load_state_dict({})


def test_scaler_errors(lib):
    torch = lib.torch
    with pytest.raises(AssertionError, match=re.escape("The growth factor must be > 1.0.")):
        torch.amp.GradScaler("cpu", growth_factor=1.0)
    with pytest.raises(AssertionError, match=re.escape("The backoff factor must be < 1.0.")):
        torch.amp.GradScaler("cpu", backoff_factor=1.0)
    net = mlp(lib)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    with pytest.raises(AssertionError, match=re.escape(
            "Attempted step but _scale is None.  This may indicate your script did not use "
            "scaler.scale(loss or outputs) earlier in the iteration.")):
        scaler.step(opt)
    x, y = batch(lib, 0)
    scaler.scale(lib.F.mse_loss(net(x), y)).backward()
    with pytest.raises(RuntimeError, match="^Closure use is not currently supported if "
                                           "GradScaler is enabled.$"):
        scaler.step(opt, closure=lambda: None)
    scaler.unscale_(opt)
    with pytest.raises(RuntimeError, match=re.escape(
            "unscale_() has already been called on this optimizer since the last update().")):
        scaler.unscale_(opt)
    scaler.step(opt)
    with pytest.raises(RuntimeError, match=re.escape("unscale_() is being called after step().")):
        scaler.unscale_(opt)
    with pytest.raises(RuntimeError, match=re.escape(
            "step() has already been called since the last update().")):
        scaler.step(opt)
    scaler.update()
    with pytest.raises(AssertionError, match="^No inf checks were recorded prior to update.$"):
        scaler.update()


def test_fp16_gradients_are_not_unscaled(lib):
    torch = lib.torch
    w = torch.ones(3, dtype=torch.float16, requires_grad=True)
    w.grad = torch.ones(3, dtype=torch.float16)
    opt = torch.optim.SGD([w], lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    scaler.scale(torch.ones(1))
    with pytest.raises(ValueError, match="^Attempting to unscale FP16 gradients.$"):
        scaler.unscale_(opt)


def test_an_optimizer_that_unscales_by_itself(lib):
    # _step_supports_amp_scaling: the scaler hands over grad_scale and found_inf
    torch = lib.torch
    w = torch.ones(2, requires_grad=True)
    seen = {}

    class SelfScaling(torch.optim.SGD):
        _step_supports_amp_scaling = True

        def step(self, closure=None):
            seen["grad_scale"] = self.grad_scale.item()
            seen["found_inf"] = self.found_inf.item()
            return "done"

    opt = SelfScaling([w], lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=8.0)
    scaler.scale(w.sum()).backward()
    assert scaler.step(opt) == "done" and seen == {"grad_scale": 8.0, "found_inf": 0.0}
    assert not hasattr(opt, "grad_scale") and not hasattr(opt, "found_inf")
    assert w.grad.tolist() == [8.0, 8.0]  # left scaled: unscaling is the optimizer's
    scaler.update()
    assert scaler.get_scale() == 8.0


# ---- autocast -----------------------------------------------------------------------------------

def test_disabled_autocast_changes_nothing(lib):
    torch = lib.torch
    x, w = torch.ones(2, 3), torch.ones(4, 3)
    for ctx in (torch.autocast("cpu", enabled=False),
                torch.amp.autocast(device_type="cpu", dtype=torch.float16, enabled=False)):
        with ctx as entered:
            assert entered is ctx and not torch.is_autocast_enabled("cpu")
            assert (x @ w.T).dtype == torch.float32
            assert lib.F.linear(x, w).dtype == torch.float32

    @torch.autocast(device_type="cpu", enabled=False)
    def forward(a):
        return a @ w.T

    assert forward(x).dtype == torch.float32 and forward.__name__ == "forward"


def test_cuda_autocast_warns_and_disables_itself(lib):
    # nanoGPT's ctx when device_type is "cuda"
    torch = lib.torch
    with pytest.warns(UserWarning, match=re.escape(CUDA_AUTOCAST)):
        ctx = torch.amp.autocast(device_type="cuda", dtype=torch.float16)
    with ctx:
        assert not torch.is_autocast_enabled("cuda") and not torch.is_autocast_enabled()
        assert (torch.ones(2, 3) @ torch.ones(3, 2)).dtype == torch.float32
    assert ctx.fast_dtype == torch.float16 and ctx.device == "cuda"
    with pytest.warns(FutureWarning, match=re.escape(
            "`torch.cuda.amp.autocast(args...)` is deprecated. Please use "
            "`torch.amp.autocast('cuda', args...)` instead.")), \
            pytest.warns(UserWarning, match=re.escape(CUDA_AUTOCAST)):
        ctx = torch.cuda.amp.autocast()
    with ctx:
        assert not torch.is_autocast_enabled("cuda")


def test_cpu_autocast_of_an_unsupported_dtype_warns_and_disables_itself(lib):
    torch = lib.torch
    with pytest.warns(UserWarning, match=re.escape(
            "In CPU autocast, but the target dtype is not supported. Disabling autocast.\n"
            "CPU Autocast only supports dtypes of torch.bfloat16, torch.float16 currently.")):
        ctx = torch.autocast("cpu", dtype=torch.float32)
    with ctx:
        assert not torch.is_autocast_enabled("cpu")


def test_autocast_of_a_device_without_tensors_is_enabled(lib):
    torch = lib.torch
    with torch.autocast("mps", dtype=torch.float16):
        assert torch.is_autocast_enabled("mps")
        with torch.autocast("mps", enabled=False):
            assert not torch.is_autocast_enabled("mps")
        assert torch.is_autocast_enabled("mps")
        assert (torch.ones(2, 3) @ torch.ones(3, 2)).dtype == torch.float32
    assert not torch.is_autocast_enabled("mps")


def test_autocast_argument_errors(lib):
    torch = lib.torch
    with pytest.raises(ValueError, match=re.escape(
            "Expected `device_type` of type `str`, got: `<class 'int'>`")):
        torch.autocast(3)
    with pytest.raises(RuntimeError, match=re.escape(
            "device type at start of device string: foo")):
        torch.autocast("foo")
    with pytest.raises(TypeError, match=re.escape(
            "autocast()(func) requires a callable, but got int. Did you mean to use autocast as "
            "a context manager?")):
        torch.autocast("cpu", enabled=False)(3)
    assert torch.amp.is_autocast_available("cpu") and torch.amp.is_autocast_available("cuda")


def test_enabled_cpu_autocast_computes_in_lower_precision(lib):
    # (the op-by-op dtypes, and a training step against torch: tests/test_b1_autocast.py)
    torch = lib.torch
    x, w = torch.ones(2, 3), torch.ones(4, 3)
    with torch.autocast("cpu"):
        assert (x @ w.T).dtype == torch.bfloat16
    with torch.autocast("cpu", dtype=torch.float16):
        assert torch.nn.functional.linear(x, w).dtype == torch.float16
    assert not torch.is_autocast_enabled("cpu")

    @torch.autocast("cpu")
    def forward(a):
        return a @ a.T

    assert forward(x).dtype == torch.bfloat16 and (x @ x.T).dtype == torch.float32


def test_custom_fwd_and_bwd(lib):
    torch = lib.torch

    class Square(torch.autograd.Function):
        @staticmethod
        @torch.amp.custom_fwd(device_type="cpu", cast_inputs=torch.float32)
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        @torch.amp.custom_bwd(device_type="cpu")
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 2 * x * g

    x = torch.tensor([1.0, 3.0], requires_grad=True)
    Square.apply(x).sum().backward()
    assert x.grad.tolist() == [2.0, 6.0]
    with pytest.raises(ValueError, match="Expected `device_type` of type `str`"):
        torch.amp.custom_fwd(device_type=None)


def test_the_top_level_scaler_is_the_amp_one(lib):
    torch = lib.torch
    assert torch.GradScaler is torch.amp.GradScaler
    scaler = torch.GradScaler("cpu", enabled=False)
    assert not scaler.is_enabled() and scaler.get_scale() == 1.0
