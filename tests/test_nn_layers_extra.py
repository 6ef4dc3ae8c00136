"""The layers added for the whole ``torch.nn`` surface: padding, 3-d convolution and
normalisation, lazy layers, adaptive max / LP / fractional pooling. Values and gradients
against torch (float64) and finite differences."""
from __future__ import annotations

import numpy as np
import pytest
from helpers import check_op, lib

import disthook
from disthook import nn
from disthook.nn import functional as F

torch = pytest.importorskip("torch")


def twin(name: str, *args, **kwargs):
    """The same layer built in disthook and torch, float64, with torch's parameters."""
    ours = getattr(nn, name)(*args, **kwargs).double()
    theirs = getattr(torch.nn, name)(*args, **kwargs).double()
    ours.load_state_dict({k: disthook.tensor(v.detach().numpy().copy())
                          for k, v in theirs.state_dict().items()})
    return ours, theirs


def run_both(ours, theirs, x: np.ndarray, train: bool = True):
    """Forward and backward of ``sum(out * w)`` in both; compare output, input gradient and
    every parameter gradient."""
    ours.train(train)
    theirs.train(train)
    xd = disthook.tensor(x, requires_grad=True)
    xt = torch.tensor(x, requires_grad=True)
    yd, yt = ours(xd), theirs(xt)
    np.testing.assert_allclose(yd.detach().numpy(), yt.detach().numpy(), rtol=1e-9, atol=1e-9)
    w = np.random.default_rng(3).standard_normal(tuple(yt.shape))
    (yd * disthook.tensor(w)).sum().backward()
    (yt * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(xd.grad.numpy(), xt.grad.numpy(), rtol=1e-8, atol=1e-9)
    for (name, p), (_, q) in zip(ours.named_parameters(), theirs.named_parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-8, atol=1e-9,
                                   err_msg=name)
    for (name, b), (_, c) in zip(ours.named_buffers(), theirs.named_buffers()):
        np.testing.assert_allclose(b.numpy(), c.numpy(), rtol=1e-9, err_msg=name)
    assert repr(ours) == repr(theirs)
    return yd


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


# ---- padding ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name, args, shape", [
    ("ConstantPad1d", ((1, 2), 1.5), (2, 3, 4)), ("ConstantPad2d", (1, -0.5), (2, 3, 4)),
    ("ConstantPad3d", ((1, 0, 2, 1, 0, 1), 2.0), (1, 2, 3, 3, 2)),
    ("ZeroPad1d", (2,), (3, 4)), ("ZeroPad2d", ((1, 2, 0, 1),), (1, 2, 3, 4)),
    ("ZeroPad3d", (1,), (2, 2, 3, 2)),
    ("ReflectionPad1d", ((2, 1),), (2, 3, 4)), ("ReflectionPad2d", (2,), (1, 2, 3, 4)),
    ("ReflectionPad3d", (1,), (1, 2, 3, 3, 2)),
    ("ReplicationPad1d", (3,), (2, 3, 4)), ("ReplicationPad2d", ((1, 0, 2, 3),), (2, 3, 4)),
    ("ReplicationPad3d", ((1, 2, 0, 1, 2, 0),), (1, 2, 3, 3, 2)),
    ("CircularPad1d", (2,), (2, 3, 4)), ("CircularPad2d", ((1, 2, 2, 1),), (1, 2, 3, 4)),
    ("CircularPad3d", (1,), (1, 2, 3, 3, 2)),
], ids=lambda v: v if isinstance(v, str) else "")
def test_padding_layers(name, args, shape):
    run_both(*twin(name, *args), rand(*shape))


def test_circular_pad_checks_the_rank_as_torch():
    with pytest.raises(ValueError, match=r"expected 3D or 4D input \(got 2D input\)"):
        nn.CircularPad2d(1)(disthook.randn(2, 3))


# ---- 3-d convolution and normalisation --------------------------------------------------------

@pytest.mark.parametrize("kwargs", [
    {}, {"stride": 2, "padding": 1}, {"dilation": (1, 2, 1), "groups": 2, "bias": False},
    {"padding": "same", "padding_mode": "circular"}, {"padding": 1, "padding_mode": "reflect"},
])
def test_conv3d(kwargs):
    run_both(*twin("Conv3d", 4, 6, (2, 3, 2), **kwargs), rand(2, 4, 5, 6, 5))


