"""torch.nn.utils.parametrize and parametrizations.weight_norm: the same program under
disthook and torch gives the same class names, state dict keys, values, gradients, training
steps and errors."""
from __future__ import annotations

import importlib

import numpy as np
import pytest

W = (np.arange(9, dtype=np.float32).reshape(3, 3) - 4) / 5
B = np.array([0.5, -1.0, 2.0], dtype=np.float32)


def _np(t):
    return t.detach().numpy().copy()


def _program(lib_name: str) -> dict:
    lib = pytest.importorskip(lib_name)
    nn = lib.nn
    P = importlib.import_module(lib_name + ".nn.utils.parametrize")

    class Symmetric(nn.Module):
        def forward(self, X):
            return X.triu() + X.triu(1).transpose(0, 1)

    class Double(nn.Module):
        def forward(self, X):
            return X * 2

        def right_inverse(self, X):
            return X / 2

    layer = nn.Linear(3, 3)
    layer.load_state_dict({"weight": lib.tensor(W), "bias": lib.tensor(B)})
    weight = layer.weight
    out = {}
    P.register_parametrization(layer, "weight", Symmetric())
    P.register_parametrization(layer, "weight", Double())  # chained: Double(Symmetric(W))
    P.register_parametrization(layer, "bias", Double())
    out["class"] = type(layer).__name__
    out["before"] = P.type_before_parametrizations(layer).__name__
    out["keys"] = list(layer.state_dict())
    out["same object"] = layer.parametrizations.weight.original is weight
    out["bias original"] = _np(layer.parametrizations.bias.original)
    out["weight"] = _np(layer.weight)
    opt = lib.optim.SGD(layer.parameters(), lr=0.1)
    layer(lib.ones(2, 3)).pow(2).sum().backward()
    out["grad"] = _np(weight.grad)
    opt.step()
    out["stepped"] = _np(layer.weight)
    layer.bias = lib.tensor([2.0, 4.0, 6.0])
    out["set bias"] = (_np(layer.bias), _np(layer.parametrizations.bias.original))
    with P.cached():
        out["cached"] = layer.weight is layer.weight
    out["uncached"] = layer.weight is layer.weight
    out["flags"] = (P.is_parametrized(layer), P.is_parametrized(layer, "bias"))
    P.remove_parametrizations(layer, "bias", leave_parametrized=False)
    out["bias left"] = _np(layer.bias)
    P.remove_parametrizations(layer, "weight")
    out["after"] = (type(layer).__name__, list(layer.state_dict()), layer.weight is weight,
                    _np(layer.weight), hasattr(layer, "parametrizations"))

    norm = importlib.import_module(lib_name + ".nn.utils.parametrizations")
    conv = nn.Conv2d(2, 3, 2)
    conv.load_state_dict({"weight": lib.tensor(np.linspace(-1, 1, 24, dtype=np.float32)
                                               .reshape(3, 2, 2, 2)),
                          "bias": lib.zeros(3)})
    norm.weight_norm(conv)
    y = conv(lib.ones(1, 2, 3, 3)).sum()
    y.backward()
    out["weight_norm"] = ([tuple(v.shape) for v in conv.state_dict().values()],
                          _np(conv.weight), _np(conv.parametrizations.weight.original0.grad),
                          _np(conv.parametrizations.weight.original1.grad))
    return out


