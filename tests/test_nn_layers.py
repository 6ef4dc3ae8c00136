"""The layers of disthook.nn and their functional forms: every op through check_op (forward
vs torch, gradients vs central differences in float64, second order where ``double=True``),
module behaviour (initialisation, running statistics, train/eval, containers), reprs and
errors. Expectations are torch 2.13's; tests/parity/test_layer_parity.py checks them against
torch itself.
"""
import math
import re
from collections import OrderedDict

import numpy as np
import pytest
from helpers import check_op, lib

import disthook
import disthook.nn.functional as F
from disthook import nn


def fn(name, *args, **kwargs):
    """``nn.functional.<name>(x, *args, **kwargs)`` of whichever library ``x`` belongs to."""
    def call(*xs):
        return getattr(lib(xs[0]).nn.functional, name)(*xs, *args, **kwargs)
    return call


# ---- convolution ----------------------------------------------------------------------------

CONV2D = [  # (input, weight, bias?, kwargs)
    ((2, 2, 4, 4), (3, 2, 3, 3), True, {}),
    ((1, 2, 5, 4), (2, 2, 3, 2), False, {"stride": 2}),
    ((1, 2, 3, 4), (2, 2, 2, 3), True, {"stride": (2, 1), "padding": (1, 2)}),
    ((1, 1, 5, 5), (2, 1, 2, 2), False, {"dilation": 2, "padding": 1}),
    ((1, 4, 3, 3), (4, 2, 2, 2), True, {"groups": 2}),
    ((1, 2, 5, 4), (2, 1, 3, 2), False,
     {"groups": 2, "stride": 2, "padding": 1, "dilation": (1, 2)}),
    ((1, 2, 4, 3), (2, 2, 3, 3), True, {"padding": "same"}),
    ((1, 1, 4, 5), (2, 1, 2, 4), False, {"padding": "same", "dilation": (2, 1)}),
    ((1, 2, 4, 3), (2, 2, 3, 3), False, {"padding": "valid"}),
    ((2, 4, 3), (2, 2, 3, 3), True, {"padding": 1}),
]


@pytest.mark.filterwarnings("ignore:Using padding='same'")
@pytest.mark.parametrize("x, w, bias, kwargs", CONV2D, ids=[str(c[3]) for c in CONV2D])
def test_conv2d(x, w, bias, kwargs):
    check_op(fn("conv2d", **kwargs), x, w, *[(w[0],)] * bias)


CONV1D = [
    ((2, 3, 6), (4, 3, 3), {}),
    ((1, 4, 9), (4, 2, 2), {"stride": 2, "padding": 1, "dilation": 2, "groups": 2}),
    ((3, 6), (2, 3, 4), {"padding": "same"}),
]


@pytest.mark.filterwarnings("ignore:Using padding='same'")
@pytest.mark.parametrize("x, w, kwargs", CONV1D, ids=[str(c[2]) for c in CONV1D])
def test_conv1d(x, w, kwargs):
    check_op(fn("conv1d", **kwargs), x, w, (w[0],))


@pytest.mark.parametrize("kwargs", [{}, {"stride": 2, "padding": 1}], ids=["stride1", "stride2"])
def test_conv2d_second_order(kwargs):
    check_op(fn("conv2d", **kwargs), (1, 2, 3, 3), (2, 2, 2, 2), (2,), double=True)


def test_conv_third_order_is_a_convolution_again():
    x = disthook.randn(1, 2, 5, 5, dtype=disthook.float64, requires_grad=True)
    w = disthook.randn(3, 2, 3, 3, dtype=disthook.float64, requires_grad=True)
    y = F.conv2d(x, w, stride=2, padding=1)
    (gx,) = disthook.autograd.grad(y.square().sum(), x, create_graph=True)
    (gw,) = disthook.autograd.grad(gx.square().sum(), w, create_graph=True)
    (gx2,) = disthook.autograd.grad(gw.sum(), x)
    assert gx2.shape == x.shape and np.isfinite(gx2.numpy()).all()


def test_conv_integer_input():
    x = disthook.arange(32).reshape(1, 2, 4, 4)
    w = disthook.ones(1, 2, 2, 2, dtype=disthook.int64)
    out = F.conv2d(x, w)
    assert out.dtype == disthook.int64
    assert out[0, 0, 0, 0].item() == 0 + 1 + 4 + 5 + 16 + 17 + 20 + 21


def test_conv_empty_batch():
    assert F.conv2d(disthook.zeros(0, 2, 5, 5), disthook.zeros(3, 2, 3, 3)).shape == (0, 3, 3, 3)


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_pad_modes(mode):
    name = mode != "circular"  # torch's node is CopySlices, named torch::autograd::CopySlices
    check_op(fn("pad", (1, 2, 2, 1), mode=mode), (1, 2, 3, 4), double=True, name=name)
    check_op(fn("pad", (2, 1), mode=mode), (2, 4), double=True, name=name)


def test_pad_constant():
    check_op(fn("pad", (1, 2, 0, 1), value=1.5), (2, 2, 3))


@pytest.mark.parametrize("mode", ["zeros", "reflect", "replicate", "circular"])
def test_conv2d_padding_modes(mode):
    disthook.manual_seed(0)
    conv = nn.Conv2d(2, 3, 3, padding=1, padding_mode=mode).double()
    x = disthook.randn(2, 2, 5, 4, dtype=disthook.float64, requires_grad=True)
    padded = x if mode == "zeros" else F.pad(x, (1, 1, 1, 1), mode=mode)
    want = F.conv2d(padded, conv.weight, conv.bias, padding=1 if mode == "zeros" else 0)
    np.testing.assert_allclose(conv(x).detach().numpy(), want.detach().numpy())


# ---- pooling --------------------------------------------------------------------------------

