"""The rest of the ``torch.nn`` surface: normalize / RMSNorm / local response norms, channel and
alpha dropout, one_hot and EmbeddingBag, bilinear, fold / unfold, channel shuffle, conv_tbc,
grid_sample and affine_grid, gumbel_softmax, ParameterList / ParameterDict."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from helpers import check_op, lib
from sweeps import product

import disthook
from disthook import nn
from disthook.nn import functional as F

torch = pytest.importorskip("torch")
RNG = np.random.default_rng(0)


def _f(x):
    return lib(x).nn.functional


def twin(name: str, *args, **kwargs):
    ours = getattr(nn, name)(*args, **kwargs).double()
    theirs = getattr(torch.nn, name)(*args, **kwargs).double()
    ours.load_state_dict({k: disthook.tensor(v.detach().numpy().copy())
                          for k, v in theirs.state_dict().items()})
    assert repr(ours) == repr(theirs)
    return ours, theirs


def layer_check(name, args, *inputs, **kwargs):
    """``check_op`` of a layer against torch's with the same parameters (values, input
    gradients), then its parameter gradients."""
    ours, theirs = twin(name, *args, **kwargs)
    check_op(lambda *xs: (ours if isinstance(xs[0], disthook.Tensor) else theirs)(*xs), *inputs,
             name=False)
    if not list(theirs.parameters()):
        return
    xs = [RNG.standard_normal(s) for s in inputs]
    (ours(*[disthook.tensor(x) for x in xs]) ** 2).sum().backward()
    (theirs(*[torch.tensor(x) for x in xs]) ** 2).sum().backward()
    for p, q in zip(ours.parameters(), theirs.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-9, atol=1e-12)


# ---- normalisation ---------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs", [{}, {"p": 1.0, "dim": 0}, {"p": 3.0, "dim": -1}])
def test_normalize(kwargs):
    check_op(lambda x: _f(x).normalize(x, **kwargs), (3, 4), double=True)


def test_rms_norm():
    check_op(lambda x, w: _f(x).rms_norm(x, (3, 4), w), (2, 3, 4), (3, 4), double=True)
    check_op(lambda x: _f(x).rms_norm(x, (4,), eps=1e-3), (2, 3, 4), name=False)
    layer_check("RMSNorm", ((3, 4),), (2, 3, 4))
    layer_check("RMSNorm", ((4,),), (2, 4), eps=0.1, elementwise_affine=False)


@pytest.mark.parametrize("size, shape", [(1, (2, 4, 3)), (2, (2, 5, 3, 2)), (3, (1, 6, 2)),
                                         (4, (1, 5, 2, 2, 2))])
def test_local_response_norm(size, shape):
    check_op(lambda x: _f(x).local_response_norm(x, size, alpha=0.1, k=2.0), shape,
             name=False, double=True)
    layer_check("LocalResponseNorm", (size, 0.1, 0.75, 2.0), shape)


@pytest.mark.parametrize("size, channels", [(3, 3), (5, 8), (2, 7)])
def test_cross_map_lrn2d_reproduces_torchs_windows(size, channels):
    ours, theirs = twin("CrossMapLRN2d", size, 0.2, 0.75, 1.0)
    x = RNG.standard_normal((2, channels, 3, 2))
    np.testing.assert_allclose(ours(disthook.tensor(x)).numpy(),
                               theirs(torch.tensor(x)).numpy(), rtol=1e-12)
    # the gradient is the derivative of that forward (finite differences; torch's legacy
    # backward assumes the symmetric windows its forward does not have, so it is not compared)
    import helpers

    saved, helpers.torch = helpers.torch, None
    try:
        check_op(ours, (1, channels, 2, 2))
    finally:
        helpers.torch = saved


# ---- dropout ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name, shape, channel_dims", [
    ("dropout1d", (20, 30, 4), 2), ("dropout1d", (30, 4), 1), ("dropout2d", (20, 30, 2, 3), 2),
    ("dropout3d", (20, 30, 2, 2, 2), 2), ("dropout3d", (30, 2, 2, 2), 1),
])
def test_channel_dropout_zeroes_whole_channels(name, shape, channel_dims):
    x = disthook.ones(shape, dtype=disthook.float64, requires_grad=True)
    y = getattr(F, name)(x, 0.4)
    planes = y.detach().numpy().reshape(int(np.prod(shape[:channel_dims])), -1)
    assert set(np.unique(planes.std(1))) == {0.0}  # each channel all kept or all dropped
    assert set(np.unique(planes)) == {0.0, 1 / 0.6}
    assert 0.1 < (planes[:, 0] == 0).mean() < 0.7
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), y.detach().numpy())
    assert getattr(F, name)(x, 0.4, training=False) is x


def test_channel_dropout_layers_and_inplace():
    for layer in (nn.Dropout1d(0.5), nn.Dropout2d(0.5), nn.Dropout3d(0.5)):
        assert not isinstance(layer, nn.Dropout)
        assert repr(layer) == repr(getattr(torch.nn, type(layer).__name__)(0.5))
    x = disthook.ones(4, 6, 3)
    assert F.dropout1d(x, 0.5, inplace=True) is x
    with pytest.raises(RuntimeError, match="dropout1d: Expected 2D or 3D input"):
        F.dropout1d(disthook.ones(2, 3, 4, 5))
    with pytest.warns(UserWarning, match="Received a 3D input to dropout2d"):
        F.dropout2d(disthook.ones(2, 3, 4))


@pytest.mark.parametrize("name, per_channel", [("alpha_dropout", False),
                                               ("feature_alpha_dropout", True)])
def test_alpha_dropout_keeps_mean_and_variance(name, per_channel):
    disthook.manual_seed(0)
    x = disthook.randn(400, 50, 20) if per_channel else disthook.randn(400000)
    y = getattr(F, name)(x, 0.3, training=True).numpy()
    assert abs(y.mean()) < 0.02 and abs(y.std() - 1) < 0.02
    assert getattr(F, name)(x, 0.3) is x  # training defaults to False
    if per_channel:
        kept = y.reshape(400 * 50, 20) == x.numpy().reshape(400 * 50, 20)
        assert kept.all(1).sum() == 0  # affine map changes every value


def test_alpha_dropout_gradient_is_the_kept_scale():
    x = disthook.randn(1000, requires_grad=True)
    y = nn.AlphaDropout(0.2)(x)
    y.sum().backward()
    a = 1 / np.sqrt((1.7580993408473766 ** 2 * 0.2 + 1) * 0.8)
    assert set(np.round(np.unique(x.grad.numpy()).astype(float), 6)) == {0.0, round(a, 6)}
    assert repr(nn.FeatureAlphaDropout(0.1)) == repr(torch.nn.FeatureAlphaDropout(0.1))


# ---- embeddings ------------------------------------------------------------------------------

def test_one_hot():
    x = disthook.tensor([[0, 2], [1, 3]])
    np.testing.assert_array_equal(F.one_hot(x).numpy(),
                                  torch.nn.functional.one_hot(torch.tensor([[0, 2], [1, 3]])))
    assert F.one_hot(x, 6).shape == (2, 2, 6) and F.one_hot(x).dtype == disthook.int64
    with pytest.raises(RuntimeError, match="Class values must be smaller than num_classes"):
        F.one_hot(x, 3)
    with pytest.raises(RuntimeError, match="only applicable to index tensor of type LongTensor"):
        F.one_hot(disthook.tensor([0.0]))


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("layout", ["2d", "offsets", "last_offset", "padding"])
def test_embedding_bag(mode, layout):
    weight = RNG.standard_normal((7, 3))
    if layout == "2d":
        args = (np.array([[1, 2, 4], [4, 3, 2]]), None, {})
    elif layout == "offsets":
        args = (np.array([1, 2, 4, 5, 4, 3, 2, 9 % 7]), np.array([0, 2, 2, 5]), {})
    elif layout == "last_offset":
        args = (np.array([1, 2, 4, 5, 4, 3]), np.array([0, 2, 5, 6]),
                {"include_last_offset": True})
    else:
        args = (np.array([[1, 0, 4], [0, 0, 0], [2, 2, 0]]), None, {"padding_idx": 0})
    indices, offsets, kwargs = args

    def fn(w):
        m = lib(w)
        off = None if offsets is None else m.tensor(offsets)
        return m.nn.functional.embedding_bag(m.tensor(indices), w, off, mode=mode, **kwargs)

    check_op(fn, weight, name=False)


def test_embedding_bag_per_sample_weights_and_module():
    weight = RNG.standard_normal((5, 3))
    check_op(lambda w, s: _f(w).embedding_bag(lib(w).tensor([0, 1, 1, 4]), w,
                                              lib(w).tensor([0, 1]), mode="sum",
                                              per_sample_weights=s), weight, (4,), name=False)
    ours, theirs = twin("EmbeddingBag", 5, 3, mode="max", padding_idx=1)
    idx = np.array([[0, 1, 2], [4, 4, 1]])
    np.testing.assert_allclose(ours(disthook.tensor(idx)).detach().numpy(),
                               theirs(torch.tensor(idx)).detach().numpy())
    bag = nn.EmbeddingBag.from_pretrained(disthook.ones(4, 2), mode="sum")
    assert not bag.weight.requires_grad
    np.testing.assert_allclose(bag(disthook.tensor([[0, 1, 2]])).numpy(), [[3.0, 3.0]])


# ---- linear maps, folding, shuffling ---------------------------------------------------------------

def test_bilinear():
    check_op(lambda a, b, w, c: _f(a).bilinear(a, b, w, c), (4, 2), (4, 3), (5, 2, 3), (5,),
             double=True, name=False)
    check_op(lambda a, b, w: _f(a).bilinear(a, b, w), (2, 4, 2), (2, 4, 3), (5, 2, 3),
             name=False)
    layer_check("Bilinear", (2, 3, 4), (5, 2), (5, 3))


@pytest.mark.parametrize("kwargs", [{}, {"stride": 2, "padding": 1}, {"dilation": (2, 1)}])
def test_unfold_and_fold(kwargs):
    check_op(lambda x: _f(x).unfold(x, (2, 3), **kwargs), (2, 3, 5, 6), double=True)
    blocks = torch.nn.functional.unfold(torch.zeros(1, 1, 5, 6), (2, 3), **kwargs).shape[-1]
    check_op(lambda x: _f(x).fold(x, (5, 6), (2, 3), **kwargs), (2, 12, blocks), double=True)
    layer_check("Unfold", ((2, 3),), (1, 3, 5, 6), **kwargs)
    layer_check("Fold", ((5, 6), (2, 3)), (1, 6, blocks), **kwargs)


def test_fold_errors_are_torchs():
    with pytest.raises(RuntimeError, match="calculated number of sliding blocks 2 \\* 2 = 4"):
        F.fold(disthook.randn(2, 4, 3), (3, 3), (2, 2))
    with pytest.raises(RuntimeError, match="divisible by the product of kernel_size"):
        F.fold(disthook.randn(2, 5, 4), (3, 3), (2, 2))


def test_channel_shuffle():
    check_op(lambda x: _f(x).channel_shuffle(x, 3), (2, 6, 2), double=True)
    # (torch's native_channel_shuffle has no gradient; ours is channel_shuffle's)
    check_op(lambda x: _f(x).native_channel_shuffle(x, 2), (1, 4, 2, 3), grad=False,
             name=False)
    layer_check("ChannelShuffle", (2,), (2, 4, 3))
    with pytest.raises(RuntimeError, match="Number of channels must be divisible by groups"):
        F.channel_shuffle(disthook.randn(1, 5, 2), 2)


def test_conv_tbc():
    check_op(lambda x, w, b: _f(x).conv_tbc(x, w, b, 1), (6, 2, 3), (3, 3, 4), (4,),
             name=False)


# ---- grid sampling -------------------------------------------------------------------------------

@pytest.mark.parametrize("mode, padding_mode, align_corners", product(
    ["bilinear", "nearest", "bicubic"], ["zeros", "border", "reflection"], [True, False]))
def test_grid_sample(mode, padding_mode, align_corners):
    grid = RNG.uniform(-1.3, 1.3, (2, 3, 2, 2))
    check_op(lambda x, g: _f(x).grid_sample(x, g, mode, padding_mode, align_corners),
             (2, 2, 4, 5), grid, name=False, grad=mode != "nearest")


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("padding_mode", ["zeros", "reflection"])
def test_grid_sample_3d(mode, padding_mode):
    grid = RNG.uniform(-1.2, 1.2, (1, 2, 2, 3, 3))
    check_op(lambda x, g: _f(x).grid_sample(x, g, mode, padding_mode, False), (1, 2, 3, 4, 3),
             grid, name=False, grad=mode != "nearest")


@pytest.mark.parametrize("size", [[2, 3, 4, 5], [2, 1, 3, 4, 2]])
@pytest.mark.parametrize("align_corners", [True, False])
def test_affine_grid(size, align_corners):
    theta = (2, 2, 3) if len(size) == 4 else (2, 3, 4)
    check_op(lambda t: _f(t).affine_grid(t, size, align_corners), theta, name=False)


def test_affine_grid_and_grid_sample_warn_without_align_corners_as_torch():
    with pytest.warns(UserWarning, match="align_corners=False since 1.3.0"):
        grid = F.affine_grid(disthook.randn(1, 2, 3), [1, 1, 2, 2])
    with pytest.warns(UserWarning, match="align_corners=False since 1.3.0"):
        F.grid_sample(disthook.randn(1, 1, 2, 2), grid)
    with pytest.raises(ValueError, match="Expected a batch of 2D affine matrices of shape Nx2x3"):
        F.affine_grid(disthook.randn(1, 3, 4), [1, 1, 2, 2], False)


# ---- sampling and the deprecated names ----------------------------------------------------------------

def test_gumbel_softmax():
    disthook.manual_seed(0)
    logits = disthook.tensor([[0.0, 1.0, 3.0]] * 20000)
    soft = F.gumbel_softmax(logits, tau=0.5)
    np.testing.assert_allclose(soft.sum(-1).numpy(), 1.0, rtol=1e-6)
    x = logits.clone().requires_grad_()
    hard = F.gumbel_softmax(x, hard=True)
    assert set(np.unique(hard.detach().numpy())) == {0.0, 1.0}
    freq = hard.detach().numpy().mean(0)  # Gumbel-max: argmax frequencies are the softmax
    np.testing.assert_allclose(freq, np.exp([0, 1, 3]) / np.exp([0, 1, 3]).sum(), atol=0.015)
    (hard * disthook.tensor([1.0, 2.0, 3.0])).sum().backward()
    assert x.grad is not None and np.abs(x.grad.numpy()).sum() > 0  # straight-through


def test_upsampling_layers_and_deprecated_functions():
    x = RNG.standard_normal((1, 2, 3, 4))
    for name, kwargs in (("UpsamplingNearest2d", {"scale_factor": 2}),
                         ("UpsamplingBilinear2d", {"size": (5, 7)})):
        ours, theirs = getattr(nn, name)(**kwargs), getattr(torch.nn, name)(**kwargs)
        assert repr(ours) == repr(theirs)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            np.testing.assert_allclose(ours(disthook.tensor(x)).numpy(),
                                       theirs(torch.tensor(x)).numpy(), rtol=1e-12)
    for name, kwargs in (("upsample", {"scale_factor": 2, "mode": "bilinear"}),
                         ("upsample_nearest", {"size": 5}), ("upsample_bilinear", {"size": 5})):
        with pytest.warns(UserWarning, match=f"nn.functional.{name} is deprecated"):
            out = getattr(F, name)(disthook.tensor(x), **kwargs)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            want = getattr(torch.nn.functional, name)(torch.tensor(x), **kwargs)
        np.testing.assert_allclose(out.numpy(), want.numpy(), rtol=1e-12)


# ---- parameter containers ------------------------------------------------------------------------------

def test_parameter_list():
    params = nn.ParameterList([nn.Parameter(disthook.ones(2)), disthook.zeros(3)])
    params.append(disthook.ones(1))
    params += [disthook.ones(4)]
    assert len(params) == 4 and all(isinstance(p, nn.Parameter) for p in params)
    assert [n for n, _ in params.named_parameters()] == ["0", "1", "2", "3"]
    assert len(params[1:3]) == 2 and params[-1].shape == (4,)
    model = nn.Module()
    model.extra = params
    assert list(model.state_dict()) == ["extra.0", "extra.1", "extra.2", "extra.3"]
    theirs = torch.nn.ParameterList([torch.nn.Parameter(torch.ones(2)), torch.zeros(3),
                                     torch.ones(1), torch.ones(4)])
    assert repr(params) == repr(theirs)
    with pytest.raises(IndexError, match="index 4 is out of range"):
        params[4]


def test_parameter_dict():
    params = nn.ParameterDict({"b": disthook.ones(2), "a": nn.Parameter(disthook.zeros(1))})
    theirs = torch.nn.ParameterDict({"b": torch.ones(2), "a": torch.nn.Parameter(torch.zeros(1))})
    assert list(params.keys()) == list(theirs.keys()) == ["a", "b"]  # a plain dict is sorted
    assert repr(params) == repr(theirs)
    params["c"] = disthook.ones(3)
    assert isinstance(params["c"], nn.Parameter) and "c" in params and len(params) == 3
    assert [n for n, _ in params.named_parameters()] == ["a", "b", "c"]
    assert params.pop("a").shape == (1,) and list(params) == ["b", "c"]
    merged = params | nn.ParameterDict({"d": disthook.ones(1)})
    assert list(merged) == ["b", "c", "d"] and merged["b"] is params["b"]
    assert params.get("zz") is None and params.setdefault("e", disthook.ones(5)).shape == (5,)


def test_container_is_deprecated_module_with_children():
    with pytest.warns(UserWarning, match="nn.Container is deprecated"):
        c = nn.Container(lin=nn.Linear(2, 3))
    assert isinstance(c.lin, nn.Linear) and len(list(c.parameters())) == 2


# ---- grouped products and the functional helpers -------------------------------------------------

@pytest.mark.parametrize("a, b, offs", [
    ((2, 4, 8), (2, 8, 4), None), ((8, 8), (2, 8, 4), [3, 8]), ((2, 4, 8), (8, 8), [4, 8]),
    ((4, 8), (8, 4), [4, 8]),
])
def test_grouped_mm(a, b, offs):
    # torch's grouped_mm takes float32 (or half) only: compare values and gradients there
    a = RNG.standard_normal(a).astype(np.float32)
    b = RNG.standard_normal(b).astype(np.float32)
    results = []
    for m in (disthook, torch):
        x, y = m.tensor(a, requires_grad=True), m.tensor(b, requires_grad=True)
        o = None if offs is None else m.tensor(offs, dtype=m.int32)
        out = m.nn.functional.grouped_mm(x, y, offs=o)
        (out * m.tensor(np.arange(out.numel(), dtype=np.float32).reshape(out.shape))).sum() \
            .backward()
        results.append([out.detach().numpy(), x.grad.numpy(), y.grad.numpy()])
    for ours, theirs in zip(*results):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-4)
    with pytest.raises(RuntimeError, match="Expected mat_a to be Float32, BFloat16 or Float16"):
        F.grouped_mm(disthook.ones(2, 2, 2, dtype=disthook.float64), disthook.ones(2, 2, 2))


def test_boolean_dispatch_and_torch_function_protocol():
    pick = F.boolean_dispatch("flag", 1, False, lambda x, flag=False: ("true", x),
                              lambda x, flag=False: ("false", x), "mod", "pick")
    assert pick(1) == ("false", 1) and pick(1, True) == ("true", 1)
    assert pick(1, flag=True) == ("true", 1) and pick.__name__ == "pick"

    calls = []

    class Logged:
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            calls.append(func.__name__)
            return "handled"

    x = disthook.ones(2)
    assert not F.has_torch_function((x,)) and F.has_torch_function_variadic(x, Logged())
    assert F.handle_torch_function(F.relu, (Logged(),), Logged()) == "handled"
    assert calls == ["relu"]
    with pytest.raises(AssertionError, match="kernel_size must be"):
        F.assert_int_or_pair([1, 2, 3], "kernel_size", "{} must be int or pair")


# ---- torch.nn.grad and torch.nn.common_types ------------------------------------------------------

@pytest.mark.parametrize("dims", [1, 2, 3])
def test_conv_input_and_weight_gradients_as_functions(dims):
    x = RNG.standard_normal((2, 4) + (5, 6, 4)[:dims])
    w = RNG.standard_normal((6, 2) + (2, 3, 2)[:dims])
    kwargs = {"stride": 2, "padding": 1, "groups": 2}
    conv = getattr(torch.nn.functional, f"conv{dims}d")
    g = RNG.standard_normal(tuple(conv(torch.tensor(x), torch.tensor(w), **kwargs).shape))
    ours_in = getattr(nn.grad, f"conv{dims}d_input")(x.shape, disthook.tensor(w),
                                                     disthook.tensor(g), **kwargs)
    ours_w = getattr(nn.grad, f"conv{dims}d_weight")(disthook.tensor(x), w.shape,
                                                     disthook.tensor(g), **kwargs)
    theirs_in = getattr(torch.nn.grad, f"conv{dims}d_input")(x.shape, torch.tensor(w),
                                                             torch.tensor(g), **kwargs)
    theirs_w = getattr(torch.nn.grad, f"conv{dims}d_weight")(torch.tensor(x), w.shape,
                                                             torch.tensor(g), **kwargs)
    np.testing.assert_allclose(ours_in.numpy(), theirs_in.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(ours_w.numpy(), theirs_w.numpy(), rtol=1e-10, atol=1e-12)


def test_common_types_are_torchs_aliases():
    from disthook.nn.common_types import _ratio_3_t, _size_2_t

    assert _size_2_t == int | tuple[int, int]
    assert _ratio_3_t == float | tuple[float, float, float]
