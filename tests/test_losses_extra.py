"""The losses added for the whole ``torch.nn`` surface, functional and module forms: values
and gradients against torch (float64) and finite differences."""
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
SIGNS = np.sign(RNG.standard_normal((4, 5)))
ROW_SIGNS = np.array([1.0, -1.0, -1.0, 1.0])
CLASSES = np.array([0, 1, 4, 2])
LABELS = np.array([[0, 3, -1, 1, 1], [4, -1, 0, 0, 0], [-1, 0, 0, 0, 0], [0, 1, 2, 3, 4]])
COUNTS = np.abs(SIGNS) * np.array([0, 1, 2, 3, 5])


def const(x, array):
    """A constant of the library ``x`` belongs to."""
    return lib(x).tensor(array)


REDUCTIONS = ["none", "mean", "sum"]


def _f(x):
    return lib(x).nn.functional


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("name, fn", [
    ("margin_ranking", lambda x, y, r: _f(x).margin_ranking_loss(x, y, const(x, SIGNS), 0.3,
                                                                 reduction=r)),
    ("hinge", lambda x, y, r: _f(x).hinge_embedding_loss(x, const(x, SIGNS), 0.7, reduction=r)),
    ("soft_margin", lambda x, y, r: _f(x).soft_margin_loss(x, const(x, SIGNS), reduction=r)),
    ("cosine_embedding", lambda x, y, r: _f(x).cosine_embedding_loss(
        x, y, const(x, ROW_SIGNS), 0.1, reduction=r)),
    ("multi_margin", lambda x, y, r: _f(x).multi_margin_loss(x, const(x, CLASSES), reduction=r)),
    ("multi_margin_p2", lambda x, y, r: _f(x).multi_margin_loss(
        x, const(x, CLASSES), p=2, margin=0.5, weight=const(x, np.arange(1.0, 6.0)),
        reduction=r)),
    ("multilabel_margin", lambda x, y, r: _f(x).multilabel_margin_loss(
        x, const(x, LABELS), reduction=r)),
    ("multilabel_soft_margin", lambda x, y, r: _f(x).multilabel_soft_margin_loss(
        x, const(x, (SIGNS > 0) * 1.0), weight=const(x, np.arange(1.0, 6.0)), reduction=r)),
    ("poisson_log", lambda x, y, r: _f(x).poisson_nll_loss(x, const(x, COUNTS), full=True,
                                                           reduction=r)),
    ("poisson", lambda x, y, r: _f(x).poisson_nll_loss(x.abs() + 0.1, const(x, COUNTS),
                                                       log_input=False, reduction=r)),
    ("gaussian", lambda x, y, r: _f(x).gaussian_nll_loss(x, y, x * x + 0.1, full=True,
                                                         reduction=r)),
    ("gaussian_one_var", lambda x, y, r: _f(x).gaussian_nll_loss(x, y, (x * x)[:, :1] + 0.1,
                                                                 reduction=r)),
    ("gaussian_row_var", lambda x, y, r: _f(x).gaussian_nll_loss(x, y, (x * x).sum(1) + 0.1,
                                                                 reduction=r)),
    ("triplet", lambda x, y, r: _f(x).triplet_margin_loss(x, y, 0.5 * x + y, reduction=r)),
    ("triplet_swap_p1", lambda x, y, r: _f(x).triplet_margin_loss(x, y, 0.5 * x + y, 2.0, 1,
                                                                  swap=True, reduction=r)),
    ("triplet_distance", lambda x, y, r: _f(x).triplet_margin_with_distance_loss(
        x, y, y - x, distance_function=lambda a, b: 1 - _f(a).cosine_similarity(a, b),
        swap=True, reduction=r)),
    ("kl_div", lambda x, y, r: _f(x).kl_div(x.log_softmax(1), y.softmax(1), reduction=r)),
    ("kl_div_log", lambda x, y, r: _f(x).kl_div(x, y, reduction=r, log_target=True)),
])
def test_loss(name, fn, reduction):
    # (torch has no second derivative of the multi-margin losses: first order only there)
    double = ("multi" not in name or "soft" in name) and reduction == "mean"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # kl_div's 'mean' warning
        check_op(lambda x, y: fn(x, y, reduction), (4, 5), (4, 5), double=double,
                 fd_atol=1e-4, name=reduction != "none")


