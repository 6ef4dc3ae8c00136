"""CPU autocast (bfloat16 by default), as torch 2.13 runs it: the ops it lowers compute in
bfloat16, the losses in float32, the rest in their inputs' dtype; gradients reach float32
parameters in float32. The dtypes each op returns were measured with torch 2.13 and are
checked here without torch; with torch importable, a training step is compared with it."""
import numpy as np
import pytest

import disthook

try:
    import torch
except ImportError:
    torch = None

F = disthook.nn.functional


def _x(*shape, seed=0):
    return disthook.tensor(np.random.default_rng(seed).standard_normal(shape)
                           .astype(np.float32))


X, W, B = _x(4, 8), _x(6, 8, seed=1), _x(6, seed=2)
IMG, K = _x(2, 3, 8, 8, seed=3), _x(4, 3, 3, 3, seed=4)
M1, M2 = _x(2, 4, 8, seed=5), _x(2, 8, 5, seed=6)
XB, TGT = X.bfloat16(), disthook.tensor([1, 0, 2, 3])
BF, F32 = "bfloat16", "float32"

# what each returns inside autocast("cpu") (torch 2.13, measured)
RETURNS = {
    "linear": (lambda: F.linear(X, W, B), BF), "matmul": (lambda: X @ W.t(), BF),
    "mm": (lambda: X.mm(W.t()), BF), "bmm": (lambda: disthook.bmm(M1, M2), BF),
    "baddbmm": (lambda: disthook.baddbmm(_x(2, 4, 5), M1, M2), BF),
    "addmm": (lambda: disthook.addmm(B, X, W.t()), BF),
    "conv2d": (lambda: F.conv2d(IMG, K), BF),
    "conv_transpose2d": (lambda: F.conv_transpose2d(IMG, K.transpose(0, 1)), BF),
    "einsum": (lambda: disthook.einsum("ij,kj->ik", X, W), BF),
    "tensordot": (lambda: disthook.tensordot(X, W, ([1], [1])), BF),
    "sdpa": (lambda: F.scaled_dot_product_attention(M1, M1, M1), BF),
    "layer_norm": (lambda: F.layer_norm(X, (8,)), F32),
    "layer_norm_of_bf16": (lambda: F.layer_norm(XB, (8,), disthook.ones(8),
                                                disthook.zeros(8)), BF),
    "softmax": (lambda: F.softmax(X, -1), F32), "softmax_of_bf16": (lambda: F.softmax(XB, -1), BF),
    "cross_entropy_of_bf16": (lambda: F.cross_entropy(XB, TGT), F32),
    "mse_loss_of_bf16": (lambda: F.mse_loss(XB, XB), F32),
    "nll_loss_of_bf16": (lambda: F.nll_loss(XB, TGT), F32),
    "kl_div_of_bf16": (lambda: F.kl_div(XB, XB, reduction="batchmean"), F32),
    "prod_of_bf16": (lambda: XB.prod(), F32), "sum_of_bf16": (lambda: XB.sum(), BF),
    "mv": (lambda: disthook.mv(W, X[0]), F32), "dot": (lambda: disthook.dot(X[0], X[1]), F32),
    "add_mixed": (lambda: XB + X, F32), "cat_mixed": (lambda: disthook.cat([XB, X]), F32),
    "relu": (lambda: F.relu(X), F32), "gelu_of_bf16": (lambda: F.gelu(XB), BF),
    "reflect_pad2d_of_bf16": (lambda: F.pad(IMG.bfloat16(), (1, 1, 1, 1), mode="reflect"), F32),
    "reflect_pad3d_of_bf16": (lambda: F.pad(IMG[None].bfloat16(), (1,) * 6, mode="reflect"),
                              BF),
    "replicate_pad3d_of_bf16": (lambda: F.pad(IMG[None].bfloat16(), (1,) * 6,
                                              mode="replicate"), F32),
    "circular_pad_of_bf16": (lambda: F.pad(IMG.bfloat16(), (1, 1, 1, 1), mode="circular"), BF),
}


