"""``torch.compile(module)`` gives what torch gives: an ``OptimizedModule`` holding the module
as ``_orig_mod`` (programs unwrap it with ``getattr(model, "_orig_mod", model)``), state dict
keys under ``_orig_mod.`` (a compiled model's checkpoint loads into a compiled model of either
library), attributes read from and written to the module, ``train()``/``eval()`` reaching it,
hooks on both firing, the module's first. A function comes back as it is. Runs under disthook
and, when installed, torch."""
from __future__ import annotations

import importlib
import importlib.util
import warnings

import numpy as np
import pytest

HAS_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")


@pytest.fixture(params=["disthook", pytest.param("torch", marks=needs_torch)])
def T(request):
    warnings.simplefilter("ignore", UserWarning)
    return importlib.import_module(request.param)


def make(T):
    model = T.nn.Sequential(T.nn.Linear(3, 4), T.nn.ReLU(), T.nn.Linear(4, 2))
    with T.no_grad():
        for i, p in enumerate(model.parameters()):
            p.copy_(T.linspace(-1, 1, p.numel()).reshape(p.shape) * (i + 1) / 3)
    return model


def test_a_compiled_module_is_held_by_an_optimized_module(T):
    model = make(T)
    cm = T.compile(model, backend="eager")
    assert type(cm).__name__ == "OptimizedModule" and isinstance(cm, T.nn.Module)
    assert cm._orig_mod is model and getattr(cm, "_orig_mod", cm) is model
    assert list(cm.state_dict()) == ["_orig_mod." + k for k in model.state_dict()]
    assert [name for name, _ in cm.named_modules()][:2] == ["", "_orig_mod"]
    assert all(a is b for a, b in zip(cm.parameters(), model.parameters(), strict=True))
    x = T.ones(2, 3)
    assert np.allclose(cm(x).detach().numpy(), model(x).detach().numpy())
    assert repr(cm).startswith("OptimizedModule(\n  (_orig_mod): Sequential(")
    assert len(cm) == 3
    with pytest.raises(TypeError, match="'OptimizedModule' object is not subscriptable"):
        cm[0]


def test_attributes_and_modes_are_the_modules(T):
    model = make(T)
    model.config = {"n_layer": 2}
    cm = T.compile(model, backend="eager")
    assert cm.config is model.config
    cm.block_size = 8  # written to the module, as torch does
    assert model.block_size == 8 and "block_size" not in cm.__dict__
    cm.eval()
    assert model.training is False and cm.training is False and model[0].training is False
    cm.train()
    assert model.training is True
    del cm.block_size
    assert not hasattr(model, "block_size")
    with pytest.raises(TypeError, match="Linear does not support len()"):
        len(T.compile(T.nn.Linear(2, 2), backend="eager"))


def test_checkpoints_of_compiled_models_load_into_compiled_models(T):
    fresh = T.nn.Sequential(T.nn.Linear(3, 4), T.nn.ReLU(), T.nn.Linear(4, 2))
    src, dst = T.compile(make(T), backend="eager"), T.compile(fresh, backend="eager")
    assert not dst.load_state_dict(src.state_dict()).missing_keys
    x = T.ones(2, 3)
    assert np.allclose(dst(x).detach().numpy(), src(x).detach().numpy())
    plain = T.nn.Sequential(T.nn.Linear(3, 4), T.nn.ReLU(), T.nn.Linear(4, 2))
    # nanoGPT's resume: strip the prefix, load into the module it compiles again
    prefix = "_orig_mod."
    plain.load_state_dict({k[len(prefix):]: v for k, v in src.state_dict().items()})
    assert np.allclose(plain(x).detach().numpy(), src(x).detach().numpy())


def test_hooks_on_the_module_and_on_its_wrapper_fire_in_torchs_order(T):
    model = make(T)
    cm = T.compile(model, backend="eager")
    fired = []
    cm.register_forward_hook(lambda *a: fired.append("wrapper"))
    model.register_forward_hook(lambda *a: fired.append("module"))
    cm(T.ones(1, 3)).sum().backward()
    assert fired == ["module", "wrapper"]
    assert model[0].weight.grad is not None


def test_functions_and_disabled_compiles_come_back_as_given(T):
    def f(x):
        return x * 2
    assert T.compile(f, backend="eager")(T.ones(1)).item() == 2.0
    model = make(T)
    assert T.compile(model, disable=True) is model


def test_the_compiler_settings_scripts_set_before_compiling(T):
    """``import torch._dynamo`` and its settings, as training scripts write them (it was a
    ModuleNotFoundError): torch's defaults, settable, and a misspelt name refused."""
    dynamo = importlib.import_module(T.__name__ + "._dynamo")
    inductor_config = importlib.import_module(T.__name__ + "._inductor.config")
    config = dynamo.config
    assert (config.suppress_errors, config.cache_size_limit) == (False, 8)
    config.suppress_errors, config.cache_size_limit = True, 64
    try:
        assert (config.suppress_errors, config.cache_size_limit) == (True, 64)
    finally:
        config.suppress_errors, config.cache_size_limit = False, 8
    with pytest.raises(AttributeError, match="torch._dynamo.config.suppres_errors does not exist"):
        config.suppres_errors = True
    assert inductor_config.coordinate_descent_tuning is False
    assert inductor_config.triton.unique_kernel_names is True
    x = T.ones(2, 3)
    dynamo.mark_dynamic(x, 0)
    assert dynamo.reset() is None and dynamo.is_compiling() is False


def test_the_first_compile_turns_the_distributions_argument_checks_off_as_torchs_does(
        monkeypatch):
    """torch's first compile in a process turns off the default argument checks of
    torch.distributions from then on (torch/_dynamo/eval_frame.py: a program that compiles
    its model and then makes a distribution of a NaN logit goes on); ``disable=True`` does
    not count."""
    import disthook
    import disthook.compiler

    monkeypatch.setattr(disthook.compiler, "_patched", False)
    monkeypatch.setattr(disthook.distributions.Distribution, "_validate_args", True)
    disthook.compile(disthook.nn.Linear(2, 2), disable=True)
    assert disthook.distributions.Distribution._validate_args is True
    disthook.compile(disthook.nn.Linear(2, 2))
    assert disthook.distributions.Distribution._validate_args is False
    disthook.distributions.Normal(disthook.zeros(1), -disthook.ones(1))  # no ValueError now