def test_kl_div_batchmean_and_zero_targets():
    target = np.abs(RNG.standard_normal((3, 4)))
    target[0, 1] = 0.0
    check_op(lambda x: _f(x).kl_div(x, const(x, target), reduction="batchmean"), (3, 4),
             double=True)
    with pytest.warns(UserWarning, match="'batchmean' divides only by the batch size"):
        F.kl_div(disthook.randn(2, 3), disthook.rand(2, 3))


def test_distances():
    check_op(lambda a, b: _f(a).pairwise_distance(a, b), (4, 5), (4, 5), double=True, name=False)
    check_op(lambda a, b: _f(a).pairwise_distance(a, b, 3.0, keepdim=True), (4, 5), (1, 5),
             name=False)
    for p in (2.0, 1.0, 3.0, 0.5):
        check_op(lambda x, p=p: _f(x).pdist(x, p), (5, 3), low=-3, high=3)


def test_margin_losses_refuse_a_second_derivative_as_torch():
    for fn in (lambda x: F.multi_margin_loss(x, disthook.tensor(CLASSES)),
               lambda x: F.multilabel_margin_loss(x, disthook.tensor(LABELS)),
               lambda x: F.pdist(x).sum()):
        x = disthook.randn(4, 5, requires_grad=True)
        (g,) = disthook.autograd.grad(fn(x), x, create_graph=True)
        with pytest.raises(RuntimeError, match="derivative for .* is not implemented"):
            (g * g).sum().backward()


@pytest.mark.parametrize("call, error, match", [
    (lambda: F.margin_ranking_loss(disthook.randn(3), disthook.randn(3), disthook.ones(1, 3)),
     RuntimeError, "All input tensors should have same dimension"),
    (lambda: F.multi_margin_loss(disthook.randn(2, 3), disthook.tensor([0, 3])), RuntimeError,
     "target out of range"),
    (lambda: F.multi_margin_loss(disthook.randn(2, 3), disthook.tensor([0, 1]), p=3),
     ValueError, "only p == 1 and p == 2 supported"),
    (lambda: F.gaussian_nll_loss(disthook.randn(2, 3), disthook.randn(2, 3), disthook.ones(3)),
     ValueError, "var is of incorrect size"),
    (lambda: F.gaussian_nll_loss(disthook.randn(2, 3), disthook.randn(2, 3), -disthook.ones(2, 3)),
     ValueError, "var has negative entry"),
    (lambda: F.triplet_margin_loss(disthook.randn(2, 3), disthook.randn(3), disthook.randn(3)),
     RuntimeError, "anchor 2D, positive 1D, and negative 1D inputs"),
    (lambda: F.pdist(disthook.randn(2, 3, 4)), RuntimeError, "pdist only supports 2D tensors"),
    (lambda: F.kl_div(disthook.randn(2), disthook.randn(2), reduction="avg"), ValueError,
     "avg is not a valid value for reduction"),
])
def test_loss_errors_are_torchs(call, error, match):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        with pytest.raises(error, match=match):
            call()


# ---- CTC ----------------------------------------------------------------------------------------

CTC_TARGETS = np.array([[1, 1, 3, 2], [4, 2, 2, 0], [3, 1, 0, 0]])
CTC_INPUT_LENGTHS = [9, 7, 5]
CTC_TARGET_LENGTHS = [4, 3, 2]


# each case checks the gradient by finite differences (135 inputs, two CTC passes each):
# the default run keeps a slice that takes every reduction and both target layouts
@pytest.mark.parametrize("concatenated, reduction", product([False, True], REDUCTIONS))
def test_ctc_loss(reduction, concatenated):
    targets = np.concatenate([CTC_TARGETS[n, :k] for n, k in enumerate(CTC_TARGET_LENGTHS)]) \
        if concatenated else CTC_TARGETS
    check_op(lambda x: _f(x).ctc_loss(x.log_softmax(2), const(x, targets),
                                      const(x, CTC_INPUT_LENGTHS), const(x, CTC_TARGET_LENGTHS),
                                      reduction=reduction), (9, 3, 5), fd_atol=1e-4,
             name=reduction != "none")


