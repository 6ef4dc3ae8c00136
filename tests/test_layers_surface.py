"""The functional forms of issue 20's layers through check_op: elu, softplus, mish,
hardswish, cosine_similarity, pixel_(un)shuffle, group_norm, instance_norm,
conv_transpose1d/2d, max_pool3d, avg_pool3d; and the layers' reprs."""
import numpy as np
import pytest
from helpers import check_op

import disthook

try:
    import torch
except ImportError:
    torch = None


def F(x):
    return disthook.nn.functional if isinstance(x, disthook.Tensor) else torch.nn.functional


@pytest.mark.parametrize("name, kwargs, np_fn", [
    ("elu", {}, lambda x: np.where(x > 0, x, np.expm1(x))),
    ("elu", {"alpha": 0.5}, lambda x: np.where(x > 0, x, 0.5 * np.expm1(x))),
    ("softplus", {}, lambda x: np.log1p(np.exp(x))),
    ("softplus", {"beta": 2.0, "threshold": 1.0},
     lambda x: np.where(2 * x > 1, x, np.log1p(np.exp(2 * x)) / 2)),
    ("mish", {}, lambda x: x * np.tanh(np.log1p(np.exp(x)))),
    ("hardswish", {}, lambda x: x * np.clip(x + 3, 0, 6) / 6),
])
def test_activations(name, kwargs, np_fn):
    check_op(lambda x: getattr(F(x), name)(x, **kwargs), (3, 5), np_fn=np_fn, double=True,
             low=-5, high=5)
    check_op(lambda x: getattr(F(x), name)(x, **kwargs), (), np_fn=np_fn, double=True)


def test_activations_in_place():
    check_op(lambda x: F(x).elu(x * 1, alpha=2.0, inplace=True), (3, 4), double=True)
    check_op(lambda x: F(x).hardswish(x * 1, inplace=True), (3, 4), low=-5, high=5)
    check_op(lambda x: F(x).mish(x * 1, inplace=True), (3, 4))


@pytest.mark.parametrize("a, b, dim", [((3, 5), (3, 5), 1), ((2, 3, 4), (3, 4), -1),
                                       ((4, 1), (4, 6), 0)])
def test_cosine_similarity(a, b, dim):
    def np_fn(x, y):
        x, y = np.broadcast_arrays(x, y)
        return (x * y).sum(dim) / (np.linalg.norm(x, axis=dim) * np.linalg.norm(y, axis=dim))

    check_op(lambda x, y: F(x).cosine_similarity(x, y, dim=dim), a, b, np_fn=np_fn,
             double=True)


def test_pixel_shuffle_unshuffle():
    check_op(lambda x: F(x).pixel_shuffle(x, 2), (2, 8, 3, 4), double=True)
    check_op(lambda x: F(x).pixel_shuffle(x, 3), (9, 2, 2))
    check_op(lambda x: F(x).pixel_unshuffle(x, 2), (2, 2, 4, 6), double=True)


@pytest.mark.parametrize("shape, groups", [((2, 6, 5), 3), ((2, 4, 3, 3), 2), ((3, 4), 4),
                                           ((2, 6, 2, 3), 1)])
def test_group_norm(shape, groups):
    c = shape[1]
    check_op(lambda x: F(x).group_norm(x, groups), shape, double=True)
    check_op(lambda x, w, b: F(x).group_norm(x, groups, w, b, eps=1e-3), shape, (c,), (c,),
             double=True)


def test_instance_norm():
    check_op(lambda x: F(x).instance_norm(x), (2, 3, 5), double=True, name=False)
    check_op(lambda x, w, b: F(x).instance_norm(x, weight=w, bias=b), (2, 3, 4, 3), (3,), (3,),
             double=True, name=False)


@pytest.mark.parametrize("x, w, kwargs", [
    ((2, 4, 5), (4, 3, 3), {}),
    ((2, 4, 5), (4, 2, 3), {"stride": 2, "padding": 1, "output_padding": 1, "groups": 2}),
    ((4, 6), (4, 3, 2), {"dilation": 2}),
])
def test_conv_transpose1d(x, w, kwargs):
    check_op(lambda a, b: F(a).conv_transpose1d(a, b, **kwargs), x, w, double=True)
    check_op(lambda a, b, c: F(a).conv_transpose1d(a, b, c, **kwargs), x, w,
             (w[1] * kwargs.get("groups", 1),))


@pytest.mark.parametrize("x, w, kwargs", [
    ((2, 3, 4, 5), (3, 2, 3, 3), {}),
    ((1, 4, 3, 4), (4, 3, 3, 2), {"stride": (2, 1), "padding": (1, 0), "output_padding": (1, 0),
                                  "groups": 2}),
    ((2, 3, 3), (2, 2, 2, 2), {"stride": 3, "padding": 1, "dilation": (2, 1)}),
])
def test_conv_transpose2d(x, w, kwargs):
    check_op(lambda a, b: F(a).conv_transpose2d(a, b, **kwargs), x, w, double=True)
    check_op(lambda a, b, c: F(a).conv_transpose2d(a, b, c, **kwargs), x, w,
             (w[1] * kwargs.get("groups", 1),))