@pytest.mark.parametrize("kwargs", [
    {}, {"stride": 2, "padding": 1, "output_padding": 1}, {"groups": 2, "dilation": 2},
])
def test_conv_transpose3d(kwargs):
    run_both(*twin("ConvTranspose3d", 4, 6, (2, 3, 2), **kwargs), rand(2, 4, 3, 4, 3))


def test_conv3d_functional_second_order():
    check_op(lambda x, w: lib(x).nn.functional.conv3d(x, w, stride=(1, 2, 1)),
             (1, 2, 3, 4, 3), (2, 2, 2, 2, 2), double=True)
    check_op(lambda x, w: lib(x).nn.functional.conv_transpose3d(x, w, stride=2),
             (1, 2, 2, 3, 2), (2, 3, 2, 2, 2))


def test_conv3d_unbatched_and_its_error():
    m = nn.Conv3d(2, 3, 2)
    assert m(disthook.randn(2, 3, 3, 3)).shape == (3, 2, 2, 2)
    with pytest.raises(RuntimeError, match="Expected 4D \\(unbatched\\) or 5D \\(batched\\) "
                                           "input to conv3d"):
        m(disthook.randn(2, 3, 3))


@pytest.mark.parametrize("train", [True, False])
def test_batch_norm3d(train):
    ours, theirs = twin("BatchNorm3d", 3)
    run_both(ours, theirs, rand(2, 3, 2, 3, 2), train)
    run_both(ours, theirs, rand(2, 3, 2, 3, 2, seed=1), train)
    with pytest.raises(ValueError, match="expected 5D input \\(got 4D input\\)"):
        ours(disthook.randn(2, 3, 2, 2))


@pytest.mark.parametrize("kwargs", [{}, {"affine": True, "track_running_stats": True}])
def test_instance_norm3d(kwargs):
    run_both(*twin("InstanceNorm3d", 3, **kwargs), rand(2, 3, 2, 3, 2))
    run_both(*twin("InstanceNorm3d", 3, **kwargs), rand(3, 2, 3, 2))


@pytest.mark.parametrize("train", [True, False])
def test_sync_batch_norm_is_local_batch_norm_on_one_process(train):
    ours, theirs = twin("SyncBatchNorm", 3)
    run_both(ours, theirs, rand(4, 3, 5), train)
    with pytest.raises(ValueError, match="expected at least 2D input"):
        ours(disthook.randn(3))


def test_convert_sync_batchnorm_keeps_the_parameters():
    model = nn.Sequential(nn.Conv2d(1, 2, 1), nn.BatchNorm2d(2), nn.Sequential(nn.BatchNorm1d(2)))
    weight = model[1].weight
    converted = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    assert type(converted[1]) is nn.SyncBatchNorm and converted[1].weight is weight
    assert type(converted[2][0]) is nn.SyncBatchNorm and type(converted[0]) is nn.Conv2d


# ---- lazy layers ------------------------------------------------------------------------------

