"""The gradient of ReLU, leaky ReLU, hardtanh (ReLU6) and threshold, differentiated again (a
gradient penalty: WGAN-GP, StyleGAN2's R1): linear in the incoming gradient, and of zero
derivative in the activation's input, whose edge torch keeps, so that what lies before the
activation gets a gradient of zeros, not None (Adam then counts its step, as torch's does;
``autograd.grad`` finds it used). Against torch when it is installed."""
import numpy as np
import pytest

import disthook

torch = pytest.importorskip("torch")

ACTS = {
    "relu": lambda F, t: F.relu(t),
    "relu_": lambda F, t: F.relu(t * 1.0, inplace=True),
    "leaky_relu": lambda F, t: F.leaky_relu(t, 0.2),
    "hardtanh": lambda F, t: F.hardtanh(t, -0.5, 0.8),
    "relu6": lambda F, t: F.relu6(t * 4),
    "threshold": lambda F, t: F.threshold(t, 0.1, 2.0),
}
X = np.array([[1.0, 2.0, -0.5], [0.2, -0.1, 0.4], [-1.0, 0.3, 0.05]])


def penalty(lib, act, create_graph=True):
    w = lib.tensor([[0.5, -1.0, 2.0], [0.3, 0.7, -0.2]], dtype=lib.float64, requires_grad=True)
    b = lib.tensor([0.3, -0.4], dtype=lib.float64, requires_grad=True)
    x = lib.tensor(X, requires_grad=True)
    h = ACTS[act](lib.nn.functional, x @ w.t() + b)
    g, = lib.autograd.grad((h * lib.tensor([1.5, -2.0], dtype=lib.float64)).sum(), x,
                           create_graph=create_graph)
    return g, w, b


@pytest.mark.parametrize("act", ACTS)
def test_what_lies_before_the_activation_gets_zeros_as_torch(act):
    got, want = [], []
    for lib, log in ((torch, want), (disthook, got)):
        g, w, b = penalty(lib, act)
        node = g.grad_fn.next_functions[0][0]  # the activation's gradient, differentiated
        log.append(type(node).__name__)
        log.append([type(n).__name__ if n is not None else None
                    for n, _ in node.next_functions])
        gw, gb = lib.autograd.grad(g.pow(2).sum(), (w, b))
        log += [gw.detach().numpy(), gb.detach().numpy()]
    assert got[:2] == want[:2]
    np.testing.assert_allclose(got[2], want[2], rtol=1e-12)
    np.testing.assert_array_equal(got[3], want[3])
    assert not got[3].any()


@pytest.mark.parametrize("act", ["relu", "leaky_relu", "hardtanh", "threshold"])
def test_the_gradient_of_the_gradient_is_the_same_mask_again(act):
    """Third order: the incoming gradient's gradient passes the activation's mask again."""
    out = []
    for lib in (torch, disthook):
        g, w, _ = penalty(lib, act)
        v = lib.tensor(np.linspace(-1, 1, 9).reshape(3, 3), requires_grad=True)
        gv, = lib.autograd.grad((g * v).sum(), w, create_graph=True)
        out.append(lib.autograd.grad(gv.pow(2).sum(), v)[0].numpy())
    np.testing.assert_allclose(out[1], out[0], rtol=1e-12)


def test_a_penalty_stepped_alone_with_adam_trains_as_torch():
    """StyleGAN2's lazy R1: the penalty's backward on its own, then Adam (beta1 = 0). Before,
    the biases before each activation had no gradient here, so Adam skipped them and their
    step counts lagged."""
    out = []
    for lib in (torch, disthook):
        nn = lib.nn
        net = nn.Sequential(nn.Linear(3, 4), nn.LeakyReLU(0.2), nn.Linear(4, 4), nn.ReLU(),
                            nn.Linear(4, 1)).double()
        rng = np.random.RandomState(0)
        with lib.no_grad():
            for p in net.parameters():
                p.copy_(lib.tensor(rng.randn(*p.shape) * 0.5))
        opt = lib.optim.Adam(net.parameters(), lr=1e-2, betas=(0.0, 0.99))
        log = []
        for _ in range(3):
            x = lib.tensor(rng.randn(5, 3))
            opt.zero_grad()
            nn.functional.softplus(-net(x)).mean().backward()
            opt.step()
            x.requires_grad_(True)
            g, = lib.autograd.grad(net(x).sum(), x, create_graph=True)
            opt.zero_grad()
            g.pow(2).sum(1).mean().backward()
            log.append((net[0].bias.grad is None, net[2].bias.grad is None))
            opt.step()
        out.append(log + [p.detach().numpy().copy() for p in net.parameters()])
    assert out[1][:3] == out[0][:3] == [(False, False)] * 3
    for a, b in zip(out[1][3:], out[0][3:]):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