def test_ctc_loss_gradient_of_log_probs_is_torchs_and_impossible_alignments():
    logits = RNG.standard_normal((9, 3, 5))
    log_probs = logits - np.log(np.exp(logits).sum(2, keepdims=True))
    # torch's gradient for the log-probabilities themselves (exp(lp) - occupancy)
    x = disthook.tensor(log_probs, requires_grad=True)
    t = torch.tensor(log_probs, requires_grad=True)
    F.ctc_loss(x, disthook.tensor(CTC_TARGETS), CTC_INPUT_LENGTHS, CTC_TARGET_LENGTHS).backward()
    torch.nn.functional.ctc_loss(t, torch.tensor(CTC_TARGETS), CTC_INPUT_LENGTHS,
                                 CTC_TARGET_LENGTHS).backward()
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), atol=1e-10)
    # a target longer than its frames allow: infinite, or zero with zero_infinity
    short = [2, 7, 5]
    for zero_infinity in (False, True):
        ours = F.ctc_loss(disthook.tensor(log_probs), disthook.tensor(CTC_TARGETS), short,
                          CTC_TARGET_LENGTHS, reduction="none", zero_infinity=zero_infinity)
        theirs = torch.nn.functional.ctc_loss(torch.tensor(log_probs), torch.tensor(CTC_TARGETS),
                                              short, CTC_TARGET_LENGTHS, reduction="none",
                                              zero_infinity=zero_infinity)
        np.testing.assert_allclose(ours.numpy(), theirs.numpy())
    # unbatched
    ours = F.ctc_loss(disthook.tensor(log_probs[:, 0]), disthook.tensor(CTC_TARGETS[0]), [9], [4])
    theirs = torch.nn.functional.ctc_loss(torch.tensor(log_probs[:, 0]),
                                          torch.tensor(CTC_TARGETS[0]), [9], [4])
    np.testing.assert_allclose(ours.item(), theirs.item())


# ---- the loss modules -----------------------------------------------------------------------------

@pytest.mark.parametrize("name, args, kwargs, inputs", [
    ("KLDivLoss", (), {"reduction": "batchmean"}, lambda m, x, y: (x.log_softmax(1),
                                                                     y.softmax(1))),
    ("MarginRankingLoss", (0.2,), {}, lambda m, x, y: (x, y, m.tensor(SIGNS))),
    ("HingeEmbeddingLoss", (), {"reduction": "sum"}, lambda m, x, y: (x, m.tensor(SIGNS))),
    ("CosineEmbeddingLoss", (0.1,), {}, lambda m, x, y: (x, y, m.tensor(ROW_SIGNS))),
    ("SoftMarginLoss", (), {}, lambda m, x, y: (x, m.tensor(SIGNS))),
    ("MultiMarginLoss", (2, 0.5), {}, lambda m, x, y: (x, m.tensor(CLASSES))),
    ("MultiLabelMarginLoss", (), {}, lambda m, x, y: (x, m.tensor(LABELS))),
    ("MultiLabelSoftMarginLoss", (), {}, lambda m, x, y: (x, m.tensor((SIGNS > 0) * 1.0))),
    ("PoissonNLLLoss", (), {"full": True}, lambda m, x, y: (x, m.tensor(COUNTS))),
    ("GaussianNLLLoss", (), {"full": True}, lambda m, x, y: (x, y, x * x + 0.5)),
    ("TripletMarginLoss", (), {"swap": True}, lambda m, x, y: (x, y, x + 0.5 * y)),
    ("TripletMarginWithDistanceLoss", (), {"margin": 0.5}, lambda m, x, y: (x, y, x + y)),
    ("NLLLoss2d", (), {}, lambda m, x, y: (x.log_softmax(1), m.tensor(CLASSES))),
    ("CTCLoss", (), {}, lambda m, x, y: (
        x.reshape(2, 2, 5).log_softmax(2), m.tensor([[1, 2], [3, 0]]), [2, 2], [2, 1])),
])
def test_loss_modules(name, args, kwargs, inputs):
    ours = getattr(nn, name)(*args, **kwargs)
    theirs = getattr(torch.nn, name)(*args, **kwargs)
    assert repr(ours) == repr(theirs)
    x, y = RNG.standard_normal((4, 5)), RNG.standard_normal((4, 5))
    check_op(lambda a, b: (ours if isinstance(a, disthook.Tensor) else theirs)(
        *inputs(lib(a), a, b)), x, y, name=name != "TripletMarginWithDistanceLoss")


