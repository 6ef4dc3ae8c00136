"""Losses through check_op: forward vs a numpy reference (and torch), gradients vs central
differences (and torch), second order through ``create_graph=True``; every reduction.

LOSS_CASES (bad input -> torch's exception and message) is shared with
tests/parity/test_loss_parity.py, which checks that torch raises the same.
"""
import re
import warnings

import numpy as np
import pytest
from helpers import check_op, lib

import disthook
import disthook.nn.functional as F
from disthook import nn

REDUCTIONS = ["mean", "sum", "none"]
RNG = np.random.default_rng(3)


def nnf(x):
    """``torch.nn.functional`` of whichever library ``x`` belongs to."""
    return lib(x).nn.functional


def const(x, array):
    """``array`` as a constant tensor of ``x``'s library."""
    return lib(x).tensor(array)


def _reduce(loss, reduction):
    return loss.mean() if reduction == "mean" else loss.sum() if reduction == "sum" else loss


# ---- numpy references ---------------------------------------------------------------------

def np_log_softmax(x, axis):
    shifted = x - x.max(axis=axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))


def np_nll(log_probs, target, weight=None, reduction="mean", ignore_index=-100):
    class_dim = 1 if log_probs.ndim > 1 else 0
    valid = target != ignore_index
    safe = np.where(valid, target, 0)
    picked = np.take_along_axis(log_probs, np.expand_dims(safe, class_dim), class_dim)
    picked = picked.squeeze(class_dim)
    w = np.where(valid, 1.0 if weight is None else weight[safe], 0.0)
    loss = -picked * w
    if reduction == "mean":
        return loss.sum() / w.sum()
    return loss.sum() if reduction == "sum" else loss


def np_smoothed_ce(x, target, weight, reduction, ignore_index, eps):
    class_dim = 1 if x.ndim > 1 else 0
    n_classes = x.shape[class_dim]
    log_probs = np_log_softmax(x, class_dim)
    nll = np_nll(log_probs, target, weight, reduction, ignore_index)
    wshape = [1] * x.ndim
    wshape[class_dim] = n_classes
    w = np.ones(n_classes) if weight is None else weight
    smooth = -(log_probs * w.reshape(wshape)).sum(class_dim)
    valid = target != ignore_index
    smooth = np.where(valid, smooth, 0.0)
    if reduction == "mean":
        smooth = smooth.sum() / w[target[valid]].sum()
    elif reduction == "sum":
        smooth = smooth.sum()
    return (1 - eps) * nll + eps / n_classes * smooth


def np_bce(x, t, weight=None):
    loss = -(t * np.maximum(np.log(x), -100) + (1 - t) * np.maximum(np.log1p(-x), -100))
    return loss if weight is None else loss * weight


def np_bce_logits(x, t, weight=None, pos_weight=None):
    log_sig = -np.logaddexp(0, -x)
    log_weight = 1 if pos_weight is None else 1 + (pos_weight - 1) * t
    loss = (1 - t) * x - log_weight * log_sig
    return loss if weight is None else loss * weight


def classes(shape, n_classes, ignore=None):
    t = RNG.integers(0, n_classes, shape)
    if ignore is not None and t.size > 1:
        t.flat[1] = ignore
    return t


# ---- regression losses ----------------------------------------------------------------------

@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("name, np_fn", [
    ("mse_loss", lambda d: d * d),
    ("l1_loss", np.abs),
    ("smooth_l1_loss", lambda d: np.where(np.abs(d) < 1, 0.5 * d * d, np.abs(d) - 0.5)),
    ("huber_loss", lambda d: np.where(np.abs(d) <= 1, 0.5 * d * d, np.abs(d) - 0.5)),
])
@pytest.mark.parametrize("shape", [(3, 4), ()])
def test_regression_losses(name, np_fn, reduction, shape):
    check_op(lambda x, y: getattr(nnf(x), name)(x, y, reduction=reduction), shape, shape,
             np_fn=lambda x, y: _reduce(np_fn(x - y), reduction), double=name != "l1_loss")


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("beta", [0.5, 2.0, 0.0])
def test_smooth_l1_beta(beta, reduction):
    def ref(x, y):
        d = np.abs(x - y)
        loss = d if beta == 0 else np.where(d < beta, 0.5 * d * d / beta, d - 0.5 * beta)
        return _reduce(loss, reduction)

    check_op(lambda x, y: nnf(x).smooth_l1_loss(x, y, reduction=reduction, beta=beta),
             (4, 3), (4, 3), np_fn=ref, double=beta != 0, low=-3, high=3)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("delta", [0.5, 2.0])