@pytest.mark.parametrize("args, kwargs", [((2,), {}), ((3, 2, 1), {}),
                                          ((2,), {"ceil_mode": True}),
                                          (((1, 2, 2), 1), {"dilation": (1, 1, 2)})])
def test_max_pool3d(args, kwargs):
    check_op(lambda x: F(x).max_pool3d(x, *args, **kwargs), (1, 2, 5, 4, 5))
    check_op(lambda x: F(x).max_pool3d(x, *args, **kwargs), (2, 4, 5, 4))


def test_max_pool3d_return_indices():
    check_op(lambda x: tuple(F(x).max_pool3d(x, 2, return_indices=True)), (1, 1, 4, 4, 4))


@pytest.mark.parametrize("args, kwargs", [((2,), {}), ((3, 2, 1), {}),
                                          ((3, 2, 1), {"count_include_pad": False}),
                                          ((2,), {"ceil_mode": True}),
                                          ((2,), {"divisor_override": 3})])
def test_avg_pool3d(args, kwargs):
    check_op(lambda x: F(x).avg_pool3d(x, *args, **kwargs), (1, 2, 5, 4, 5), double=True)


REPRS = [
    (lambda nn: nn.ELU(), "ELU(alpha=1.0)"),
    (lambda nn: nn.ELU(alpha=0.5, inplace=True), "ELU(alpha=0.5, inplace=True)"),
    (lambda nn: nn.Softplus(), "Softplus(beta=1.0, threshold=20.0)"),
    (lambda nn: nn.Mish(), "Mish()"),
    (lambda nn: nn.Hardswish(), "Hardswish()"),
    (lambda nn: nn.GroupNorm(2, 4), "GroupNorm(2, 4, eps=1e-05, affine=True, bias=True)"),
    (lambda nn: nn.InstanceNorm1d(3), "InstanceNorm1d(3, eps=1e-05, momentum=0.1, "
     "affine=False, bias=False, track_running_stats=False)"),
    (lambda nn: nn.InstanceNorm2d(3, affine=True, track_running_stats=True),
     "InstanceNorm2d(3, eps=1e-05, momentum=0.1, affine=True, bias=True, "
     "track_running_stats=True)"),
    (lambda nn: nn.ConvTranspose2d(2, 3, 3, stride=2, output_padding=1),
     "ConvTranspose2d(2, 3, kernel_size=(3, 3), stride=(2, 2), output_padding=(1, 1))"),
    (lambda nn: nn.ConvTranspose1d(2, 4, 3, groups=2, bias=False, dilation=2),
     "ConvTranspose1d(2, 4, kernel_size=(3,), stride=(1,), dilation=(2,), groups=2, "
     "bias=False)"),
    (lambda nn: nn.MaxPool3d(3, 2, 1, ceil_mode=True),
     "MaxPool3d(kernel_size=3, stride=2, padding=1, dilation=1, ceil_mode=True)"),
    (lambda nn: nn.AvgPool3d(3, ceil_mode=True, count_include_pad=False),
     "AvgPool3d(kernel_size=3, stride=3, padding=0)"),
    (lambda nn: nn.CosineSimilarity(), "CosineSimilarity()"),
    (lambda nn: nn.PixelShuffle(2), "PixelShuffle(upscale_factor=2)"),
    (lambda nn: nn.PixelUnshuffle(3), "PixelUnshuffle(downscale_factor=3)"),
    (lambda nn: nn.LazyLinear(3), "LazyLinear(in_features=0, out_features=3, bias=True)"),
]


@pytest.mark.parametrize("make, want", REPRS, ids=[w.split("(")[0] for _, w in REPRS])
def test_reprs(make, want):
    assert repr(make(disthook.nn)) == want
    if torch is not None:
        assert repr(make(torch.nn)) == want


def test_lazy_linear_becomes_linear():
    m = disthook.nn.LazyLinear(3)
    weight = m.weight
    y = m(disthook.randn(2, 5))
    assert type(m) is disthook.nn.Linear and m.weight is weight
    assert m.weight.shape == (3, 5) and m.bias.shape == (3,) and y.shape == (2, 3)
    assert repr(m) == "Linear(in_features=5, out_features=3, bias=True)"


def test_attention_layers_drop_out_only_in_training():
    m = disthook.nn.MultiheadAttention(8, 2, dropout=0.5)
    x = disthook.randn(5, 2, 8)
    disthook.manual_seed(3)
    a, wa = m(x, x, x)
    disthook.manual_seed(3)
    b, wb = m(x, x, x)
    assert a.equal(b) and wa.equal(wb)
    m.eval()
    c, wc = m(x, x, x)
    assert not a.equal(c)
    np.testing.assert_allclose(wc.sum(-1).detach().numpy(), 1.0, rtol=1e-5)
    rnn = disthook.nn.GRU(4, 6, 2, dropout=0.5)
    y = disthook.randn(5, 2, 4)
    assert not rnn(y)[0].equal(rnn(y)[0])
    rnn.eval()
    assert rnn(y)[0].equal(rnn(y)[0])