def test_linear_cross_entropy():
    weight, bias = RNG.standard_normal((6, 5)), RNG.standard_normal(6)
    target = np.array([0, 5, 2, 3])
    check_op(lambda x, w, b: _f(x).linear_cross_entropy(x, w, const(x, target), linear_bias=b,
                                                        label_smoothing=0.1), (4, 5), weight,
             bias)
    k_weight = RNG.standard_normal((3, 2, 5))  # 3 classes at each of 2 positions
    k_target = np.array([[0, 2], [1, 1], [2, 0], [0, 0]])
    check_op(lambda x, w: _f(x).linear_cross_entropy(x, w, const(x, k_target),
                                                     reduction="sum"), (4, 5), k_weight)
    ours = nn.LinearCrossEntropyLoss(5, 3, out_features=(2,), bias=True)
    theirs = torch.nn.LinearCrossEntropyLoss(5, 3, out_features=(2,), bias=True)
    assert repr(ours) == repr(theirs)
    ours.load_state_dict({k: disthook.tensor(v.detach().numpy().copy())
                          for k, v in theirs.state_dict().items()})
    x = RNG.standard_normal((4, 5)).astype(np.float32)
    np.testing.assert_allclose(ours(disthook.tensor(x), disthook.tensor(k_target)).item(),
                               theirs(torch.tensor(x), torch.tensor(k_target)).item(), rtol=1e-5)


def test_adaptive_log_softmax_with_loss():
    ours = nn.AdaptiveLogSoftmaxWithLoss(8, 10, [3, 6], div_value=2.0, head_bias=True).double()
    theirs = torch.nn.AdaptiveLogSoftmaxWithLoss(8, 10, [3, 6], div_value=2.0,
                                                 head_bias=True).double()
    assert repr(ours) == repr(theirs)
    ours.load_state_dict({k: disthook.tensor(v.detach().numpy().copy())
                          for k, v in theirs.state_dict().items()})
    x = RNG.standard_normal((7, 8))
    target = np.array([0, 4, 9, 2, 7, 5, 1])
    xd, xt = disthook.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    out, loss = ours(xd, disthook.tensor(target))
    t_out, t_loss = theirs(xt, torch.tensor(target))
    loss.backward()
    t_loss.backward()
    np.testing.assert_allclose(out.detach().numpy(), t_out.detach().numpy(), rtol=1e-10)
    np.testing.assert_allclose(xd.grad.numpy(), xt.grad.numpy(), rtol=1e-9, atol=1e-12)
    for p, q in zip(ours.parameters(), theirs.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(ours.log_prob(disthook.tensor(x)).detach().numpy(),
                               theirs.log_prob(torch.tensor(x)).detach().numpy(), rtol=1e-10)
    np.testing.assert_array_equal(ours.predict(disthook.tensor(x)).numpy(),
                                  theirs.predict(torch.tensor(x)).numpy())
    with pytest.raises(RuntimeError, match=r"Target values should be in \[0, 9\]"):
        ours(disthook.tensor(x), disthook.tensor([0, 1, 2, 3, 4, 5, 10]))
    with pytest.raises(ValueError, match="cutoffs should be a sequence of unique"):
        nn.AdaptiveLogSoftmaxWithLoss(8, 10, [6, 3])