def test_huber_delta(delta, reduction):
    def ref(x, y):
        d = np.abs(x - y)
        return _reduce(np.where(d <= delta, 0.5 * d * d, delta * (d - 0.5 * delta)), reduction)

    check_op(lambda x, y: nnf(x).huber_loss(x, y, reduction=reduction, delta=delta),
             (4, 3), (4, 3), np_fn=ref, double=True, low=-3, high=3)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("name", ["mse_loss", "l1_loss", "huber_loss"])
def test_elementwise_weight(name, reduction):
    w = RNG.uniform(0.1, 2.0, (3, 4))

    def ref(x, y):
        d = np.abs(x - y)
        loss = {"mse_loss": d * d, "l1_loss": d,
                "huber_loss": np.where(d <= 1, 0.5 * d * d, d - 0.5)}[name] * w
        if reduction == "mean":  # mse and l1 divide by the weights, huber by the count
            return loss.mean() if name == "huber_loss" else loss.sum() / w.sum()
        return _reduce(loss, reduction)

    check_op(lambda x, y: getattr(nnf(x), name)(x, y, reduction=reduction, weight=const(x, w)),
             (3, 4), (3, 4), np_fn=ref)


def test_regression_losses_broadcast_with_a_warning():
    with pytest.warns(UserWarning, match=re.escape(
            "Using a target size (torch.Size([4])) that is different to the input size "
            "(torch.Size([3, 4])). This will likely lead to incorrect results due to "
            "broadcasting. Please ensure they have the same size.")):
        loss = F.mse_loss(disthook.ones(3, 4), disthook.zeros(4))
    assert loss.item() == 1.0
    for fn in (F.l1_loss, F.smooth_l1_loss, F.huber_loss):
        with pytest.warns(UserWarning, match="Using a target size"):
            fn(disthook.ones(3, 4), disthook.zeros(4))


def test_same_size_gives_no_warning(no_warnings):
    F.mse_loss(disthook.ones(3), disthook.zeros(3))
    nn.MSELoss()(disthook.ones(3), disthook.zeros(3))


def test_legacy_reduction_flags_warn_and_map():
    with pytest.warns(UserWarning, match=re.escape(
            "size_average and reduce args will be deprecated, please use reduction='sum' "
            "instead.")):
        m = nn.MSELoss(size_average=False)
    assert m.reduction == "sum"
    with pytest.warns(UserWarning, match="reduction='none'"):
        out = F.l1_loss(disthook.ones(2), disthook.zeros(2), reduce=False)
    assert out.tolist() == [1.0, 1.0]


# ---- cross entropy and NLL over class indices ----------------------------------------------

# (input shape, target shape): no batch, (N, C), and (N, C, d1, ...) of 1, 2 and 3 extra dims
CLASS_SHAPES = [((5,), ()), ((4, 5), (4,)), ((2, 5, 3), (2, 3)), ((2, 5, 3, 2), (2, 3, 2)),
                ((2, 5, 2, 1, 2), (2, 2, 1, 2))]
CLASS_IDS = ["C", "NC", "NCd", "NCHW", "NCd3"]


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("shape, tshape", CLASS_SHAPES, ids=CLASS_IDS)
def test_cross_entropy(shape, tshape, reduction):
    t = classes(tshape, 5)
    check_op(lambda x: nnf(x).cross_entropy(x, const(x, t), reduction=reduction), shape,
             np_fn=lambda x: np_nll(np_log_softmax(x, min(1, x.ndim - 1)), t,
                                    reduction=reduction), double=True)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("shape, tshape", CLASS_SHAPES, ids=CLASS_IDS)