MAX_POOL2D = [  # (input, kwargs, second order?)
    ((2, 2, 4, 4), {"kernel_size": 2}, True),
    ((1, 2, 5, 6), {"kernel_size": 3, "stride": 2, "padding": 1}, False),
    ((1, 1, 5, 6), {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True}, False),
    ((1, 1, 6, 7), {"kernel_size": (2, 3), "stride": 1, "padding": 1, "dilation": 2}, True),
    ((2, 5, 5), {"kernel_size": 2, "stride": (1, 2), "ceil_mode": True}, False),
]


@pytest.mark.parametrize("x, kwargs, double", MAX_POOL2D, ids=[str(c[1]) for c in MAX_POOL2D])
def test_max_pool2d(x, kwargs, double):
    check_op(fn("max_pool2d", **kwargs), x, double=double)


def test_max_pool1d():
    check_op(fn("max_pool1d", 3, stride=2, padding=1, ceil_mode=True), (2, 2, 7))
    check_op(fn("max_pool1d", 2), (3, 6))


def test_max_pool2d_return_indices():
    x = disthook.tensor([[[[1.0, 5.0, 2.0, 2.0], [3.0, 4.0, 2.0, 2.0], [0.0, 0.0, 9.0, 1.0]]]],
                        requires_grad=True)
    values, indices = F.max_pool2d(x, 2, ceil_mode=True, return_indices=True)
    assert values.tolist() == [[[[5.0, 2.0], [0.0, 9.0]]]]
    assert indices.tolist() == [[[[1, 2], [8, 10]]]]  # ties go to the first position
    assert indices.dtype == disthook.int64 and not indices.requires_grad
    assert values.grad_fn.name() == "MaxPool2DWithIndicesBackward0"
    values.sum().backward()
    assert x.grad.tolist() == [[[[0, 1, 1, 0], [0, 0, 0, 0], [1, 0, 1, 0]]]]


def test_max_pool_overlapping_windows_add_up():
    x = disthook.tensor([[[[0.0, 9.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]]],
                        requires_grad=True)
    F.max_pool2d(x, 2, stride=1).sum().backward()
    # the all-zero windows take their first position
    assert x.grad.tolist() == [[[[0, 2, 0], [1, 1, 0], [0, 0, 0]]]]


AVG_POOL2D = [  # (input, kwargs, second order?)
    ((2, 2, 4, 4), {"kernel_size": 2}, True),
    ((1, 2, 5, 6), {"kernel_size": 3, "stride": 2, "padding": 1}, False),
    ((1, 1, 5, 6), {"kernel_size": 3, "stride": 2, "padding": 1, "count_include_pad": False},
     False),
    ((1, 1, 5, 6), {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True}, False),
    ((1, 1, 5, 6), {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True,
                        "count_include_pad": False}, True),
    ((2, 4, 5), {"kernel_size": (2, 3), "divisor_override": 4}, False),
]


@pytest.mark.parametrize("x, kwargs, double", AVG_POOL2D, ids=[str(c[1]) for c in AVG_POOL2D])
def test_avg_pool2d(x, kwargs, double):
    check_op(fn("avg_pool2d", **kwargs), x, double=double)


def test_avg_pool1d():
    check_op(fn("avg_pool1d", 3, stride=2, padding=1, ceil_mode=True,
                count_include_pad=False), (2, 2, 7))


@pytest.mark.parametrize("x, size", [((1, 2, 6, 6), 3), ((1, 2, 7, 5), (3, 2)),
                                     ((2, 5, 7), (4, None)), ((1, 2, 4, 4), 1),
                                     ((1, 1, 3, 3), (5, 4))])
def test_adaptive_avg_pool2d(x, size):
    check_op(fn("adaptive_avg_pool2d", size), x)


def test_adaptive_avg_pool_second_order_and_1d():
    check_op(fn("adaptive_avg_pool2d", (2, 3)), (1, 1, 5, 4), double=True)
    check_op(fn("adaptive_avg_pool1d", 3), (2, 2, 7))


# ---- normalisation --------------------------------------------------------------------------

@pytest.mark.parametrize("x", [(4, 3), (3, 2, 4), (2, 2, 3, 2)])
def test_batch_norm_training(x):
    def bn(a, w, b):
        return lib(a).nn.functional.batch_norm(a, None, None, w, b, training=True)

    check_op(bn, x, (x[1],), (x[1],), double=True)
    check_op(fn("batch_norm", None, None, training=True, eps=0.1), x, double=True)


def test_batch_norm_eval_uses_running_statistics():
    mean, var = np.array([0.5, -1.0, 2.0]), np.array([1.5, 0.5, 2.0])

    def bn(a, w, b):
        m = lib(a).tensor(mean)
        v = lib(a).tensor(var)
        return lib(a).nn.functional.batch_norm(a, m, v, w, b, training=False, eps=1e-3)

    check_op(bn, (4, 3, 2), (3,), (3,), double=True,
             np_fn=lambda a, w, b: ((a - mean[:, None]) / np.sqrt(var[:, None] + 1e-3))
             * w[:, None] + b[:, None])


@pytest.mark.parametrize("x, shape", [((3, 5), (5,)), ((2, 2, 4), (2, 4)), ((6,), (6,))])
def test_layer_norm(x, shape):
    check_op(lambda a, w, b: lib(a).nn.functional.layer_norm(a, shape, w, b), x, shape, shape,
             double=True)
    check_op(fn("layer_norm", shape, eps=0.1), x, double=True)


# ---- embedding ------------------------------------------------------------------------------

INDICES = np.array([[1, 2, 2], [0, 1, 4]])


def test_embedding():
    def embed(w):
        return lib(w).nn.functional.embedding(lib(w).tensor(INDICES), w)

    check_op(embed, (5, 3), double=True, np_fn=lambda w: w[INDICES])


def test_embedding_scale_grad_by_freq():
    w = disthook.randn(5, 3, requires_grad=True)
    F.embedding(disthook.tensor(INDICES), w, padding_idx=0, scale_grad_by_freq=True).sum() \
        .backward()
    # row 1 and 2 are looked up twice, row 4 once, row 0 is padding, row 3 never
    assert w.grad.tolist() == [[0.0] * 3, [1.0] * 3, [1.0] * 3, [0.0] * 3, [1.0] * 3]


def test_embedding_padding_idx_row_gets_no_gradient():
    emb = nn.Embedding(5, 3, padding_idx=1)
    assert emb.weight[1].tolist() == [0.0, 0.0, 0.0]
    emb(disthook.tensor([[1, 2, 2], [0, 1, 4]])).sum().backward()
    assert emb.weight.grad.tolist() == [[1.0] * 3, [0.0] * 3, [2.0] * 3, [0.0] * 3, [1.0] * 3]


def test_embedding_max_norm_renormalises_looked_up_rows_in_place():
    weight = disthook.tensor([[3.0, 4.0], [0.3, 0.4], [6.0, 8.0]])
    emb = nn.Embedding.from_pretrained(weight.clone(), max_norm=1.0)
    out = emb(disthook.tensor([0, 1]))
    np.testing.assert_allclose(out.norm(dim=1).numpy(), [1.0, 0.5], rtol=1e-6)
    np.testing.assert_allclose(emb.weight.numpy()[2], [6.0, 8.0])  # not looked up
    assert not emb.weight.requires_grad and repr(emb) == "Embedding(3, 2, max_norm=1.0)"


def test_embedding_any_index_shape():
    emb = nn.Embedding(10, 4)
    assert emb(disthook.tensor(3)).shape == (4,)
    assert emb(disthook.tensor([[[1, 2]]], dtype=disthook.int32)).shape == (1, 1, 2, 4)


# ---- dropout --------------------------------------------------------------------------------

def test_dropout_zeroes_and_scales():
    disthook.manual_seed(0)
    x = disthook.ones(1000, requires_grad=True)
    y = F.dropout(x, 0.25)
    kept = y.detach().numpy() != 0
    assert 0.65 < kept.mean() < 0.85
    np.testing.assert_allclose(y.detach().numpy()[kept], 1 / 0.75)
    assert y.grad_fn.name() == "MulBackward0"
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), y.detach().numpy())


