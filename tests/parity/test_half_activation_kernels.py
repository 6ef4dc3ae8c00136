"""bfloat16 and float16 activations and their gradients as torch's CPU kernels compute them.

torch computes the backward of tanh, sigmoid, silu, gelu and softmax for bfloat16 (and all
but sigmoid's for float16) in float32 and rounds the gradient once, and the forward of
float16's sigmoid, silu, gelu and softmax likewise; disthook composed them from bfloat16 or
float16 ops, each rounding its own result (under ``torch.autocast`` a bfloat16 MLP's first
weight gradient was one bfloat16 step off torch's in a third of its entries). float16's
sigmoid backward is torch's two float16 products, ``g * (1 - y) * y``, in that order."""
import numpy as np
import pytest

import disthook

torch = pytest.importorskip("torch")

OPS = {
    "tanh": lambda lib, x: x.tanh(),
    "sigmoid": lambda lib, x: x.sigmoid(),
    "silu": lambda lib, x: lib.nn.functional.silu(x),
    "gelu": lambda lib, x: lib.nn.functional.gelu(x),
    "gelu_tanh": lambda lib, x: lib.nn.functional.gelu(x, approximate="tanh"),
    "softmax": lambda lib, x: x.reshape(40, 100).softmax(-1).reshape(-1),
}


def _run(lib, op, dtype_name, x, g):
    dtype = getattr(lib, dtype_name)
    xt = lib.tensor(x).to(dtype).requires_grad_()
    y = OPS[op](lib, xt)
    y.backward(lib.tensor(g).to(dtype))
    assert y.dtype == dtype and xt.grad.dtype == dtype
    return y.detach().float().numpy(), xt.grad.float().numpy()


@pytest.mark.parametrize("dtype_name", ["bfloat16", "float16"])
@pytest.mark.parametrize("op", sorted(OPS))
def test_forward_and_gradient_bits_are_torchs(op, dtype_name):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(4000) * 2).astype(np.float32)
    g = rng.standard_normal(4000).astype(np.float32)
    want_y, want_g = _run(torch, op, dtype_name, x, g)
    got_y, got_g = _run(disthook, op, dtype_name, x, g)
    if op in ("tanh", "sigmoid", "silu") or (op == "softmax" and dtype_name == "bfloat16"):
        np.testing.assert_array_equal(got_y, want_y)
        np.testing.assert_array_equal(got_g, want_g)
        return
    # gelu's erf and tanh and softmax's exp are numpy's, not torch's vectorised ones: rounded
    # once from float32 as torch's, a few elements differ, mostly in gelu's far negative tail
    # (composed of rounded steps, a third to a half of them differed)
    for got, want in ((got_y, want_y), (got_g, want_g)):
        np.testing.assert_allclose(got, want, rtol=2.0 ** -7, atol=1e-4)
        assert (got != want).mean() < 0.02

def test_autocast_mlp_weight_gradients_are_torchs():
    x = np.linspace(-1, 1, 20, dtype=np.float32).reshape(5, 4)

    def run(lib):
        a, b = lib.nn.Linear(4, 8), lib.nn.Linear(8, 2)
        with lib.no_grad():
            a.weight.copy_(lib.tensor(np.linspace(-1, 1, 32, dtype=np.float32).reshape(8, 4)))
            b.weight.copy_(lib.tensor(np.linspace(-1, 1, 16, dtype=np.float32).reshape(2, 8)))
            a.bias.zero_()
            b.bias.fill_(0.1)
        with lib.autocast("cpu", dtype=lib.bfloat16):
            y = b(lib.tanh(a(lib.tensor(x))))
        y.float().sum().backward()
        return [t.detach().float().numpy() for t in (y, a.weight.grad, a.bias.grad, b.weight.grad)]

    for got, want in zip(run(disthook), run(torch), strict=True):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("op", ["tanh", "sigmoid", "silu", "softmax"])
def test_half_gradients_stay_differentiable(op):
    x = disthook.linspace(-2, 2, 4000).to(disthook.bfloat16).requires_grad_()
    (g,) = disthook.autograd.grad(OPS[op](disthook, x).sum(), x, create_graph=True)
    assert g.dtype == disthook.bfloat16 and g.requires_grad
    (h,) = disthook.autograd.grad(g.float().sum(), x)
    assert h.dtype == disthook.bfloat16 and np.isfinite(h.float().numpy()).all()