def test_cross_entropy_weight_and_ignore_index(shape, tshape, reduction):
    """A weighted mean divides by the sum of the targets' weights; ignored targets count
    neither in the sum nor in the divisor."""
    t = classes(tshape, 5, ignore=-100)
    w = RNG.uniform(0.2, 2.0, 5)
    check_op(lambda x: nnf(x).cross_entropy(x, const(x, t), weight=const(x, w),
                                            reduction=reduction), shape,
             np_fn=lambda x: np_nll(np_log_softmax(x, min(1, x.ndim - 1)), t, w, reduction),
             double=True)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("shape, tshape", CLASS_SHAPES, ids=CLASS_IDS)
def test_nll_loss(shape, tshape, reduction):
    t = classes(tshape, 5, ignore=2)
    w = RNG.uniform(0.2, 2.0, 5)
    check_op(lambda x: nnf(x).nll_loss(x, const(x, t), weight=const(x, w), ignore_index=2,
                                       reduction=reduction), shape,
             np_fn=lambda x: np_nll(x, t, w, reduction, ignore_index=2), double=True)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("shape, tshape", CLASS_SHAPES[:3], ids=CLASS_IDS[:3])
def test_cross_entropy_label_smoothing(shape, tshape, weighted, reduction):
    t = classes(tshape, 5, ignore=4)
    w = RNG.uniform(0.2, 2.0, 5) if weighted else None
    check_op(lambda x: nnf(x).cross_entropy(
        x, const(x, t), weight=None if w is None else const(x, w), ignore_index=4,
        reduction=reduction, label_smoothing=0.2), shape,
        np_fn=lambda x: np_smoothed_ce(x, t, w, reduction, 4, 0.2), double=True)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("smoothing", [0.0, 0.3])