def test_dropout_uses_disthooks_generator():
    disthook.manual_seed(3)
    a = F.dropout(disthook.ones(50))
    disthook.manual_seed(3)
    assert F.dropout(disthook.ones(50)).tolist() == a.tolist()


def test_dropout_identity_in_eval_and_at_p0():
    x = disthook.ones(5, requires_grad=True)
    assert F.dropout(x, 0.5, training=False) is x
    assert F.dropout(x, 0.0) is x
    layer = nn.Dropout(0.5).eval()
    assert layer(x) is x
    assert F.dropout(x, 1.0).tolist() == [0.0] * 5


def test_dropout_inplace():
    x = disthook.ones(200)
    y = nn.Dropout(0.5, inplace=True)(x)
    assert y is x and set(np.unique(x.numpy())) <= {0.0, 2.0}


# ---- activations, flatten -------------------------------------------------------------------

@pytest.mark.parametrize("module, name, kwargs", [
    (nn.ReLU(), "relu", {}), (nn.LeakyReLU(0.2), "leaky_relu", {"negative_slope": 0.2}),
    (nn.GELU(), "gelu", {}), (nn.GELU("tanh"), "gelu", {"approximate": "tanh"}),
    (nn.SiLU(), "silu", {}), (nn.Sigmoid(), "sigmoid", {}), (nn.Tanh(), "tanh", {}),
    (nn.Softmax(dim=1), "softmax", {"dim": 1}), (nn.LogSoftmax(dim=-1), "log_softmax",
                                                  {"dim": -1}),
], ids=lambda v: v if isinstance(v, str) else "")
def test_activation_modules(module, name, kwargs):
    check_op(lambda x: module(x) if isinstance(x, disthook.Tensor) else
             getattr(lib(x).nn.functional, name)(x, **kwargs), (2, 3, 2), double=True)


def test_inplace_activations():
    for layer in (nn.ReLU(inplace=True), nn.LeakyReLU(0.1, inplace=True), nn.SiLU(inplace=True)):
        x = disthook.randn(3, 4)
        want = type(layer)()(x.clone()) if not isinstance(layer, nn.LeakyReLU) else \
            nn.LeakyReLU(0.1)(x.clone())
        assert layer(x) is x
        np.testing.assert_allclose(x.numpy(), want.numpy(), rtol=1e-6)


def test_softmax_without_dim_warns_and_picks_torchs_dim():
    x = disthook.randn(2, 3)
    with pytest.warns(UserWarning, match="Implicit dimension choice for softmax"):
        y = nn.Softmax()(x)
    np.testing.assert_allclose(y.sum(1).numpy(), [1.0, 1.0], rtol=1e-6)


def test_flatten_unflatten():
    x = disthook.randn(2, 3, 4, 5)
    assert nn.Flatten()(x).shape == (2, 60)
    assert nn.Flatten(0, 2)(x).shape == (24, 5)
    assert nn.Unflatten(1, (3, 1))(x).shape == (2, 3, 1, 4, 5)
    assert nn.Unflatten(-1, (5, -1))(x).shape == (2, 3, 4, 5, 1)
    assert nn.Flatten()(x).grad_fn is None
    y = nn.Flatten()(x.requires_grad_())
    assert y.grad_fn.name() == "ViewBackward0"


def test_identity():
    x = disthook.randn(3)
    assert nn.Identity(54, unused="x")(x) is x


# ---- graph shape ----------------------------------------------------------------------------

