"""The activations beyond relu / gelu / silu / elu: functional, in-place and module forms,
values and gradients (first and second order) against torch and finite differences."""
from __future__ import annotations

import numpy as np
import pytest
from helpers import check_op, lib

import disthook
from disthook import nn
from disthook.nn import functional as F

UNARY = [
    ("relu6", {}, 4.0), ("hardtanh", {"min_val": -0.5, "max_val": 1.5}, 1.0),
    ("threshold", {"threshold": 0.3, "value": -2.0}, 1.0), ("selu", {}, 1.0),
    ("celu", {"alpha": 0.7}, 1.0), ("hardsigmoid", {}, 2.0), ("hardshrink", {"lambd": 0.4}, 1.0),
    ("softshrink", {"lambd": 0.4}, 1.0), ("logsigmoid", {}, 1.0), ("softsign", {}, 1.0),
    ("tanhshrink", {}, 1.0), ("softmin", {"dim": 1}, 1.0), ("glu", {"dim": 1}, 1.0),
    ("glu", {"dim": -1}, 1.0),
]


@pytest.mark.parametrize("name, kwargs, scale", UNARY, ids=[u[0] for u in UNARY])
def test_functional_activation(name, kwargs, scale):
    # ``scale`` spreads the inputs over the kinks (relu6 at 0 and 6, hardsigmoid at +-3)
    # (torch has no second derivative of hardsigmoid)
    check_op(lambda x: getattr(lib(x).nn.functional, name)(x * scale, **kwargs), (3, 4, 2),
             double=name != "hardsigmoid", fd_atol=1e-4)


@pytest.mark.parametrize("weight", [(1,), (4,)])
def test_prelu(weight):
    check_op(lambda x, w: lib(x).nn.functional.prelu(x, w), (3, 4, 2), weight, double=True)
    check_op(lambda x, w: lib(x).nn.functional.prelu(x, w), (4,), (1,))


def test_rrelu_eval_is_leaky_relu_at_the_mean_slope():
    check_op(lambda x: lib(x).nn.functional.rrelu(x, 0.1, 0.3, training=False), (3, 5),
             double=True)


def test_rrelu_training_draws_slopes_in_range_and_backward_uses_them():
    x = disthook.randn(400, requires_grad=True)
    y = F.rrelu(x, 0.1, 0.3, training=True)
    assert y.grad_fn.name() == "RreluWithNoiseBackward0"
    y.sum().backward()
    neg = x.detach().numpy() <= 0
    slopes = y.detach().numpy()[neg] / x.detach().numpy()[neg]
    assert slopes.min() >= 0.1 and slopes.max() <= 0.3 and slopes.std() > 0.01
    np.testing.assert_allclose(x.grad.numpy()[neg], slopes, rtol=1e-5)
    np.testing.assert_array_equal(x.grad.numpy()[~neg], 1.0)


@pytest.mark.parametrize("name, args", [
    ("relu_", ()), ("elu_", (0.5,)), ("leaky_relu_", (0.2,)), ("hardtanh_", (-0.5, 0.5)),
    ("threshold_", (0.1, 3.0)), ("selu_", ()), ("celu_", (0.5,)), ("rrelu_", (0.2, 0.2)),
])
def test_inplace_forms_write_into_the_input_and_keep_the_gradient(name, args):
    # (the node names are torch's in-place ones: ThresholdBackward1, EluBackward1, ...)
    check_op(lambda x: getattr(lib(x).nn.functional, name)(x * 1.0, *args), (3, 4))
    x = disthook.randn(3, 4)
    assert getattr(F, name)(x, *args) is x


MODULES = [
    (lambda m: m.ReLU6(), "relu6", {}), (lambda m: m.Hardtanh(-2, 0.5), "hardtanh",
                                         {"min_val": -2.0, "max_val": 0.5}),
    (lambda m: m.Threshold(0.1, 20), "threshold", {"threshold": 0.1, "value": 20.0}),
    (lambda m: m.SELU(), "selu", {}), (lambda m: m.CELU(2.0), "celu", {"alpha": 2.0}),
    (lambda m: m.Hardsigmoid(), "hardsigmoid", {}), (lambda m: m.LogSigmoid(), "logsigmoid", {}),
    (lambda m: m.Hardshrink(0.3), "hardshrink", {"lambd": 0.3}),
    (lambda m: m.Softshrink(0.3), "softshrink", {"lambd": 0.3}),
    (lambda m: m.Softsign(), "softsign", {}), (lambda m: m.Tanhshrink(), "tanhshrink", {}),
    (lambda m: m.GLU(1), "glu", {"dim": 1}), (lambda m: m.Softmin(1), "softmin", {"dim": 1}),
    (lambda m: m.Softmax2d(), "softmax", {"dim": -3}),
]


@pytest.mark.parametrize("make, name, kwargs", MODULES, ids=[m[1] for m in MODULES])
def test_activation_module_matches_functional(make, name, kwargs):
    module = make(nn)
    check_op(lambda x: module(x) if isinstance(x, disthook.Tensor) else
             getattr(lib(x).nn.functional, name)(x, **kwargs), (2, 4, 3, 2))


def test_prelu_module_learns_one_slope_per_channel():
    torch = pytest.importorskip("torch")
    m = nn.PReLU(3, init=0.1)
    tm = torch.nn.PReLU(3, init=0.1).double()
    x = np.random.default_rng(1).standard_normal((2, 3, 4))
    y = m.double()(disthook.tensor(x))
    ty = tm(torch.tensor(x))
    (y ** 2).sum().backward()
    (ty ** 2).sum().backward()
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(m.weight.grad.numpy(), tm.weight.grad.numpy(), rtol=1e-10)
    assert repr(m) == repr(tm) == "PReLU(num_parameters=3)"


def test_reprs_match_torch():
    torch = pytest.importorskip("torch")
    for name, args in [("ReLU6", (True,)), ("Hardtanh", (-2.0, 3.0)), ("Threshold", (0.1, 2)),
                       ("CELU", (0.5,)), ("RReLU", ()), ("Hardshrink", (0.2,)),
                       ("Softshrink", ()), ("GLU", ()), ("Softmin", (1,)), ("SELU", (True,)),
                       ("Hardsigmoid", ()), ("LogSigmoid", ()), ("Softmax2d", ())]:
        assert repr(getattr(nn, name)(*args)) == repr(getattr(torch.nn, name)(*args)), name


@pytest.mark.parametrize("call, error, match", [
    (lambda: F.glu(disthook.randn(3, 5)), RuntimeError, "Halving dimension must be even"),
    (lambda: F.prelu(disthook.randn(2, 3), disthook.ones(4)), RuntimeError,
     "Found parameter numbers = 4 and channel size = 3"),
    (lambda: F.hardtanh(disthook.randn(2), 1.0, 0.0), ValueError, "min_val cannot be greater"),
    (lambda: nn.Softmax2d()(disthook.randn(2, 3)), ValueError, "expected input to be 3D or 4D"),
])
def test_errors_are_torchs(call, error, match):
    with pytest.raises(error, match=match):
        call()