@pytest.mark.parametrize("shape", [(5,), (4, 5), (2, 5, 3)])
def test_cross_entropy_probability_targets(shape, smoothing, weighted, reduction):
    """Targets of the input's shape are class probabilities; the gradient reaches them too."""
    class_dim = min(1, len(shape) - 1)
    probs = RNG.dirichlet(np.ones(5), size=int(np.prod(shape)) // 5)
    target = np.moveaxis(probs.reshape(*[s for i, s in enumerate(shape) if i != class_dim], 5),
                         -1, class_dim)
    w = RNG.uniform(0.2, 2.0, 5) if weighted else None

    def ref(x, t):
        t = t * (1 - smoothing) + smoothing / 5
        wshape = [1] * x.ndim
        wshape[class_dim] = 5
        lp = np_log_softmax(x, class_dim) * (1 if w is None else w.reshape(wshape))
        per_sample = -(lp * t).sum(class_dim)
        return per_sample.sum() / (x.size / 5) if reduction == "mean" else _reduce(
            per_sample, reduction)

    check_op(lambda x, t: nnf(x).cross_entropy(
        x, t, weight=None if w is None else const(x, w), reduction=reduction,
        label_smoothing=smoothing), shape, target, np_fn=ref, double=True)


def test_cross_entropy_matches_log_softmax_then_nll():
    x = disthook.randn(6, 4, requires_grad=True)
    t = disthook.tensor([0, 3, 1, 1, 2, 0])
    fused = F.cross_entropy(x, t)
    (g_fused,) = disthook.autograd.grad(fused, x)
    pair = F.nll_loss(F.log_softmax(x, dim=1), t)
    (g_pair,) = disthook.autograd.grad(pair, x)
    assert fused.grad_fn.name() == pair.grad_fn.name() == "NllLossBackward0"
    np.testing.assert_allclose(fused.item(), pair.item(), rtol=1e-6)
    np.testing.assert_allclose(g_fused.numpy(), g_pair.numpy(), atol=1e-7)


def test_cross_entropy_all_targets_ignored_is_nan_with_zero_gradient():
    x = disthook.randn(3, 4, requires_grad=True)
    loss = F.cross_entropy(x, disthook.tensor([-100, -100, -100]))
    assert np.isnan(loss.item())
    loss.backward()
    assert x.grad.abs().sum().item() == 0.0
    assert F.cross_entropy(x, disthook.tensor([-100, -100, -100]), reduction="sum").item() == 0


def test_cross_entropy_large_logits_stay_finite():
    x = disthook.tensor([[1000.0, -1000.0, 0.0]], requires_grad=True)
    loss = F.cross_entropy(x, disthook.tensor([1]))
    assert loss.item() == pytest.approx(2000.0)
    loss.backward()
    np.testing.assert_allclose(x.grad.numpy(), [[1.0, -1.0, 0.0]], atol=1e-6)


def test_cross_entropy_logits_changed_in_place_after_the_loss():
    """torch saves log_softmax's output, not the logits, so a later in-place change of the
    logits is allowed and does not change the gradient (numbers as torch 2.13 prints)."""
    x = disthook.tensor([[1.0, 2.0, 0.5], [0.1, -1.0, 3.0]], requires_grad=True)
    logits = x * 1
    loss = F.cross_entropy(logits, disthook.tensor([2, 0]))
    logits.add_(5)
    loss.backward()
    np.testing.assert_allclose(x.grad.numpy(), [[0.1156, 0.3143, -0.4299],
                                                [-0.4744, 0.0085, 0.4658]], atol=1e-4)


def test_cross_entropy_no_graph_under_no_grad():
    x = disthook.randn(3, 4, requires_grad=True)
    with disthook.no_grad():
        loss = F.cross_entropy(x, disthook.tensor([0, 1, 2]))
    assert loss.grad_fn is None and not loss.requires_grad


def test_cross_entropy_uint8_target():
    x = disthook.randn(3, 4)
    t = disthook.tensor([0, 3, 1])
    assert F.cross_entropy(x, t.to(disthook.uint8)).item() == pytest.approx(
        F.cross_entropy(x, t).item())


# ---- binary cross entropy ---------------------------------------------------------------------

@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
def test_binary_cross_entropy(weighted, reduction):
    x = RNG.uniform(0.05, 0.95, (3, 4))
    t = RNG.uniform(0, 1, (3, 4))
    w = RNG.uniform(0.2, 2, (4,)) if weighted else None
    check_op(lambda x, t: nnf(x).binary_cross_entropy(
        x, t, weight=None if w is None else const(x, w), reduction=reduction), x, t,
        np_fn=lambda x, t: _reduce(np_bce(x, t, w), reduction), double=True)


def test_binary_cross_entropy_clamps_the_log_at_minus_100():
    x = disthook.tensor([0.0, 1.0, 1.0], requires_grad=True)
    loss = F.binary_cross_entropy(x, disthook.tensor([1.0, 0.0, 1.0]), reduction="none")
    assert loss.tolist() == [100.0, 100.0, 0.0]
    loss.sum().backward()
    assert np.isfinite(x.grad.numpy()).all()


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("pos_weighted", [False, True])
def test_binary_cross_entropy_with_logits(pos_weighted, weighted, reduction):
    x = RNG.uniform(-3, 3, (3, 4))
    t = RNG.uniform(0, 1, (3, 4))
    w = RNG.uniform(0.2, 2, (3, 1)) if weighted else None
    pw = RNG.uniform(0.2, 3, (4,)) if pos_weighted else None
    check_op(lambda x, t: nnf(x).binary_cross_entropy_with_logits(
        x, t, weight=None if w is None else const(x, w), reduction=reduction,
        pos_weight=None if pw is None else const(x, pw)), x, t,
        np_fn=lambda x, t: _reduce(np_bce_logits(x, t, w, pw), reduction), double=True)


def test_binary_cross_entropy_with_logits_is_stable():
    x = disthook.tensor([500.0, -500.0, 30.0], requires_grad=True)
    loss = F.binary_cross_entropy_with_logits(x, disthook.tensor([0.0, 1.0, 1.0]),
                                              reduction="none")
    np.testing.assert_allclose(loss.detach().numpy(), [500.0, 500.0, 9.357623e-14], rtol=1e-5)
    loss.sum().backward()
    assert x.grad.tolist() == [1.0, -1.0, 0.0]  # sigmoid(30) rounds to 1 in float32, as in torch


# ---- modules ------------------------------------------------------------------------------------

def test_loss_modules_match_their_functions():
    x = disthook.randn(4, 3)
    t = disthook.tensor([0, 2, 1, 2])
    w = disthook.tensor([1.0, 2.0, 0.5])
    p = disthook.rand(4, 3)
    pairs = [
        (nn.CrossEntropyLoss(weight=w, ignore_index=1, label_smoothing=0.1),
         F.cross_entropy(x, t, weight=w, ignore_index=1, label_smoothing=0.1), (x, t)),
        (nn.NLLLoss(weight=w, reduction="sum"), F.nll_loss(x, t, weight=w, reduction="sum"),
         (x, t)),
        (nn.BCELoss(weight=w), F.binary_cross_entropy(p, p.round(), weight=w), (p, p.round())),
        (nn.BCEWithLogitsLoss(pos_weight=w), F.binary_cross_entropy_with_logits(
            x, p, pos_weight=w), (x, p)),
        (nn.SmoothL1Loss(beta=0.5), F.smooth_l1_loss(x, p, beta=0.5), (x, p)),
        (nn.HuberLoss(delta=0.5, reduction="none"), F.huber_loss(x, p, delta=0.5,
                                                                  reduction="none"), (x, p)),
    ]
    for module, want, args in pairs:
        assert np.array_equal(module(*args).numpy(), want.numpy()), module


def test_loss_module_weights_are_buffers():
    w = disthook.tensor([1.0, 2.0])
    assert list(nn.CrossEntropyLoss(weight=w).state_dict()) == ["weight"]
    assert list(nn.BCEWithLogitsLoss(pos_weight=w).state_dict()) == ["pos_weight"]
    assert list(nn.NLLLoss().state_dict()) == []
    assert repr(nn.CrossEntropyLoss(weight=w)) == "CrossEntropyLoss()"


def test_huber_delta_must_be_a_number():
    with pytest.raises(TypeError, match="delta must be a float or int, got: <class 'str'>"):
        nn.HuberLoss(delta="1")


# ---- errors -----------------------------------------------------------------------------------

def _f(t):
    return t.nn.functional


def _req(t, *shape):
    return t.ones(*shape, requires_grad=True)


# (id, fn of the torch-like module, exception type, torch's message)
LOSS_CASES = [
    ("ce_target_out_of_bounds", lambda t: _f(t).cross_entropy(t.zeros(3, 5), t.tensor([1, 0, 5])),
     IndexError, "Target 5 is out of bounds."),
    ("ce_negative_target", lambda t: _f(t).cross_entropy(t.zeros(3, 5), t.tensor([1, -2, 0])),
     IndexError, "Target -2 is out of bounds."),
    ("nll_nd_target_out_of_bounds", lambda t: _f(t).nll_loss(
        t.zeros(2, 5, 4), t.full((2, 4), 7, dtype=t.long)), IndexError,
     "Target 7 is out of bounds."),
    ("ce_batch_mismatch", lambda t: _f(t).cross_entropy(t.zeros(3, 5), t.tensor([1, 0])),
     ValueError, "Expected input batch_size (3) to match target batch_size (2)."),
    ("ce_multi_target", lambda t: _f(t).cross_entropy(t.zeros(3, 5), t.zeros(3, 4)),
     RuntimeError, "0D or 1D target tensor expected, multi-target not supported"),
    ("ce_float_target", lambda t: _f(t).cross_entropy(t.zeros(3, 5), t.zeros(3)),
     RuntimeError, "expected target dtype to be Long or Byte, but got Float"),
    ("ce_int32_target", lambda t: _f(t).cross_entropy(t.zeros(3, 5), t.zeros(3, dtype=t.int32)),
     RuntimeError, "expected target dtype to be Long or Byte, but got Int"),
    ("ce_nd_target_size", lambda t: _f(t).cross_entropy(t.zeros(2, 5, 4), t.zeros(2, 3)),
     RuntimeError, "Expected target size [2, 4], got [2, 3]"),
    ("nll_2d_target_size", lambda t: _f(t).nll_loss(
        t.zeros(2, 5, 4, 3), t.zeros(2, 3, 3, dtype=t.long)), RuntimeError,
     "size mismatch (got input: [2, 5, 4, 3] , target: [2, 3, 3]"),
    ("nll_2d_target_rank", lambda t: _f(t).nll_loss(
        t.zeros(2, 5, 4, 3), t.zeros(2, 4, dtype=t.long)), RuntimeError,
     "only batches of spatial targets supported (3D tensors) but got targets of dimension: 2"),
    ("nll_0d_input", lambda t: _f(t).nll_loss(t.tensor(1.0), t.tensor(0)), ValueError,
     "Expected 1 or more dimensions (got 0)"),
    ("nll_1d_input_long_target", lambda t: _f(t).nll_loss(t.zeros(5), t.tensor([2, 3])),
     ValueError, "For 1D input, 1D target must have size 1, but got target size: 2"),
    ("ce_weight_size", lambda t: _f(t).cross_entropy(
        t.zeros(3, 5), t.tensor([1, 0, 4]), weight=t.ones(4)), RuntimeError,
     ("weight tensor should be defined either for all 5 classes or no classes but got weight "
      "tensor of shape: [4]")),
    ("nll_2d_weight_size", lambda t: _f(t).nll_loss(
        t.zeros(2, 3, 4, 5), t.zeros(2, 4, 5, dtype=t.long), weight=t.ones(2)), RuntimeError,
     "weight tensor should be defined either for all or no classes"),
    ("ce_weight_dtype", lambda t: _f(t).cross_entropy(
        t.zeros(3, 5, dtype=t.float64), t.zeros(3, dtype=t.long), weight=t.ones(5)),
     RuntimeError, "expected scalar type Double but found Float"),
    ("ce_weight_requires_grad", lambda t: _f(t).cross_entropy(
        t.zeros(3, 5), t.tensor([1, 2, 3]), weight=_req(t, 5)), RuntimeError,
     ("The function 'nll_loss_forward' is not differentiable with respect to argument 'weight'. "
      "This input cannot have requires_grad True.")),
    ("ce_prob_target_weight_size", lambda t: _f(t).cross_entropy(
        t.zeros(3, 5, 2), t.zeros(3, 5, 2), weight=t.ones(3)), RuntimeError,
     ("cross_entropy: weight tensor should be defined either for all 5 classes or no classes "
      "but got weight tensor of shape: [3]")),
    ("ce_prob_target_ignore_index", lambda t: _f(t).cross_entropy(
        t.zeros(3, 5), t.zeros(3, 5), ignore_index=1), RuntimeError,
     "ignore_index is not supported for floating point target"),
    ("ce_prob_target_int", lambda t: _f(t).cross_entropy(
        t.zeros(2, 3), t.zeros(2, 3, dtype=t.long)), RuntimeError,
     "Expected floating point type for target with class probabilities, got Long"),
    ("ce_label_smoothing", lambda t: _f(t).cross_entropy(
        t.zeros(3, 5), t.tensor([1, 0, 4]), label_smoothing=1.5), RuntimeError,
     "label_smoothing must be between 0.0 and 1.0. Got: 1.5"),
    ("ce_int_input", lambda t: _f(t).cross_entropy(t.zeros(2, 3, dtype=t.int32),
                                                   t.tensor([0, 1])), NotImplementedError,
     "\"log_softmax_lastdim_kernel_impl\" not implemented for 'Int'"),
    ("nll_long_input", lambda t: _f(t).nll_loss(t.zeros(2, 3, dtype=t.long), t.tensor([0, 1])),
     NotImplementedError, "\"nll_loss_out_frame\" not implemented for 'Long'"),
    ("ce_reduction", lambda t: _f(t).cross_entropy(t.zeros(3, 5), t.tensor([1, 0, 4]),
                                                   reduction="foo"), ValueError,
     "foo is not a valid value for reduction"),
    ("mse_reduction", lambda t: _f(t).mse_loss(t.zeros(3), t.zeros(3), reduction="avg"),
     ValueError, "avg is not a valid value for reduction"),
    ("mse_shape", lambda t: _f(t).mse_loss(t.zeros(3, 4), t.zeros(5, 4)), RuntimeError,
     "The size of tensor a (3) must match the size of tensor b (5) at non-singleton dimension 0"),
    ("mse_weight_size", lambda t: _f(t).mse_loss(t.zeros(3, 4), t.zeros(3, 4),
                                                 weight=t.zeros(4)), ValueError,
     "Weights and input must have the same size."),
    ("smooth_l1_beta", lambda t: _f(t).smooth_l1_loss(t.zeros(3), t.zeros(3), beta=-1.0),
     RuntimeError, "smooth_l1_loss does not support negative values for beta."),
    ("huber_delta", lambda t: _f(t).huber_loss(t.zeros(3), t.zeros(3), delta=0.0),
     RuntimeError, "huber_loss does not support non-positive values for delta."),
    ("bce_range", lambda t: _f(t).binary_cross_entropy(t.tensor([1.5, 0.5]),
                                                       t.tensor([1.0, 0.0])), RuntimeError,
     "all elements of input should be between 0 and 1"),
    ("bce_nan", lambda t: _f(t).binary_cross_entropy(t.tensor([float("nan"), 0.5]),
                                                     t.tensor([1.0, 0.0])), RuntimeError,
     "all elements of input should be between 0 and 1"),
    ("bce_size", lambda t: _f(t).binary_cross_entropy(t.tensor([0.5, 1.0]),
                                                      t.tensor([1.0, 0.0, 1.0])), ValueError,
     ("Using a target size (torch.Size([3])) that is different to the input size "
      "(torch.Size([2])) is deprecated. Please ensure they have the same size.")),
    ("bce_target_dtype", lambda t: _f(t).binary_cross_entropy(t.tensor([0.5, 1.0]),
                                                              t.tensor([1, 0])), RuntimeError,
     "Found dtype Long but expected Float"),
    ("bce_weight_broadcast", lambda t: _f(t).binary_cross_entropy(
        t.tensor([[0.5, 1.0]]), t.tensor([[1.0, 0.0]]), weight=t.tensor([1.0, 2, 3])),
     RuntimeError, ("Attempting to broadcast a dimension of length 3 at -1! Mismatching argument "
     "at index 1 had torch.Size([3]); but expected shape should be broadcastable to [1, 2]")),
    ("bce_weight_requires_grad", lambda t: _f(t).binary_cross_entropy(
        t.tensor([0.5]), t.tensor([1.0]), weight=_req(t, 1)), RuntimeError,
     ("The function 'binary_cross_entropy' is not differentiable with respect to argument "
      "'weight'. This input cannot have requires_grad True.")),
    ("bce_logits_size", lambda t: _f(t).binary_cross_entropy_with_logits(
        t.tensor([0.5, 1.0]), t.tensor([1.0, 0.0, 1.0])), ValueError,
     "Target size (torch.Size([3])) must be the same as input size (torch.Size([2]))"),
    ("bce_logits_long_target", lambda t: _f(t).binary_cross_entropy_with_logits(
        t.tensor([0.5, 1.0]), t.tensor([1, 0])), RuntimeError,
     "result type Float can't be cast to the desired output type Long"),
    ("bce_logits_pos_weight_size", lambda t: _f(t).binary_cross_entropy_with_logits(
        t.tensor([[0.5, 1.0]]), t.tensor([[1.0, 0.0]]), pos_weight=t.tensor([1.0, 2, 3])),
     RuntimeError,
     "The size of tensor a (3) must match the size of tensor b (2) at non-singleton dimension 1"),
    ("bce_logits_weight_size", lambda t: _f(t).binary_cross_entropy_with_logits(
        t.tensor([[0.5, 1.0]]), t.tensor([[1.0, 0.0]]), weight=t.tensor([1.0, 2, 3])),
     RuntimeError,
     "The size of tensor a (2) must match the size of tensor b (3) at non-singleton dimension 1"),
    ("bce_logits_pos_weight_requires_grad", lambda t: _f(t).binary_cross_entropy_with_logits(
        t.tensor([0.5]), t.tensor([1.0]), pos_weight=_req(t, 1)), RuntimeError,
     ("The function 'binary_cross_entropy_with_logits' is not differentiable with respect to "
      "argument 'pos_weight'. This input cannot have requires_grad True.")),
]


@pytest.mark.parametrize("fn, exc, message", [c[1:] for c in LOSS_CASES],
                         ids=[c[0] for c in LOSS_CASES])
def test_loss_errors(fn, exc, message):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(exc) as info:
            fn(disthook)
    assert type(info.value) is exc
    assert str(info.value) == message