@pytest.mark.filterwarnings("ignore:Using a non-full backward hook:FutureWarning")
def test_nodes_have_torchs_three_inputs_even_without_bias():
    """A legacy module backward hook sees one grad_input per input of the last node: three
    for convolution and the norms, as in torch, with None for an absent bias or weight."""
    x = disthook.randn(2, 3, 4, 5, requires_grad=True)
    w = disthook.randn(2, 3, 3, 3, requires_grad=True)
    for y in (F.conv2d(x, w), F.batch_norm(x, None, None, training=True),
              F.layer_norm(x, (5,))):
        edges = y.grad_fn.next_functions
        assert len(edges) == 3 and edges[2] == (None, 0)
    got = []
    conv = nn.Conv2d(3, 2, 3, bias=False)
    conv.register_backward_hook(lambda m, gi, go: got.append([g is None for g in gi]))
    conv(x).sum().backward()
    assert got == [[False, False, True]]


# ---- module behaviour -----------------------------------------------------------------------

def test_conv_default_init_bounds():
    conv = nn.Conv2d(4, 8, 3)
    fan_in = 4 * 9
    bound = 1 / math.sqrt(fan_in)  # kaiming_uniform(a=sqrt(5)) gives the same bound
    assert np.abs(conv.weight.detach().numpy()).max() <= bound
    assert np.abs(conv.bias.detach().numpy()).max() <= bound
    assert conv.weight.shape == (8, 4, 3, 3) and conv.bias.shape == (8,)
    grouped = nn.Conv1d(4, 6, 5, groups=2, bias=False)
    assert grouped.weight.shape == (6, 2, 5) and grouped.bias is None
    assert np.abs(grouped.weight.detach().numpy()).max() <= 1 / math.sqrt(10)


def test_init_draws_from_disthooks_generator():
    disthook.manual_seed(7)
    a = nn.Conv2d(2, 3, 3).weight.tolist()
    disthook.manual_seed(7)
    assert nn.Conv2d(2, 3, 3).weight.tolist() == a


def test_norm_and_embedding_init():
    bn = nn.BatchNorm2d(3)
    assert bn.weight.tolist() == [1.0] * 3 and bn.bias.tolist() == [0.0] * 3
    assert bn.running_mean.tolist() == [0.0] * 3 and bn.running_var.tolist() == [1.0] * 3
    assert bn.num_batches_tracked.item() == 0 and bn.num_batches_tracked.dtype == disthook.int64
    ln = nn.LayerNorm((2, 3))
    assert ln.weight.shape == (2, 3) and ln.bias.tolist() == [[0.0] * 3] * 2
    disthook.manual_seed(0)
    w = nn.Embedding(400, 50).weight.detach().numpy()
    assert abs(w.mean()) < 0.02 and abs(w.std() - 1) < 0.02


def test_batch_norm_running_statistics():
    bn = nn.BatchNorm1d(3, momentum=0.2)
    rng = np.random.default_rng(0)
    mean, var = np.zeros(3), np.ones(3)
    for step in range(3):
        a = rng.standard_normal((8, 3)) * (step + 1) + step
        out = bn(disthook.tensor(a, dtype=disthook.float32))
        mean = 0.8 * mean + 0.2 * a.mean(0)
        var = 0.8 * var + 0.2 * a.var(0, ddof=1)
        want = (a - a.mean(0)) / np.sqrt(a.var(0) + 1e-5)
        np.testing.assert_allclose(out.detach().numpy(), want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(bn.running_mean.numpy(), mean, rtol=1e-5)
    np.testing.assert_allclose(bn.running_var.numpy(), var, rtol=1e-5)
    assert bn.num_batches_tracked.item() == 3
    bn.eval()
    a = rng.standard_normal((2, 3))
    out = bn(disthook.tensor(a, dtype=disthook.float32))
    np.testing.assert_allclose(out.detach().numpy(), (a - mean) / np.sqrt(var + 1e-5),
                               rtol=1e-4, atol=1e-5)
    assert bn.num_batches_tracked.item() == 3


def test_batch_norm_momentum_none_is_a_cumulative_average():
    bn = nn.BatchNorm2d(2, momentum=None)
    batches = [np.random.default_rng(i).standard_normal((3, 2, 2, 2)) + i for i in range(4)]
    for a in batches:
        bn(disthook.tensor(a, dtype=disthook.float32))
    means = [a.mean((0, 2, 3)) for a in batches]
    np.testing.assert_allclose(bn.running_mean.numpy(), np.mean(means, 0), rtol=1e-5)


def test_batch_norm_without_running_statistics():
    bn = nn.BatchNorm1d(3, track_running_stats=False, affine=False)
    assert bn.running_mean is None and list(bn.state_dict()) == []
    a = np.random.default_rng(0).standard_normal((5, 3))
    for mode in (bn.train, bn.eval):  # batch statistics in both modes
        mode()
        out = bn(disthook.tensor(a))
        np.testing.assert_allclose(out.numpy(), (a - a.mean(0)) / np.sqrt(a.var(0) + 1e-5))


def test_batch_norm_buffers_in_state_dict():
    assert list(nn.BatchNorm2d(3).state_dict()) == [
        "weight", "bias", "running_mean", "running_var", "num_batches_tracked"]
    assert list(nn.BatchNorm2d(3, bias=False).state_dict()) == [
        "weight", "running_mean", "running_var", "num_batches_tracked"]


# ---- containers -----------------------------------------------------------------------------

def test_sequential_indexing_and_editing():
    a, b, c = nn.ReLU(), nn.Tanh(), nn.Sigmoid()
    seq = nn.Sequential(a, b, c)
    assert len(seq) == 3 and list(seq) == [a, b, c] and seq[-1] is c
    sliced = seq[1:]
    assert isinstance(sliced, nn.Sequential) and list(sliced._modules) == ["1", "2"]
    assert list(seq[::2]) == [a, c]
    del seq[0]
    assert list(seq._modules) == ["0", "1"] and list(seq) == [b, c]
    seq.insert(0, a)
    seq.append(nn.Identity())
    seq.extend([nn.ReLU()])
    assert len(seq) == 5 and seq[0] is a
    assert seq.pop(1) is b and len(seq) == 4
    doubled = nn.Sequential(a) * 2
    assert list(doubled) == [a, a]
    seq += nn.Sequential(b)
    assert seq[-1] is b
    with pytest.raises(IndexError, match="index 9 is out of range"):
        seq[9]


def test_sequential_from_ordered_dict_keeps_names():
    seq = nn.Sequential(OrderedDict([("conv", nn.Conv2d(1, 2, 3)), ("act", nn.ReLU())]))
    assert seq.conv is seq[0] and list(dict(seq.named_parameters())) == ["conv.weight",
                                                                         "conv.bias"]


def test_module_dict():
    d = nn.ModuleDict({"a": nn.ReLU(), "b": nn.Linear(2, 3)})
    assert list(d) == ["a", "b"] and "a" in d and len(d) == 2
    d["c"] = nn.Tanh()
    d.update([("e", nn.Sigmoid())])
    assert list(d.keys()) == ["a", "b", "c", "e"]
    assert isinstance(d.pop("a"), nn.ReLU) and "a" not in d
    assert [name for name, _ in d.named_parameters()] == ["b.weight", "b.bias"]
    del d["b"]
    d.clear()
    assert len(d) == 0
    with pytest.raises(TypeError, match="ModuleDict.update should be called with an iterable"):
        d.update(3)
    with pytest.raises(ValueError, match="element #0 has length 1; 2 is required"):
        d.update([("x",)])


def test_module_list_with_layers():
    layers = nn.ModuleList([nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2)])
    layers.append(nn.ReLU())
    assert len(list(layers.parameters())) == 4 and len(list(layers.buffers())) == 3


