"""What training and checkpoint programs call on a module and an optimizer besides the
forward and the step: ``set_submodule`` (model surgery), ``to_empty``, ``share_memory``
(mnist_hogwild), ``compile``, ``bfloat16``, and the optimizer's state-dict hooks; each
against torch where it is installed."""
import numpy as np
import pytest

import disthook
from disthook import nn


def libs():
    """disthook, and torch where installed: every case runs on both."""
    out = [pytest.param(disthook, id="disthook")]
    try:
        import torch
    except ImportError:
        torch = None
    out.append(pytest.param(torch, id="torch", marks=pytest.mark.skipif(
        torch is None, reason="torch not installed")))
    return out


LIBS = libs()


def outcome(fn):
    try:
        return repr(fn())
    except Exception as e:  # noqa: BLE001 - the type and text are what is compared
        return f"{type(e).__name__}: {e}"


@pytest.mark.parametrize("T", LIBS)
def test_set_submodule_puts_a_module_at_a_path_with_torchs_errors(T):
    model = T.nn.Sequential(T.nn.Linear(2, 2), T.nn.Sequential(T.nn.Linear(2, 2)))
    model.register_parameter("w", T.nn.Parameter(T.ones(1)))
    relu = T.nn.ReLU()
    assert model.set_submodule("1.0", relu) is None
    assert model[1][0] is relu
    model.set_submodule("1.new", T.nn.Tanh())
    assert isinstance(model[1].new, T.nn.Tanh)
    got = [outcome(lambda a=a: model.set_submodule(*a[0], **a[1])) for a in [
        (("", relu), {}), (("0", 3), {}), (("x.y", relu), {}), (("w", relu), {}),
        (("1.gone", relu), {"strict": True})]]
    assert got == [
        "ValueError: Cannot set the submodule without a target name!",
        "ValueError: `module` is not an nn.Module, found <class 'int'>",
        "AttributeError: Sequential has no attribute `x`",
        "AttributeError: `w` is not an nn.Module",
        "AttributeError: Sequential has no attribute `gone`"]


@pytest.mark.parametrize("T", LIBS)
def test_to_empty_share_memory_and_compile_keep_the_module(T):
    model = T.nn.Sequential(T.nn.Linear(3, 2), T.nn.BatchNorm1d(2))
    weight = model[0].weight
    assert model.to_empty(device="cpu") is model
    assert model[0].weight is weight and weight.requires_grad and weight.shape == (2, 3)
    assert model[1].num_batches_tracked.dtype == T.int64
    with T.no_grad():
        weight.fill_(0.5)
    assert model.share_memory() is model
    assert np.allclose(model[0].weight.detach().numpy(), 0.5)
    if T is disthook:  # (torch's compile() loads its compiler, which changes torch's global
        # state, such as turning off distributions' argument checks: returns None there too)
        assert model.compile() is None
    out = model(T.ones(4, 3))
    assert tuple(out.shape) == (4, 2)


def test_bfloat16_of_a_module_converts_its_floating_tensors():
    m = nn.Linear(2, 2).bfloat16()
    assert m.weight.dtype is m.bias.dtype is disthook.bfloat16


@pytest.mark.parametrize("T", LIBS)
def test_optimizer_state_dict_hooks_fire_in_torchs_order_and_replace(T):
    p = T.nn.Parameter(T.ones(2))
    opt = T.optim.SGD([p], lr=0.1, momentum=0.9)
    p.grad = T.ones(2)
    opt.step()
    log = []
    opt.register_state_dict_pre_hook(lambda o: log.append(("pre", o is opt)))
    opt.register_state_dict_post_hook(
        lambda o, sd: log.append(("post", sorted(sd))) or {**sd, "extra": 1})
    opt.register_state_dict_post_hook(lambda o, sd: log.append(("first", "extra" in sd)),
                                      prepend=True)
    sd = opt.state_dict()
    assert sd["extra"] == 1
    h = opt.register_load_state_dict_pre_hook(
        lambda o, sd: log.append(("load-pre", "extra" in sd)) or
        {k: v for k, v in sd.items() if k != "extra"})
    opt.register_load_state_dict_post_hook(lambda o: log.append(("load-post", len(o.state))))
    opt.load_state_dict(sd)
    assert "extra" in sd  # the hook was given a copy
    h.remove()
    opt.load_state_dict({k: v for k, v in sd.items() if k != "extra"})
    assert log == [("pre", True), ("first", False), ("post", ["param_groups", "state"]),
                   ("load-pre", True), ("load-post", 1), ("load-post", 1)]
