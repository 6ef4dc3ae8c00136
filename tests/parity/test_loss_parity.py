"""Losses under torch: the error cases of test_losses.py are torch's own, and the loss
modules give torch's numbers, gradients and printed grad_fn in float32."""
import re
import warnings

import numpy as np
import pytest
from test_losses import LOSS_CASES

import disthook

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("fn, exc, message", [c[1:] for c in LOSS_CASES],
                         ids=[c[0] for c in LOSS_CASES])
def test_torch_raises_the_same(fn, exc, message):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(Exception) as info:
            fn(torch)
    assert type(info.value) is exc
    assert str(info.value) == message


RNG = np.random.default_rng(7)
LOGITS = RNG.standard_normal((6, 4, 3)).astype(np.float32) * 3
CLASSES = RNG.integers(0, 4, (6, 3))
CLASSES[0, 0] = CLASSES[2, 1] = -100
CLASS_WEIGHT = RNG.uniform(0.1, 2, 4).astype(np.float32)
PROBS = RNG.uniform(0.01, 0.99, (6, 4)).astype(np.float32)
TARGETS = RNG.uniform(0, 1, (6, 4)).astype(np.float32)

# (id, module factory of the torch-like module, input, target)
MODULES = [
    ("ce", lambda t: t.nn.CrossEntropyLoss(), LOGITS[:, :, 0], CLASSES[:, 0]),
    ("ce_weight_ignore", lambda t: t.nn.CrossEntropyLoss(weight=t.tensor(CLASS_WEIGHT)),
     LOGITS, CLASSES),
    ("ce_smoothing_sum", lambda t: t.nn.CrossEntropyLoss(
        weight=t.tensor(CLASS_WEIGHT), label_smoothing=0.15, reduction="sum"), LOGITS, CLASSES),
    ("ce_none", lambda t: t.nn.CrossEntropyLoss(reduction="none", ignore_index=2), LOGITS,
     np.where(CLASSES < 0, 2, CLASSES)),
    ("ce_probs", lambda t: t.nn.CrossEntropyLoss(label_smoothing=0.1), LOGITS[:, :, 0],
     PROBS / PROBS.sum(1, keepdims=True)),
    ("nll", lambda t: t.nn.NLLLoss(weight=t.tensor(CLASS_WEIGHT)), LOGITS, CLASSES),
    ("bce", lambda t: t.nn.BCELoss(weight=t.tensor(CLASS_WEIGHT)), PROBS, TARGETS),
    ("bce_logits", lambda t: t.nn.BCEWithLogitsLoss(pos_weight=t.tensor(CLASS_WEIGHT)),
     LOGITS[:, :, 0], TARGETS),
    ("smooth_l1", lambda t: t.nn.SmoothL1Loss(beta=0.7), LOGITS, LOGITS[::-1].copy()),
    ("huber", lambda t: t.nn.HuberLoss(delta=0.7, reduction="sum"), LOGITS,
     LOGITS[::-1].copy()),
    ("mse", lambda t: t.nn.MSELoss(), LOGITS, LOGITS[::-1].copy()),
    ("l1", lambda t: t.nn.L1Loss(reduction="none"), LOGITS, LOGITS[::-1].copy()),
]


def _run(lib, make, x, y):
    xt = lib.tensor(x, requires_grad=True)
    loss = make(lib)(xt, lib.tensor(y))
    loss.sum().backward()
    return loss, xt.grad


@pytest.mark.parametrize("make, x, y", [m[1:] for m in MODULES], ids=[m[0] for m in MODULES])
def test_loss_modules_match_torch_in_float32(make, x, y):
    loss, grad = _run(disthook, make, x, y)
    t_loss, t_grad = _run(torch, make, x, y)
    assert str(loss.dtype) == str(t_loss.dtype) == "torch.float32"
    assert type(loss.grad_fn).__name__ == type(t_loss.grad_fn).__name__
    np.testing.assert_allclose(loss.detach().numpy(), t_loss.detach().numpy(), rtol=2e-6,
                               atol=2e-6)
    np.testing.assert_allclose(grad.numpy(), t_grad.numpy(), rtol=2e-6, atol=1e-7)


def test_size_warning_is_torchs():
    for lib in (torch, disthook):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            lib.nn.functional.mse_loss(lib.ones(3, 4), lib.zeros(4))
            lib.nn.MSELoss(size_average=False)
        got = [(w.category, str(w.message)) for w in caught]
        assert got == [
            (UserWarning, ("Using a target size (torch.Size([4])) that is different to the input "
                           "size (torch.Size([3, 4])). This will likely lead to incorrect results "
                           "due to broadcasting. Please ensure they have the same size.")),
            (UserWarning, ("size_average and reduce args will be deprecated, please use "
                           "reduction='sum' instead.")),
        ], lib.__name__


def test_module_reprs_are_torchs():
    for name in ("CrossEntropyLoss", "NLLLoss", "BCELoss", "BCEWithLogitsLoss", "SmoothL1Loss",
                 "HuberLoss", "MSELoss", "L1Loss"):
        assert repr(getattr(disthook.nn, name)()) == repr(getattr(torch.nn, name)())
    assert re.fullmatch(r"CrossEntropyLoss\(\)", repr(torch.nn.CrossEntropyLoss()))