# ---- reprs ----------------------------------------------------------------------------------

REPRS = [
    (lambda nn: nn.Conv2d(1, 32, 3), "Conv2d(1, 32, kernel_size=(3, 3), stride=(1, 1))"),
    (lambda nn: nn.Conv2d(1, 32, (3, 5), stride=2, padding=1, dilation=2, bias=False),
     ("Conv2d(1, 32, kernel_size=(3, 5), stride=(2, 2), padding=(1, 1), dilation=(2, 2), "
      "bias=False)")),
    (lambda nn: nn.Conv2d(4, 4, 3, groups=2, padding_mode="reflect", padding=1),
     ("Conv2d(4, 4, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), groups=2, "
      "padding_mode=reflect)")),
    (lambda nn: nn.Conv2d(4, 4, 3, padding="same"),
     "Conv2d(4, 4, kernel_size=(3, 3), stride=(1, 1), padding=same)"),
    (lambda nn: nn.Conv2d(4, 4, 3, padding="valid"),
     "Conv2d(4, 4, kernel_size=(3, 3), stride=(1, 1), padding=valid)"),
    (lambda nn: nn.Conv1d(2, 3, 4), "Conv1d(2, 3, kernel_size=(4,), stride=(1,))"),
    (lambda nn: nn.Conv1d(2, 4, 4, stride=2, padding=1, dilation=3, groups=2, bias=False),
     ("Conv1d(2, 4, kernel_size=(4,), stride=(2,), padding=(1,), dilation=(3,), groups=2, "
      "bias=False)")),
    (lambda nn: nn.MaxPool2d(2),
     "MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)"),
    (lambda nn: nn.MaxPool2d((2, 3), stride=1, padding=1, dilation=2, ceil_mode=True,
                             return_indices=True),
     "MaxPool2d(kernel_size=(2, 3), stride=1, padding=1, dilation=2, ceil_mode=True)"),
    (lambda nn: nn.MaxPool1d(3),
     "MaxPool1d(kernel_size=3, stride=3, padding=0, dilation=1, ceil_mode=False)"),
    (lambda nn: nn.AvgPool2d(2), "AvgPool2d(kernel_size=2, stride=2, padding=0)"),
    (lambda nn: nn.AvgPool2d(3, stride=2, padding=1, ceil_mode=True, count_include_pad=False,
                             divisor_override=2),
     "AvgPool2d(kernel_size=3, stride=2, padding=1)"),
    (lambda nn: nn.AvgPool1d(3), "AvgPool1d(kernel_size=(3,), stride=(3,), padding=(0,))"),
    (lambda nn: nn.AdaptiveAvgPool2d(1), "AdaptiveAvgPool2d(output_size=1)"),
    (lambda nn: nn.AdaptiveAvgPool2d((2, None)), "AdaptiveAvgPool2d(output_size=(2, None))"),
    (lambda nn: nn.AdaptiveAvgPool1d(4), "AdaptiveAvgPool1d(output_size=4)"),
    (lambda nn: nn.BatchNorm2d(3), ("BatchNorm2d(3, eps=1e-05, momentum=0.1, affine=True, "
                                    "bias=True, track_running_stats=True)")),
    (lambda nn: nn.BatchNorm1d(3, eps=1e-3, momentum=None, affine=False,
                               track_running_stats=False),
     ("BatchNorm1d(3, eps=0.001, momentum=None, affine=False, bias=False, "
      "track_running_stats=False)")),
    (lambda nn: nn.LayerNorm(8),
     "LayerNorm((8,), eps=1e-05, elementwise_affine=True, bias=True)"),
    (lambda nn: nn.LayerNorm((3, 8), eps=1e-6, elementwise_affine=False),
     "LayerNorm((3, 8), eps=1e-06, elementwise_affine=False, bias=False)"),
    (lambda nn: nn.LayerNorm(8, bias=False),
     "LayerNorm((8,), eps=1e-05, elementwise_affine=True, bias=False)"),
    (lambda nn: nn.Embedding(10, 4), "Embedding(10, 4)"),
    (lambda nn: nn.Embedding(10, 4, padding_idx=0, max_norm=1.0, norm_type=3.0,
                             scale_grad_by_freq=True),
     "Embedding(10, 4, padding_idx=0, max_norm=1.0, norm_type=3.0, scale_grad_by_freq=True)"),
    (lambda nn: nn.Embedding(10, 4, padding_idx=-1), "Embedding(10, 4, padding_idx=9)"),
    (lambda nn: nn.Dropout(), "Dropout(p=0.5, inplace=False)"),
    (lambda nn: nn.Dropout(0.2, inplace=True), "Dropout(p=0.2, inplace=True)"),
    (lambda nn: nn.ReLU(inplace=True), "ReLU(inplace=True)"),
    (lambda nn: nn.LeakyReLU(), "LeakyReLU(negative_slope=0.01)"),
    (lambda nn: nn.LeakyReLU(0.2, True), "LeakyReLU(negative_slope=0.2, inplace=True)"),
    (lambda nn: nn.GELU(), "GELU(approximate='none')"),
    (lambda nn: nn.GELU("tanh"), "GELU(approximate='tanh')"),
    (lambda nn: nn.SiLU(), "SiLU()"),
    (lambda nn: nn.SiLU(inplace=True), "SiLU(inplace=True)"),
    (lambda nn: nn.Softmax(dim=1), "Softmax(dim=1)"),
    (lambda nn: nn.Softmax(), "Softmax(dim=None)"),
    (lambda nn: nn.LogSoftmax(dim=-1), "LogSoftmax(dim=-1)"),
    (lambda nn: nn.Flatten(), "Flatten(start_dim=1, end_dim=-1)"),
    (lambda nn: nn.Flatten(0, 2), "Flatten(start_dim=0, end_dim=2)"),
    (lambda nn: nn.Unflatten(1, (2, 3)), "Unflatten(dim=1, unflattened_size=(2, 3))"),
    (lambda nn: nn.Identity(), "Identity()"),
    (lambda nn: nn.ModuleDict({"a": nn.ReLU(), "b": nn.Linear(2, 3)}),
     "ModuleDict(\n  (a): ReLU()\n  (b): Linear(in_features=2, out_features=3, bias=True)\n)"),
    (lambda nn: nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten()),
     ("Sequential(\n  (0): Conv2d(1, 2, kernel_size=(3, 3), stride=(1, 1))\n  (1): ReLU()\n"
      "  (2): MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)\n"
      "  (3): Flatten(start_dim=1, end_dim=-1)\n)")),
]


