"""torch.nn.utils beyond clipping: weight_norm / spectral_norm (hook and parametrization
forms), BatchNorm fusion, skip_init, get_total_norm and clip_grads_with_norm_, against torch
with the same weights (and, for spectral norm, the same starting u and v)."""
from __future__ import annotations

import importlib
import warnings

import numpy as np
import pytest

import disthook

RNG = np.random.default_rng(1)
CONV_W = RNG.standard_normal((4, 3, 2, 2)).astype(np.float32)
X = RNG.standard_normal((2, 3, 5, 5)).astype(np.float32)


def _np(t):
    return t.detach().numpy().copy()


def _conv(lib):
    conv = lib.nn.Conv2d(3, 4, 2)
    conv.load_state_dict({"weight": lib.tensor(CONV_W), "bias": lib.tensor(np.arange(4.0,
                                                                                dtype=np.float32))})
    return conv


def _weight_norm_program(lib):
    conv = _conv(lib)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        lib.nn.utils.weight_norm(conv, dim=1)
    names = [n for n, _ in conv.named_parameters()]
    y = conv(lib.tensor(X))
    y.pow(2).sum().backward()
    grads = (_np(conv.weight_g.grad), _np(conv.weight_v.grad))
    lib.nn.utils.remove_weight_norm(conv)
    return names, _np(y), grads, [n for n, _ in conv.named_parameters()], _np(conv.weight)


def _spectral_program(lib, u, v, parametrized: bool):
    conv = _conv(lib)
    if parametrized:
        lib.nn.utils.parametrizations.spectral_norm(conv)
        holder = conv.parametrizations.weight[0]
        holder._u.copy_(lib.tensor(u))
        holder._v.copy_(lib.tensor(v))
    else:
        lib.nn.utils.spectral_norm(conv)
        with lib.no_grad():
            conv.weight_u.copy_(lib.tensor(u))
            conv.weight_v.copy_(lib.tensor(v))
    outs = []
    for _ in range(3):  # training: one power iteration per call
        y = conv(lib.tensor(X))
        outs.append(_np(y))
    y.sum().backward()
    weight = conv.parametrizations.weight.original if parametrized else conv.weight_orig
    conv.eval()
    outs.append(_np(conv(lib.tensor(X))))
    return outs, _np(weight.grad), sorted(conv.state_dict())


def _fusion_program(lib):
    conv, bn = _conv(lib), lib.nn.BatchNorm2d(4)
    bn.load_state_dict({"weight": lib.tensor([1.0, 2.0, 0.5, -1.0]),
                        "bias": lib.tensor([0.1, 0.2, 0.3, 0.4]),
                        "running_mean": lib.tensor([0.5, -0.5, 1.0, 0.0]),
                        "running_var": lib.tensor([1.0, 4.0, 0.25, 2.0]),
                        "num_batches_tracked": lib.tensor(3)})
    conv.eval()
    bn.eval()
    fused = lib.nn.utils.fuse_conv_bn_eval(conv, bn)
    lin, bn1 = lib.nn.Linear(3, 4), lib.nn.BatchNorm1d(4)
    lin.load_state_dict({"weight": lib.tensor(CONV_W[:, :, 0, 0]), "bias": lib.zeros(4)})
    bn1.load_state_dict({k.replace("2d", ""): v for k, v in bn.state_dict().items()})
    lin.eval()
    bn1.eval()
    fused_lin = lib.nn.utils.fuse_linear_bn_eval(lin, bn1)
    x = lib.tensor(X)
    flat = lib.tensor(X[:, :, 0, 0])
    return (_np(fused(x)), _np(bn(conv(x))), _np(fused_lin(flat)), _np(bn1(lin(flat))))


def _norms_program(lib):
    params = [lib.nn.Parameter(lib.tensor(CONV_W)), lib.nn.Parameter(lib.ones(3))]
    (params[0].sum() * 3 + params[1].pow(2).sum()).backward()
    total = lib.nn.utils.get_total_norm([p.grad for p in params], norm_type=3.0)
    lib.nn.utils.clip_grads_with_norm_(params, 1.0, total)
    return _np(total), [_np(p.grad) for p in params]


def _same(a, b):
    if isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
    elif isinstance(a, np.ndarray):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    else:
        assert a == b


@pytest.mark.parametrize("program", [_weight_norm_program, _fusion_program, _norms_program])
def test_same_as_torch(program):
    torch = pytest.importorskip("torch")
    _same(program(disthook), program(torch))


@pytest.mark.parametrize("parametrized", [False, True])
def test_spectral_norm_same_as_torch_from_the_same_start(parametrized):
    torch = pytest.importorskip("torch")
    u = RNG.standard_normal(4).astype(np.float32)
    v = RNG.standard_normal(12).astype(np.float32)
    u, v = u / np.linalg.norm(u), v / np.linalg.norm(v)
    _same(_spectral_program(disthook, u, v, parametrized),
          _spectral_program(torch, u, v, parametrized))


def test_spectral_norm_converges_to_the_largest_singular_value():
    conv = _conv(disthook)
    disthook.nn.utils.spectral_norm(conv, n_power_iterations=30)
    conv(disthook.tensor(X))
    sigma = np.linalg.svd(CONV_W.reshape(4, -1), compute_uv=False)[0]
    np.testing.assert_allclose(_np(conv.weight), CONV_W / sigma, rtol=1e-4)
    disthook.nn.utils.remove_spectral_norm(conv)
    assert sorted(conv.state_dict()) == ["bias", "weight"]