def _same(a, b):
    if isinstance(a, np.ndarray):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    elif isinstance(a, (tuple, list)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
    else:
        assert a == b


def test_parametrizations_without_torch():
    out = _program("disthook")
    assert out["class"] == "ParametrizedLinear" and out["before"] == "Linear"
    assert out["keys"] == ["parametrizations.weight.original", "parametrizations.bias.original"]
    assert out["same object"] and out["cached"] and not out["uncached"]
    sym = np.triu(W) + np.triu(W, 1).T
    np.testing.assert_allclose(out["weight"], 2 * sym)
    np.testing.assert_allclose(out["bias original"], B / 2)
    assert out["after"][:3] == ("Linear", ["bias", "weight"], True)


def test_same_as_torch():
    ours, theirs = _program("disthook"), _program("torch")
    assert ours.keys() == theirs.keys()
    for key in ours:
        _same(ours[key], theirs[key])


@pytest.mark.parametrize("lib_name", ["disthook", "torch"])
def test_errors_are_torchs(lib_name):
    lib = pytest.importorskip(lib_name)
    P = importlib.import_module(lib_name + ".nn.utils.parametrize")

    class First(lib.nn.Module):
        def forward(self, X):
            return X[0]

    layer = lib.nn.Linear(3, 3)
    with pytest.raises(ValueError, match="Registering a parametrization may not change the "
                       "shape of the tensor, unless `unsafe` flag is enabled."):
        P.register_parametrization(layer, "weight", First())
    with pytest.raises(ValueError, match="does not have a parameter, a buffer, or a "
                       "parametrized element with name 'nope'"):
        P.register_parametrization(layer, "nope", First())
    with pytest.raises(ValueError, match="does not have a parametrization on bias"):
        P.remove_parametrizations(layer, "bias")
    P.register_parametrization(layer, "weight", First(), unsafe=True)
    assert tuple(layer.weight.shape) == (3,)


@pytest.mark.parametrize("lib_name", ["disthook", "torch"])
def test_a_right_inverse_that_raises_not_implemented_is_the_identity_at_registration(lib_name):
    """A parametrization that cannot be inverted says so with NotImplementedError: it still
    registers, keeping the tensor as it is (orthogonal's Cayley map without trivialization);
    assigning to the parametrized tensor then raises it."""
    lib = pytest.importorskip(lib_name)
    P = importlib.import_module(lib_name + ".nn.utils.parametrize")

    class Squash(lib.nn.Module):
        def forward(self, X):
            return X.tanh()

        def right_inverse(self, X):
            raise NotImplementedError("no inverse here")

    layer = lib.nn.Linear(3, 3)
    with lib.no_grad():
        layer.weight.copy_(lib.tensor(W))
    P.register_parametrization(layer, "weight", Squash())
    np.testing.assert_array_equal(_np(layer.parametrizations.weight.original), W)
    np.testing.assert_allclose(_np(layer.weight), np.tanh(W), rtol=1e-6)
    with pytest.raises(NotImplementedError, match="no inverse here"):
        layer.weight = lib.tensor(W)


@pytest.mark.parametrize("lib_name", ["disthook", "torch"])
def test_deepcopy_keeps_the_parametrizations_apart(lib_name):
    """``copy.deepcopy`` of a parametrized model (the way a reference copy or an ensemble is
    made) gives a parametrized copy with its own originals; pickling is still refused."""
    import copy
    import pickle

    lib = pytest.importorskip(lib_name)
    P = importlib.import_module(lib_name + ".nn.utils.parametrize")

    class Symmetric(lib.nn.Module):
        def forward(self, X):
            return X.triu() + X.triu(1).transpose(0, 1)

    model = lib.nn.Sequential(lib.nn.Linear(3, 3), lib.nn.Tanh())
    with lib.no_grad():
        model[0].weight.copy_(lib.tensor(W))
    P.register_parametrization(model[0], "weight", Symmetric())
    twin = copy.deepcopy(model)
    assert type(twin[0]) is type(model[0]) and P.is_parametrized(twin[0], "weight")
    original = twin[0].parametrizations.weight.original
    assert original is not model[0].parametrizations.weight.original
    np.testing.assert_array_equal(_np(twin[0].weight), np.triu(W) + np.triu(W, 1).T)
    twin(lib.ones(2, 3)).sum().backward()
    assert original.grad is not None
    assert model[0].parametrizations.weight.original.grad is None
    with lib.no_grad():
        original.add_(1.0)
    np.testing.assert_array_equal(_np(model[0].weight), np.triu(W) + np.triu(W, 1).T)
    with pytest.raises(RuntimeError, match="only supported through state_dict"):
        pickle.dumps(model)