@pytest.mark.parametrize("make, text", REPRS, ids=[t.split("(")[0] + str(i)
                                                   for i, (_, t) in enumerate(REPRS)])
def test_repr(make, text):
    assert repr(make(nn)) == text


# ---- errors ---------------------------------------------------------------------------------

def _x(t, *shape):
    return t.zeros(*shape)


# (id, fn of the torch-like module, exception type, torch's message)
ERRORS = [
    ("conv_channels", lambda t: t.nn.Conv2d(1, 32, 3)(_x(t, 64, 3, 28, 28)), RuntimeError,
     ("Given groups=1, weight of size [32, 1, 3, 3], expected input[64, 3, 28, 28] to have 1 "
      "channels, but got 3 channels instead")),
    ("conv_unbatched_channels", lambda t: t.nn.Conv2d(1, 32, 3)(_x(t, 64, 28, 28)),
     RuntimeError, ("Given groups=1, weight of size [32, 1, 3, 3], expected input[1, 64, 28, 28] "
                    "to have 1 channels, but got 64 channels instead")),
    ("conv_rank", lambda t: t.nn.Conv2d(1, 32, 3)(_x(t, 28, 28)), RuntimeError,
     "Expected 3D (unbatched) or 4D (batched) input to conv2d, but got input of size: [28, 28]"),
    ("conv1d_rank", lambda t: t.nn.functional.conv1d(_x(t, 1, 2, 5, 5), _x(t, 3, 2, 3)),
     RuntimeError, ("Expected 2D (unbatched) or 3D (batched) input to conv1d, but got input of "
                    "size: [1, 2, 5, 5]")),
    ("conv_kernel_too_large", lambda t: t.nn.Conv2d(1, 32, 3)(_x(t, 2, 1, 2, 2)), RuntimeError,
     ("Calculated padded input size per channel: (2 x 2). Kernel size: (3 x 3). Kernel size "
      "can't be greater than actual input size")),
    ("conv1d_kernel_too_large", lambda t: t.nn.functional.conv1d(_x(t, 1, 4, 2), _x(t, 4, 4, 3)),
     RuntimeError, ("Calculated padded input size per channel: (2). Kernel size: (3). Kernel "
                    "size can't be greater than actual input size")),
    ("conv_dilated_kernel_too_large",
     lambda t: t.nn.functional.conv2d(_x(t, 1, 1, 4, 4), _x(t, 1, 1, 3, 3), dilation=2),
     RuntimeError, ("Calculated padded input size per channel: (4 x 4). Kernel size: (5 x 5). "
                    "Kernel size can't be greater than actual input size")),
    ("conv_groups_in", lambda t: t.nn.Conv2d(3, 4, 3, groups=2), ValueError,
     "in_channels must be divisible by groups"),
    ("conv_groups_out", lambda t: t.nn.Conv2d(4, 3, 3, groups=2), ValueError,
     "out_channels must be divisible by groups"),
    ("conv_groups_zero", lambda t: t.nn.Conv2d(4, 4, 3, groups=0), ValueError,
     "groups must be a positive integer"),
    ("conv_same_strided", lambda t: t.nn.Conv2d(4, 4, 3, padding="same", stride=2), ValueError,
     "padding='same' is not supported for strided convolutions"),
    ("conv_padding_mode", lambda t: t.nn.Conv2d(4, 4, 3, padding_mode="foo"), ValueError,
     "but got padding_mode='foo'"),
    ("f_conv_same_strided", lambda t: t.nn.functional.conv2d(
        _x(t, 1, 4, 5, 5), _x(t, 4, 4, 3, 3), padding="same", stride=2), RuntimeError,
     "padding='same' is not supported for strided convolutions"),
    ("f_conv_padding_string", lambda t: t.nn.functional.conv2d(
        _x(t, 1, 4, 5, 5), _x(t, 4, 4, 3, 3), padding="foo"), RuntimeError,
     "Invalid padding string: 'foo'"),
    ("f_conv_weight_groups", lambda t: t.nn.functional.conv2d(
        _x(t, 1, 4, 5, 5), _x(t, 4, 2, 3, 3), groups=3), RuntimeError,
     ("Given groups=3, expected weight to be divisible by 3 at dimension 0, but got weight of "
      "size [[4, 2, 3, 3]] instead")),
    ("f_conv_dtype", lambda t: t.nn.functional.conv2d(
        _x(t, 1, 4, 5, 5), _x(t, 4, 4, 3, 3).double()), RuntimeError,
     "expected scalar type Float but found Double"),
    ("f_conv_bias_dtype", lambda t: t.nn.Conv2d(1, 2, 3)(_x(t, 1, 1, 4, 4).double()),
     RuntimeError, "Input type (double) and bias type (float) should be the same"),
    ("f_conv_bias_size", lambda t: t.nn.functional.conv2d(
        _x(t, 1, 4, 5, 5), _x(t, 4, 4, 3, 3), _x(t, 3)), RuntimeError,
     ("Given weight of size [4, 4, 3, 3], expected bias to be 1-dimensional with 4 elements, "
      "but got bias of size [3] instead")),
    ("f_conv_stride_len", lambda t: t.nn.functional.conv2d(
        _x(t, 1, 4, 5, 5), _x(t, 4, 4, 3, 3), stride=(1, 1, 1)), RuntimeError,
     ("expected stride to be a single integer value or a list of 2 values to match the "
      "convolution dimensions, but got stride=[1, 1, 1]")),
    ("f_conv_stride", lambda t: t.nn.functional.conv2d(
        _x(t, 1, 4, 5, 5), _x(t, 4, 4, 3, 3), stride=0), RuntimeError,
     "non-positive stride is not supported"),
    ("f_conv_padding", lambda t: t.nn.functional.conv2d(
        _x(t, 1, 4, 5, 5), _x(t, 4, 4, 3, 3), padding=-1), RuntimeError,
     "negative padding is not supported"),
    ("f_conv_dilation", lambda t: t.nn.functional.conv2d(
        _x(t, 1, 4, 5, 5), _x(t, 4, 4, 3, 3), dilation=0), RuntimeError,
     "dilation should be greater than zero, but got [0, 0]"),
    ("f_conv_groups", lambda t: t.nn.functional.conv2d(
        _x(t, 1, 4, 5, 5), _x(t, 4, 4, 3, 3), groups=0), RuntimeError,
     "non-positive groups is not supported"),
    ("max_pool_too_small", lambda t: t.nn.functional.max_pool2d(_x(t, 2, 3, 5, 5), 6),
     RuntimeError, ("Given input size: (3x5x5). Calculated output size: (3x0x0). Output size "
                    "is too small")),
    ("max_pool_pad", lambda t: t.nn.functional.max_pool2d(_x(t, 2, 3, 5, 5), 3, padding=2),
     RuntimeError, ("pad should be at most half of effective kernel size, but got pad=2, "
                    "kernel_size=3 and dilation=1")),
    ("max_pool_rank", lambda t: t.nn.functional.max_pool2d(_x(t, 5, 5), 2), RuntimeError,
     "non-empty 3D or 4D (batch mode) tensor expected for input"),
    ("max_pool_stride", lambda t: t.nn.MaxPool2d(2, stride=0)(_x(t, 1, 1, 4, 4)),
     RuntimeError, "stride should not be zero"),
    ("max_pool_dilation", lambda t: t.nn.functional.max_pool2d(_x(t, 1, 1, 4, 4), 2,
                                                              dilation=0),
     RuntimeError, "dilation should be greater than zero, but got dilationH: 0 dilationW: 0"),
    ("max_pool_negative_pad", lambda t: t.nn.functional.max_pool2d(_x(t, 1, 1, 4, 4), 2,
                                                                  padding=-1),
     RuntimeError, "pad must be non-negative, but got pad: -1"),
    ("max_pool_kernel_arg", lambda t: t.nn.functional.max_pool2d(_x(t, 1, 1, 4, 4), (2, 2, 2)),
     RuntimeError, "max_pool2d: kernel_size must either be a single int, or a tuple of two ints"),
    ("max_pool1d_rank", lambda t: t.nn.functional.max_pool1d(_x(t, 2, 3, 5, 5), 2),
     RuntimeError, ("max_pool1d: Expected 2D or 3D (batch mode) tensor with optional 0 dim "
                    "batch size for input, but got:[2, 3, 5, 5]")),
    ("max_pool1d_too_small", lambda t: t.nn.functional.max_pool1d(_x(t, 3, 5), 6),
     RuntimeError, "max_pool1d() Invalid computed output size: 0"),
    ("avg_pool_too_small", lambda t: t.nn.AvgPool2d(6)(_x(t, 2, 3, 5, 5)), RuntimeError,
     "Given input size: (3x5x5). Calculated output size: (3x0x0). Output size is too small"),
    ("avg_pool_divisor", lambda t: t.nn.functional.avg_pool2d(_x(t, 1, 1, 4, 4), 2,
                                                             divisor_override=0),
     RuntimeError, "divisor must be not zero"),
    ("avg_pool1d_too_small", lambda t: t.nn.functional.avg_pool1d(_x(t, 5, 5), 6), RuntimeError,
     "Given input size: (5x1x5). Calculated output size: (5x1x0). Output size is too small"),
    ("avg_pool1d_rank", lambda t: t.nn.functional.avg_pool1d(_x(t, 2, 3, 5, 5), 2),
     RuntimeError, ("Expected 2 to 3 dimensions, but got 4-dimensional tensor for argument #1 "
                    "'self' (while checking arguments for avg_pool1d)")),
    ("adaptive_rank", lambda t: t.nn.functional.adaptive_avg_pool2d(_x(t, 5, 5), 2),
     RuntimeError, "adaptive_avg_pool2d(): Expected 3D or 4D tensor, but got [5, 5]"),
    ("adaptive_size", lambda t: t.nn.functional.adaptive_avg_pool2d(_x(t, 1, 1, 5, 5),
                                                                     (2, 3, 4)),
     RuntimeError, "adaptive_avg_pool2d: output_size must be 2"),
    ("adaptive_size_rank", lambda t: t.nn.functional.adaptive_avg_pool2d(_x(t, 1, 5, 5),
                                                                          (2, 3, 4)),
     ValueError, "Input dimension should be at least 4"),
    ("bn_one_value", lambda t: t.nn.BatchNorm1d(3)(_x(t, 1, 3)), ValueError,
     "Expected more than 1 value per channel when training, got input size torch.Size([1, 3])"),
    ("bn_channels", lambda t: t.nn.BatchNorm1d(3)(_x(t, 2, 4)), RuntimeError,
     "running_mean should contain 4 elements not 3"),
    ("bn1d_rank", lambda t: t.nn.BatchNorm1d(3)(_x(t, 2, 3, 4, 5)), ValueError,
     "expected 2D or 3D input (got 4D input)"),
    ("bn2d_rank", lambda t: t.nn.BatchNorm2d(3)(_x(t, 2, 3, 4)), ValueError,
     "expected 4D input (got 3D input)"),
    ("bn_eval_needs_running", lambda t: t.nn.functional.batch_norm(_x(t, 2, 3), None, None),
     RuntimeError, "running_mean must be defined in evaluation mode"),
    ("ln_shape", lambda t: t.nn.LayerNorm(4)(_x(t, 2, 3)), RuntimeError,
     ("Given normalized_shape=[4], expected input with shape [*, 4], but got input of "
      "size[2, 3]")),
    ("ln_weight", lambda t: t.nn.functional.layer_norm(_x(t, 2, 3), (3,), _x(t, 4)),
     RuntimeError, ("Expected weight to be of same shape as normalized_shape, but got weight of "
                    "shape [4] and normalized_shape = [3]")),
    ("emb_range", lambda t: t.nn.Embedding(10, 4)(t.tensor([10])), IndexError,
     "index out of range in self"),
    ("emb_negative", lambda t: t.nn.Embedding(10, 4)(t.tensor([-1])), IndexError,
     "index out of range in self"),
    ("emb_dtype", lambda t: t.nn.Embedding(10, 4)(t.tensor([1.0])), RuntimeError,
     ("Expected tensor for argument #1 'indices' to have one of the following scalar types: "
      "Long, Int; but got torch.FloatTensor instead (while checking arguments for embedding)")),
    ("emb_padding_idx", lambda t: t.nn.Embedding(10, 4, padding_idx=10), AssertionError,
     "Padding_idx must be within num_embeddings"),
    ("emb_weight_rank", lambda t: t.nn.functional.embedding(t.tensor([1]), _x(t, 10)),
     RuntimeError, "'weight' must be 2-D"),
    ("emb_pretrained_rank", lambda t: t.nn.Embedding.from_pretrained(_x(t, 3)), AssertionError,
     "Embeddings parameter is expected to be 2-dimensional"),
    ("dropout_p", lambda t: t.nn.Dropout(1.5), ValueError,
     "dropout probability has to be between 0 and 1, but got 1.5"),
    ("f_dropout_p", lambda t: t.nn.functional.dropout(_x(t, 3), -0.1), ValueError,
     "dropout probability has to be between 0 and 1, but got -0.1"),
    ("dropout_leaf_inplace", lambda t: t.nn.functional.dropout(
        t.ones(3, requires_grad=True), 0.5, inplace=True), RuntimeError,
     "a leaf Variable that requires grad is being used in an in-place operation."),
    ("gelu_approximate", lambda t: t.nn.functional.gelu(_x(t, 2), approximate="foo"),
     RuntimeError, "approximate argument must be either none or tanh."),
    ("flatten_dims", lambda t: t.nn.Flatten(2, 1)(_x(t, 3, 3, 3)), RuntimeError,
     "flatten() has invalid args: start_dim cannot come after end_dim"),
    ("unflatten_size_type", lambda t: t.nn.Unflatten(1, 2), TypeError,
     "unflattened_size must be a tuple of ints, but found type int"),
    ("pad_reflect_size", lambda t: t.nn.functional.pad(_x(t, 1, 1, 3, 3), (1, 1, 3, 3),
                                                      mode="reflect"), RuntimeError,
     ("Padding size should be less than the corresponding input dimension, but got: padding "
      "(3, 3) at dimension 2 of input [1, 1, 3, 3]")),
    ("pad_mode", lambda t: t.nn.functional.pad(_x(t, 1, 1, 3, 3), (1, 1), mode="foo"),
     NotImplementedError, "Unrecognised padding mode foo"),
    ("pad_length", lambda t: t.nn.functional.pad(_x(t, 1, 1, 3, 3), (1,)), RuntimeError,
     "Padding length must be divisible by 2"),
]


@pytest.mark.parametrize("make, exc, message", [c[1:] for c in ERRORS], ids=[c[0] for c in ERRORS])
def test_bad_input_raises(make, exc, message):
    with pytest.raises(exc, match=re.escape(message)) as info:
        make(disthook)
    assert type(info.value) is exc
