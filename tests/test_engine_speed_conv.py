"""Convolutions unfold a few samples at a time (ops.conv.BATCH_COLUMNS_BYTES): the result
must not depend on how the batch is split."""
import numpy as np
import pytest
import torch
from helpers import check_op, lib

import disthook
from disthook.ops import conv

CASES = [  # input shape, weight shape, stride, padding (before, after), dilation, groups
    ((5, 4, 9, 8), (6, 2, 3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 2),  # wide layout
    ((5, 3, 9, 8), (4, 3, 3, 2), (2, 2), ((1, 1), (0, 0)), (1, 1), 1),  # strided layout
    ((3, 2, 10, 9), (4, 2, 2, 3), (1, 1), ((2, 2), (2, 2)), (2, 2), 1),
    ((4, 2, 11), (3, 2, 4), (1,), ((1, 1),), (1,), 1),
    ((3, 2, 5, 4, 4), (2, 2, 2, 3, 2), (1, 2, 1), ((0, 0),) * 3, (1, 1, 1), 1),
]


def _run(x_shape, w_shape, stride, padding, dilation, groups):
    rng = np.random.default_rng(0)
    x = disthook.tensor(rng.standard_normal(x_shape), requires_grad=True)
    w = disthook.tensor(rng.standard_normal(w_shape), requires_grad=True)
    b = disthook.tensor(rng.standard_normal(w_shape[0]), requires_grad=True)
    y = conv.convolve(x, w, b, conv.ConvSpec(stride, padding, dilation, groups))
    y.backward(disthook.tensor(rng.standard_normal(tuple(y.shape))))
    return [t.detach().numpy() for t in (y, x.grad, w.grad, b.grad)]


@pytest.mark.parametrize("case", CASES)
def test_sample_at_a_time_equals_whole_batch(monkeypatch, case):
    whole = _run(*case)
    monkeypatch.setattr(conv, "BATCH_COLUMNS_BYTES", 1)  # one sample per product
    one = _run(*case)
    # two samples of the first case (2, 2, 1), other numbers in the others
    monkeypatch.setattr(conv, "BATCH_COLUMNS_BYTES", 2 * 4 * 9 * (9 * 10) * 8)
    some = _run(*case)
    for a, b, c in zip(whole, one, some):
        np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(c, a, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kwargs", [{"padding": 1}, {"stride": 2}])
def test_split_batch_conv_matches_torch_to_second_order(monkeypatch, kwargs):
    monkeypatch.setattr(conv, "BATCH_COLUMNS_BYTES", 1)
    check_op(lambda x, w: lib(x).nn.functional.conv2d(x, w, **kwargs),
             (3, 2, 5, 5), (3, 2, 3, 3), double=True)


def test_empty_batch():
    x = disthook.zeros(0, 2, 5, 5, requires_grad=True)
    w = disthook.ones(3, 2, 3, 3, requires_grad=True)
    y = disthook.nn.functional.conv2d(x, w)
    assert tuple(y.shape) == (0, 3, 3, 3)
    y.sum().backward()
    assert tuple(x.grad.shape) == (0, 2, 5, 5)
    assert np.all(w.grad.numpy() == 0)


ADJOINT_CASES = CASES + [  # stride-1 shapes the input gradient's wide path must cover
    ((2, 4, 7, 6), (6, 2, 3, 2), (1, 1), ((1, 2), (0, 1)), (2, 1), 2),  # uneven padding
    ((2, 3, 7, 7), (4, 3, 3, 3), (1, 1), ((3, 3), (3, 3)), (1, 1), 1),  # padding > kernel
    ((2, 3, 7, 7), (4, 3, 1, 1), (1, 1), ((0, 0), (0, 0)), (1, 1), 1),  # 1x1
    ((2, 3, 11), (5, 3, 4), (1,), ((1, 1),), (2,), 1),  # 1-d, dilated
    ((2, 4, 5, 6, 7), (2, 2, 2, 3, 2), (1, 1, 1), ((1, 1), (0, 0), (2, 2)), (1, 2, 1), 2),
    ((2, 6, 8, 8), (6, 1, 3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 6),  # depthwise
    # unpadded: the runs are added into the input gradient itself, the last one clipped
    ((3, 4, 8, 7), (5, 4, 3, 3), (1, 1), ((0, 0), (0, 0)), (1, 1), 1),
    ((2, 4, 9, 9), (4, 2, 2, 3), (1, 1), ((0, 0), (0, 0)), (2, 2), 2),
    ((2, 3, 4, 5, 6), (2, 3, 2, 2, 3), (1, 1, 1), ((0, 0),) * 3, (1, 1, 2), 1),
]


@pytest.mark.parametrize("case", ADJOINT_CASES)
@pytest.mark.parametrize("columns_bytes", [1, 1 << 20])
def test_gradients_are_the_adjoints_of_the_forward(monkeypatch, case, columns_bytes):
    """<conv(x, w), g> = <x, conv_input_grad(g, w)> = <w, conv_weight_grad(x, g)> in float64,
    with a non-contiguous g; the forward itself is checked against torch elsewhere."""
    monkeypatch.setattr(conv, "BATCH_COLUMNS_BYTES", columns_bytes)
    x_shape, w_shape, stride, padding, dilation, groups = case
    spec = conv.ConvSpec(stride, padding, dilation, groups)
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal(x_shape), rng.standard_normal(w_shape)
    y = conv.conv_forward(x, w, spec)
    g = np.swapaxes(np.swapaxes(rng.standard_normal(y.shape), 0, 1).copy(), 0, 1)
    dx = conv.conv_input_grad(g, w, spec, x.shape)
    dw = conv.conv_weight_grad(x, g, spec, w.shape)
    assert dx.shape == x.shape and dw.shape == w.shape
    assert np.vdot(x, dx) == pytest.approx(np.vdot(y, g), rel=1e-12)
    assert np.vdot(w, dw) == pytest.approx(np.vdot(y, g), rel=1e-12)


@pytest.mark.parametrize("case", ADJOINT_CASES)
@pytest.mark.parametrize("columns_bytes", [1, 1 << 20])
def test_forward_adds_the_bias_in_its_product(monkeypatch, case, columns_bytes):
    """The bias rides in the product (a row of ones under each group's columns, written once
    per call): the same as adding it to the output, batch after batch."""
    monkeypatch.setattr(conv, "BATCH_COLUMNS_BYTES", columns_bytes)
    x_shape, w_shape, stride, padding, dilation, groups = case
    spec = conv.ConvSpec(stride, padding, dilation, groups)
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal(x_shape), rng.standard_normal(w_shape)
    bias = rng.standard_normal(w_shape[0])
    plain = conv.conv_forward(x, w, spec)
    with_bias = conv.conv_forward(x, w, spec, bias)
    expected = plain + bias.reshape(-1, *[1] * (plain.ndim - 2))
    np.testing.assert_allclose(with_bias, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("case", ADJOINT_CASES)
@pytest.mark.parametrize("columns_bytes", [1, 1 << 20])
def test_weight_gradient_sums_the_bias_gradient_in_its_product(monkeypatch, case, columns_bytes):
    """With ``bias=True`` the weight gradient's products also give the bias gradient (a row of
    ones under each group's columns): the same weight gradient, and g summed over all but
    its channel dim."""
    monkeypatch.setattr(conv, "BATCH_COLUMNS_BYTES", columns_bytes)
    x_shape, w_shape, stride, padding, dilation, groups = case
    spec = conv.ConvSpec(stride, padding, dilation, groups)
    rng = np.random.default_rng(2)
    x = rng.standard_normal(x_shape)
    g = rng.standard_normal((x_shape[0], w_shape[0],
                             *conv.conv_output_size(spec, x_shape[2:], w_shape[2:])))
    dw, db = conv.conv_weight_grad(x, g, spec, w_shape, bias=True)
    assert dw.flags.c_contiguous and db.shape == (w_shape[0],)
    np.testing.assert_allclose(dw, conv.conv_weight_grad(x, g, spec, w_shape),
                               rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(db, g.sum(axis=(0, *range(2, g.ndim))), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("create_graph", [False, True])
def test_a_backward_takes_the_bias_gradient_from_the_weight_gradients_products(
        monkeypatch, create_graph):
    """A backward that records no graph of its gradients takes a convolution's bias gradient
    from the weight gradient's products (no pass of its own over the output gradient); one
    that does (create_graph) keeps the ops, whose gradients have their own nodes; torch's
    values either way."""
    asked = []
    real = conv.conv_weight_grad
    monkeypatch.setattr(conv, "conv_weight_grad",
                        lambda *a, bias=False: asked.append(bias) or real(*a, bias=bias))
    grads = {}
    for name, t in (("disthook", disthook), ("torch", torch)):
        t.manual_seed(0)
        rng = np.random.default_rng(3)
        layer = t.nn.Conv2d(3, 4, 3, padding=1, dtype=t.float64)
        with t.no_grad():
            layer.weight.copy_(t.tensor(rng.standard_normal((4, 3, 3, 3))))
            layer.bias.copy_(t.tensor(rng.standard_normal(4)))
        x = t.tensor(rng.standard_normal((2, 3, 6, 5)), requires_grad=True)
        out = (layer(x) ** 2).sum()
        grads[name] = t.autograd.grad(out, (x, layer.weight, layer.bias),
                                      create_graph=create_graph)
    assert asked == [not create_graph]
    assert all(g.grad_fn is not None for g in grads["disthook"]) == create_graph
    for got, expected in zip(grads["disthook"], grads["torch"]):
        np.testing.assert_allclose(got.detach().numpy(), expected.detach().numpy(),
                                   rtol=1e-12, atol=1e-12)