@pytest.mark.parametrize("lib_name", ["disthook", "torch"])
def test_errors_are_torchs(lib_name):
    lib = pytest.importorskip(lib_name)
    conv = lib.nn.Conv2d(3, 4, 2)
    lib.nn.utils.spectral_norm(conv)
    with pytest.raises(RuntimeError, match="Cannot register two spectral_norm hooks on the "
                       "same parameter weight"):
        lib.nn.utils.spectral_norm(conv)
    with pytest.raises(ValueError, match="weight_norm of 'weight' not found in"):
        lib.nn.utils.remove_weight_norm(conv)
    with pytest.raises(AssertionError, match="Fusion only for eval!"):
        lib.nn.utils.fuse_conv_bn_eval(lib.nn.Conv2d(1, 1, 1), lib.nn.BatchNorm2d(1))
    assert isinstance(lib.nn.utils.skip_init(lib.nn.Linear, 2, 3), lib.nn.Linear)
    mod = importlib.import_module(lib_name + ".nn.utils.parametrizations")
    with pytest.raises(ValueError, match="Expected n_power_iterations to be positive"):
        mod.spectral_norm(lib.nn.Linear(2, 2), n_power_iterations=0)


# ---- parametrizations.orthogonal ---------------------------------------------------------

def _orthogonal_program(lib, shape, orthogonal_map, trivial):
    """An orthogonal Linear registered on a fixed weight, three SGD steps on a loss of its
    output: the weight, the parametrized original's gradient, and its state's names."""
    weight = np.random.default_rng(4).standard_normal(shape)
    x = lib.tensor(np.random.default_rng(5).standard_normal((3, shape[1])))
    layer = lib.nn.Linear(shape[1], shape[0], bias=False).double()
    with lib.no_grad():
        layer.weight.copy_(lib.tensor(weight))
    mod = importlib.import_module(lib.__name__ + ".nn.utils.parametrizations")
    mod.orthogonal(layer, orthogonal_map=orthogonal_map, use_trivialization=trivial)
    opt = lib.optim.SGD(layer.parameters(), lr=0.1)
    seen = [_np(layer.weight)]
    for _ in range(3):
        opt.zero_grad()
        (layer(x).tanh() * lib.arange(shape[0], dtype=lib.float64)).sum().backward()
        seen.append(_np(layer.parametrizations.weight.original.grad))
        opt.step()
        seen.append(_np(layer.weight))
    return seen + [sorted(layer.state_dict())]


@pytest.mark.parametrize("shape, orthogonal_map, trivial", [
    ((4, 4), None, True), ((4, 4), "cayley", True), ((4, 4), "householder", True),
    ((5, 3), "householder", False), ((3, 5), None, False)])
def test_orthogonal_same_as_torch(shape, orthogonal_map, trivial):
    torch = pytest.importorskip("torch")
    got = _orthogonal_program(disthook, shape, orthogonal_map, trivial)
    want = _orthogonal_program(torch, shape, orthogonal_map, trivial)
    assert got[-1] == want[-1]
    for a, b in zip(got[:-1], want[:-1]):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("orthogonal_map", ["matrix_exp", "cayley", "householder"])
@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (2, 4, 4)])
def test_orthogonal_weights_stay_orthonormal_while_training(shape, orthogonal_map):
    """A tall or wide weight (completed with random columns: torch's draw is its own) and a
    batch of matrices: orthonormal columns (rows, when wide) before and after steps."""
    p = disthook.nn.Parameter(disthook.randn(*shape, dtype=disthook.float64))
    holder = disthook.nn.Module()
    holder.register_parameter("weight", p)
    disthook.nn.utils.parametrizations.orthogonal(holder, orthogonal_map=orthogonal_map)
    opt = disthook.optim.Adam(holder.parameters(), lr=0.1)
    for _ in range(4):
        w = holder.weight
        tall = w if shape[-2] >= shape[-1] else w.mT
        gram = (tall.mT @ tall).detach().numpy()
        np.testing.assert_allclose(gram, np.broadcast_to(np.eye(gram.shape[-1]), gram.shape),
                                   atol=1e-12)
        opt.zero_grad()
        w.sum().backward()
        opt.step()


@pytest.mark.parametrize("lib_name", ["disthook", "torch"])
def test_orthogonal_errors_are_torchs(lib_name):
    lib = pytest.importorskip(lib_name)
    mod = importlib.import_module(lib_name + ".nn.utils.parametrizations")
    with pytest.raises(ValueError, match="Expected a matrix or batch of matrices. Got a tensor "
                                         "of 1 dimensions."):
        mod.orthogonal(lib.nn.Linear(2, 2), "bias")
    with pytest.raises(ValueError, match='orthogonal_map has to be one of "matrix_exp", '
                                         '"cayley", "householder". Got: qr'):
        mod.orthogonal(lib.nn.Linear(2, 2), orthogonal_map="qr")
    layer = mod.orthogonal(lib.nn.Linear(2, 2), orthogonal_map="cayley",
                           use_trivialization=False)  # registers: the weight as it is
    with pytest.raises(NotImplementedError, match="It is not possible to assign to the matrix "
                                                  "exponential or the Cayley"):
        layer.weight = lib.eye(2)
