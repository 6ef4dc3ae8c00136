"""torch.func.stack_module_state and model ensembling with vmap over functional_call, as
torch's documentation shows it: stacked parameters and buffers by name, new leaves, outputs
and gradients equal to each model's own, torch's errors; compared with torch 2.13 where it
is installed."""
import numpy as np
import pytest

import disthook
from disthook.func import functional_call, stack_module_state, vmap

LIBS = [disthook]
try:
    import torch

    LIBS.append(torch)
except ImportError:  # the parity half is skipped
    torch = None
ids = [lib.__name__ for lib in LIBS]


def block(nn):
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.l1 = nn.Linear(3, 4)
            self.bn = nn.BatchNorm1d(4)
            self.l2 = nn.Linear(4, 2)

        def forward(self, x):
            return self.l2(self.bn(self.l1(x)).tanh())

    return Block


def models(lib, n=4, seed=0):
    """``n`` models with the same values in both libraries."""
    rng = np.random.default_rng(seed)
    cls = block(lib.nn)
    out = []
    for _ in range(n):
        m = cls()
        for _, t in [*m.named_parameters(), *m.named_buffers()]:
            if t.is_floating_point():
                t.data = lib.tensor(rng.standard_normal(tuple(t.shape)).astype(np.float32) ** 2
                                    if t.dim() == 1 else
                                    rng.standard_normal(tuple(t.shape)).astype(np.float32))
        m.eval()
        out.append(m)
    return out


def ensemble(lib):
    ms = models(lib)
    params, buffers = lib.func.stack_module_state(ms)
    x = lib.tensor(np.random.default_rng(5).standard_normal((6, 3)).astype(np.float32))

    def one(p, b, data):
        return lib.func.functional_call(ms[0], (p, b), (data,))

    out = lib.func.vmap(one, in_dims=(0, 0, None))(params, buffers, x)
    out.square().sum().backward()
    return ms, params, buffers, x, out


@pytest.mark.parametrize("lib", LIBS, ids=ids)
def test_ensemble_gives_each_models_output_and_gradients(lib):
    ms, params, buffers, x, out = ensemble(lib)
    assert list(params) == ["l1.weight", "l1.bias", "bn.weight", "bn.bias", "l2.weight",
                            "l2.bias"]
    assert list(buffers) == ["bn.running_mean", "bn.running_var", "bn.num_batches_tracked"]
    assert tuple(params["l1.weight"].shape) == (4, 4, 3)
    assert buffers["bn.num_batches_tracked"].dtype == lib.long
    assert all(p.is_leaf and p.requires_grad for p in params.values())
    assert not any(b.requires_grad for b in buffers.values())
    assert tuple(out.shape) == (4, 6, 2)
    for i, m in enumerate(ms):
        own = m(x)
        np.testing.assert_allclose(out[i].detach().numpy(), own.detach().numpy(), rtol=1e-5,
                                   atol=1e-6)
        own.square().sum().backward()
        for name, p in m.named_parameters():
            np.testing.assert_allclose(params[name].grad[i].numpy(), p.grad.numpy(),
                                       rtol=1e-4, atol=1e-4)


def test_ensemble_equals_torch():
    if torch is None:
        pytest.skip("torch is not installed")
    _, d_params, _, _, d_out = ensemble(disthook)
    _, t_params, _, _, t_out = ensemble(torch)
    np.testing.assert_allclose(d_out.detach().numpy(), t_out.detach().numpy(), rtol=1e-5,
                               atol=1e-6)
    for name in t_params:
        np.testing.assert_allclose(d_params[name].grad.numpy(), t_params[name].grad.numpy(),
                                   rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("lib", LIBS, ids=ids)
def test_stacked_tensors_are_new_leaves(lib):
    ms = models(lib, n=2)
    params, _ = lib.func.stack_module_state(ms)
    before = ms[0].l1.weight.detach().numpy().copy()
    with lib.no_grad():
        params["l1.weight"].add_(1.0)
    np.testing.assert_array_equal(ms[0].l1.weight.detach().numpy(), before)
    params["l2.bias"].sum().backward()
    assert ms[0].l2.bias.grad is None
    for p in ms[1].parameters():
        p.requires_grad_(False)
    params, _ = lib.func.stack_module_state(ms[1:])  # none requires grad: none does
    assert not any(p.requires_grad for p in params.values())


def errors(lib):
    nn = lib.nn
    a, b = nn.Linear(2, 2), nn.Linear(2, 2)
    b.bias.requires_grad_(False)
    train, test = nn.Linear(2, 2), nn.Linear(2, 2).eval()
    cases = [[], [train, test], [nn.Linear(2, 2), nn.Conv1d(2, 2, 1)], [a, b]]
    out = []
    for case in cases:
        with pytest.raises(RuntimeError) as info:
            lib.func.stack_module_state(case)
        out.append(str(info.value))
    return out


def test_errors_as_torch():
    seen = errors(disthook)
    assert seen == [
        "stack_module_state: Expected at least one model, got 0.",
        "stack_module_state: Expected all models to have the same training/eval mode.",
        "stack_module_state: Expected all models to be of the same class.",
        "Expected bias from each model to have the same .requires_grad"]
    if torch is not None:
        assert errors(torch) == seen


def test_names():
    assert disthook.func.stack_module_state is stack_module_state
    assert "stack_module_state" in disthook.func.__all__
    assert functional_call is disthook.func.functional_call and vmap is disthook.func.vmap