@pytest.mark.parametrize("name", RETURNS)
def test_the_dtype_each_op_returns_in_the_region(name):
    fn, dtype = RETURNS[name]
    with disthook.autocast("cpu", dtype=disthook.bfloat16):
        assert disthook.is_autocast_enabled("cpu")
        assert fn().dtype.name == dtype
    assert fn().dtype.name == (F32 if "bf16" not in name else fn().dtype.name)  # outside


def test_every_spelling_enters_bfloat16_and_nests():
    for region in (disthook.autocast(device_type="cpu"), disthook.cpu.amp.autocast(),
                   disthook.amp.autocast("cpu")):
        with region:
            assert disthook.get_autocast_dtype("cpu") is disthook.bfloat16
            assert F.linear(X, W).dtype is disthook.bfloat16
            with disthook.autocast("cpu", enabled=False):
                assert F.linear(X, W).dtype is disthook.float32
            assert F.linear(X, W).dtype is disthook.bfloat16
    assert not disthook.is_autocast_enabled("cpu")
    assert F.linear(X, W).dtype is disthook.float32


def _step(m):
    """One training step of a small float32 model under CPU autocast: its loss, the logits'
    dtype and the float32 parameters' gradients."""
    m.manual_seed(0)
    net = m.nn.Sequential(m.nn.Conv2d(3, 4, 3, padding=1), m.nn.ReLU(), m.nn.Flatten(),
                          m.nn.Linear(4 * 8 * 8, 16), m.nn.LayerNorm(16), m.nn.Linear(16, 5))
    for p in net.parameters():  # the same weights in both libraries
        p.data = m.tensor(np.random.default_rng(p.numel()).standard_normal(tuple(p.shape))
                          .astype(np.float32) * 0.1)
    img = m.tensor(IMG._data)
    q = m.tensor(M1._data)
    opt = m.optim.SGD(net.parameters(), lr=0.1)
    with m.autocast(device_type="cpu", dtype=m.bfloat16):
        logits = net(img)
        att = m.baddbmm(q @ q.transpose(1, 2), q, q.transpose(1, 2)).softmax(-1)
        loss = m.nn.functional.cross_entropy(logits, m.tensor([1, 4])) + att.float().mean()
    loss.backward()
    grads = [p.grad.clone() for p in net.parameters()]
    opt.step()
    return loss, logits.dtype, att.dtype, grads


def test_a_training_step_under_autocast():
    loss, logits_dtype, att_dtype, grads = _step(disthook)
    assert loss.dtype is disthook.float32 and logits_dtype is att_dtype is disthook.bfloat16
    assert all(g.dtype is disthook.float32 for g in grads)
    if torch is None:
        return
    t_loss, t_logits, t_att, t_grads = _step(torch)
    assert str(t_logits) == str(logits_dtype) and str(t_att) == str(att_dtype)
    assert abs(loss.item() - t_loss.item()) <= 2e-2 * abs(t_loss.item())
    for g, tg in zip(grads, t_grads):
        ref = tg.numpy()
        assert np.abs(g._data - ref).max() <= 2e-2 * np.abs(ref).max() + 1e-6


def test_regions_in_threads_are_their_own():
    import threading

    seen, go = {}, threading.Barrier(2)

    def work(name, enabled):
        with disthook.autocast("cpu", enabled=enabled):
            go.wait()
            for _ in range(50):  # regions open and close in the other thread meanwhile
                with disthook.autocast("cpu", enabled=enabled):
                    seen.setdefault(name, set()).add(F.linear(X, W).dtype.name)

    threads = [threading.Thread(target=work, args=(n, e)) for n, e in (("on", True),
                                                                       ("off", False))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {"on": {BF}, "off": {F32}}
    assert F.linear(X, W).dtype.name == F32