@pytest.mark.parametrize("name, args, shape, becomes", [
    ("LazyConv1d", (4, 3), (2, 3, 6), "Conv1d"),
    ("LazyConv2d", (4, 3), (2, 3, 6, 5), "Conv2d"),
    ("LazyConv3d", (4, 2), (2, 3, 4, 4, 3), "Conv3d"),
    ("LazyConv2d", (4, 3), (3, 6, 5), "Conv2d"),
    ("LazyConvTranspose1d", (4, 3), (2, 3, 6), "ConvTranspose1d"),
    ("LazyConvTranspose2d", (4, 3), (2, 3, 6, 5), "ConvTranspose2d"),
    ("LazyConvTranspose3d", (4, 2), (2, 3, 4, 4, 3), "ConvTranspose3d"),
    ("LazyBatchNorm1d", (), (4, 3), "BatchNorm1d"),
    ("LazyBatchNorm2d", (), (2, 3, 4, 4), "BatchNorm2d"),
    ("LazyBatchNorm3d", (), (2, 3, 2, 2, 2), "BatchNorm3d"),
    ("LazyInstanceNorm1d", (), (2, 3, 5), "InstanceNorm1d"),
    ("LazyInstanceNorm2d", (), (2, 3, 4, 4), "InstanceNorm2d"),
    ("LazyInstanceNorm3d", (), (2, 3, 2, 2, 2), "InstanceNorm3d"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_lazy_layers_size_themselves_and_become_the_layer(name, args, shape, becomes):
    ours = getattr(nn, name)(*args)
    theirs = getattr(torch.nn, name)(*args)
    assert repr(ours) == repr(theirs)
    params = list(ours.parameters())
    x = rand(*shape)
    ours(disthook.tensor(x, dtype=disthook.float32))
    theirs(torch.tensor(x, dtype=torch.float32))
    assert type(ours) is getattr(nn, becomes)
    assert repr(ours) == repr(theirs)
    assert list(ours.parameters()) == params or all(a is b for a, b in zip(ours.parameters(),
                                                                          params))
    assert {k: tuple(v.shape) for k, v in ours.state_dict().items()} == \
           {k: tuple(v.shape) for k, v in theirs.state_dict().items()}
    # now the ordinary layer: with torch's values it computes torch's output
    theirs.double()
    ours.double().load_state_dict({k: disthook.tensor(v.detach().numpy().copy())
                                   for k, v in theirs.state_dict().items()})
    run_both(ours, theirs, x)


def test_lazy_instance_norm_reads_the_channels_of_unbatched_input():
    m = nn.LazyInstanceNorm2d()
    m(disthook.randn(3, 4, 4))
    assert m.num_features == 3 and m.weight.shape == (3,)


def test_lazy_parameters_are_the_objects_an_optimizer_holds():
    m = nn.LazyConv2d(2, 1)
    opt = disthook.optim.SGD(m.parameters(), lr=0.1)
    m(disthook.randn(1, 3, 2, 2)).sum().backward()
    before = m.weight.detach().clone()
    opt.step()
    assert m.weight.shape == (2, 3, 1, 1)
    assert not np.allclose(before.numpy(), m.weight.detach().numpy())


# ---- pooling ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name, shape, size", [
    ("adaptive_max_pool1d", (2, 3, 7), 3), ("adaptive_max_pool1d", (3, 8), 8),
    ("adaptive_max_pool2d", (1, 2, 7, 9), (3, 4)), ("adaptive_max_pool2d", (3, 5, 5), (2, None)),
    ("adaptive_max_pool3d", (1, 1, 5, 4, 6), (2, 3, 4)), ("adaptive_max_pool3d", (2, 4, 3, 5), 2),
    ("adaptive_avg_pool3d", (1, 2, 5, 4, 6), (2, 3, 4)), ("adaptive_avg_pool3d", (2, 4, 3, 5), 1),
    ("adaptive_avg_pool3d", (2, 4, 3, 5), (None, 2, 3)),
])
def test_adaptive_pooling(name, shape, size):
    check_op(lambda x: getattr(lib(x).nn.functional, name)(x, size), shape, double=True)


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_adaptive_max_pool_indices_are_torchs(nd):
    x = rand(2, 3, *(7, 5, 6)[:nd])
    size = (3, 4, 2)[:nd]
    fn = f"adaptive_max_pool{nd}d"
    values, indices = getattr(F, fn)(disthook.tensor(x), size, return_indices=True)
    t_values, t_indices = getattr(torch.nn.functional, fn)(torch.tensor(x), size, True)
    np.testing.assert_array_equal(indices.numpy(), t_indices.numpy())
    assert indices.dtype == disthook.int64 and indices.grad_fn is None
    np.testing.assert_allclose(values.numpy(), t_values.numpy())


@pytest.mark.parametrize("name, args, shape", [
    ("lp_pool1d", (2.0, 3, 2), (2, 2, 8)), ("lp_pool1d", (3.0, 2), (1, 3, 8)),
    ("lp_pool2d", (2.0, 2), (1, 2, 4, 6)), ("lp_pool2d", (1.5, (2, 3), (1, 2)), (1, 2, 5, 7)),
    ("lp_pool3d", (2.0, 2), (1, 1, 4, 4, 4)),
])
def test_lp_pooling(name, args, shape):
    # positive inputs: a fractional power of a negative average is NaN in both
    check_op(lambda x: getattr(lib(x).nn.functional, name)(x, *args), shape, low=0.2,
             high=2.0)


@pytest.mark.parametrize("nd, kernel, out", [(2, 2, (4, 5)), (2, (3, 2), (3, 3)),
                                             (3, (2, 3, 2), (3, 2, 3))])
def test_fractional_max_pool_with_torchs_samples_is_torchs(nd, kernel, out):
    x = rand(1, 1, *(7, 6, 6)[:nd])
    samples = np.random.default_rng(1).random((1, 1, nd))
    fn = f"fractional_max_pool{nd}d"
    check_op(lambda x: getattr(lib(x).nn.functional, fn)(
        x, kernel, out, _random_samples=lib(x).tensor(samples)), x, double=True)
    x = rand(3, 4, *(9, 11, 8)[:nd])
    samples = np.random.default_rng(1).random((3, 4, nd))
    _, indices = getattr(F, fn)(disthook.tensor(x), kernel, out, return_indices=True,
                                _random_samples=disthook.tensor(samples))
    _, t_indices = getattr(torch.nn.functional, fn)(torch.tensor(x), kernel, out,
                                                     return_indices=True,
                                                     _random_samples=torch.tensor(samples))
    np.testing.assert_array_equal(indices.numpy(), t_indices.numpy())


def test_fractional_max_pool_float32_offsets_round_as_torchs():
    x = rand(4, 5, 31, 29).astype(np.float32)
    samples = np.random.default_rng(2).random((4, 5, 2)).astype(np.float32)
    ours = F.fractional_max_pool2d(disthook.tensor(x), 3, output_ratio=(0.7, 0.7),
                                   _random_samples=disthook.tensor(samples))
    theirs = torch.nn.functional.fractional_max_pool2d(torch.tensor(x), 3, output_ratio=(0.7, 0.7),
                                                       _random_samples=torch.tensor(samples))
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_fractional_max_pool_random_windows_cover_the_input():
    x = disthook.randn(2, 3, 10, 10, requires_grad=True)
    m = nn.FractionalMaxPool2d(3, output_ratio=(0.5, 0.5), return_indices=True)
    first, indices = m(x)
    second, _ = m(x)
    assert first.shape == (2, 3, 5, 5) and first.grad_fn.name() == "FractionalMaxPool2DBackward0"
    assert not np.array_equal(first.detach().numpy(), second.detach().numpy())  # fresh offsets each call
    flat = x.detach().numpy().reshape(2, 3, -1)
    np.testing.assert_array_equal(np.take_along_axis(flat, indices.numpy().reshape(2, 3, -1), -1),
                                  first.detach().numpy().reshape(2, 3, -1))
    first.sum().backward()
    assert x.grad.sum().item() == pytest.approx(2 * 3 * 25)
    with pytest.raises(ValueError, match="requires specifying either an output size"):
        nn.FractionalMaxPool2d(2)


@pytest.mark.parametrize("name, args, shape", [
    ("AdaptiveMaxPool1d", (3,), (2, 3, 7)), ("AdaptiveMaxPool2d", ((2, 3),), (2, 3, 5, 7)),
    ("AdaptiveMaxPool3d", (2,), (1, 2, 4, 5, 3)), ("AdaptiveAvgPool3d", ((2, 1, 3),), (1, 2, 4, 5, 3)),
    ("LPPool1d", (2, 3, 2), (2, 3, 7)), ("LPPool2d", (2, 2), (2, 3, 4, 6)),
    ("LPPool3d", (2, 2), (1, 2, 4, 4, 4)),
], ids=lambda v: v if isinstance(v, str) else "")
def test_pooling_layers(name, args, shape):
    run_both(*twin(name, *args), np.abs(rand(*shape)) + 0.1)


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_max_pool_with_indices(nd):
    x = rand(2, 3, *(8, 6, 4)[:nd])
    fn = f"max_pool{nd}d_with_indices"
    values, indices = getattr(F, fn)(disthook.tensor(x), 2)
    t_values, t_indices = getattr(torch.nn.functional, fn)(torch.tensor(x), 2)
    np.testing.assert_array_equal(indices.numpy(), t_indices.numpy())
    np.testing.assert_allclose(values.numpy(), t_values.numpy())


@pytest.mark.parametrize("lazy, args, full, full_args, shape", [
    ("LazyConv2d", (4, 3), "Conv2d", (3, 4, 3), (2, 3, 5, 5)),
    ("LazyConvTranspose1d", (4, 3), "ConvTranspose1d", (3, 4, 3), (2, 3, 5)),
    ("LazyBatchNorm1d", (), "BatchNorm1d", (3,), (4, 3)),
])
def test_lazy_layers_take_their_sizes_from_a_state_dict_loaded_first(lazy, args, full,
                                                                     full_args, shape):
    theirs = getattr(torch.nn, full)(*full_args).double()
    ours = getattr(nn, lazy)(*args, dtype=disthook.float64)
    ours.load_state_dict({k: disthook.tensor(v.detach().numpy().copy())
                          for k, v in theirs.state_dict().items()})
    theirs.eval()
    ours.eval()
    x = rand(*shape)
    np.testing.assert_allclose(ours(disthook.tensor(x)).detach().numpy(),
                               theirs(torch.tensor(x)).detach().numpy(), rtol=1e-10)
    assert type(ours) is getattr(nn, full) and repr(ours) == repr(theirs)


def test_lazy_placeholders_are_uninitialized_until_sized():
    for layer in (nn.LazyLinear(3), nn.LazyConv1d(3, 2), nn.LazyBatchNorm1d()):
        assert isinstance(layer.weight, nn.UninitializedParameter)
        assert isinstance(layer.weight, nn.Parameter) and layer.weight.requires_grad
        assert repr(layer.weight) == "<UninitializedParameter>"
        layer(disthook.randn(2, 4, 5) if isinstance(layer, nn.Conv1d) or
              type(layer).__name__ == "LazyConv1d" else disthook.randn(2, 4))
        assert type(layer.weight) is nn.Parameter
    bn = nn.LazyBatchNorm2d()
    assert isinstance(bn.running_mean, nn.UninitializedBuffer)
    bn(disthook.randn(2, 3, 2, 2))
    assert type(bn.running_mean) is disthook.Tensor and bn.running_mean.shape == (3,)


def test_factory_kwargs():
    assert nn.factory_kwargs(None) == {}
    assert nn.factory_kwargs({"dtype": disthook.float64, "factory_kwargs": {"device": "cpu"}}) \
        == {"dtype": disthook.float64, "device": "cpu"}
    with pytest.raises(TypeError, match="dtype specified twice"):
        nn.factory_kwargs({"dtype": 1, "factory_kwargs": {"dtype": 2}})
    with pytest.raises(TypeError, match="unexpected kwargs"):
        nn.factory_kwargs({"bias": True})


def test_layer_families_are_siblings_as_in_torch():
    """Programs pick layers by class (freezing every ``_BatchNorm``): the hierarchy is
    torch's."""
    from torch.nn.modules import batchnorm as t_batchnorm
    from torch.nn.modules import dropout as t_dropout
    from torch.nn.modules import pooling as t_pooling

    from disthook.nn.modules import batchnorm, dropout, pooling

    for make, ours, theirs in [
        (lambda m: m.InstanceNorm2d(3), batchnorm._BatchNorm, t_batchnorm._BatchNorm),
        (lambda m: m.InstanceNorm2d(3), batchnorm._NormBase, t_batchnorm._NormBase),
        (lambda m: m.BatchNorm2d(3), batchnorm._NormBase, t_batchnorm._NormBase),
        (lambda m: m.SyncBatchNorm(3), batchnorm._BatchNorm, t_batchnorm._BatchNorm),
        (lambda m: m.AvgPool3d(2), nn.AvgPool2d, torch.nn.AvgPool2d),
        (lambda m: m.AvgPool3d(2), pooling._AvgPoolNd, t_pooling._AvgPoolNd),
        (lambda m: m.AvgPool1d(2), pooling._AvgPoolNd, t_pooling._AvgPoolNd),
        (lambda m: m.Dropout2d(), nn.Dropout, torch.nn.Dropout),
        (lambda m: m.Dropout2d(), dropout._DropoutNd, t_dropout._DropoutNd),
        (lambda m: m.ZeroPad2d(1), nn.ConstantPad2d, torch.nn.ConstantPad2d),
        (lambda m: m.ReLU6(), nn.Hardtanh, torch.nn.Hardtanh),
    ]:
        assert isinstance(make(nn), ours) is isinstance(make(torch.nn), theirs), ours
