"""Every module class added for the whole ``torch.nn`` surface goes through
``Module.__call__``: forward pre-hooks, forward hooks and full backward (pre-)hooks fire on it
in torch's order, as on the others."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import disthook
from disthook import nn

torch = pytest.importorskip("torch")

X4 = np.random.default_rng(0).standard_normal((2, 4, 6, 6))
X5 = np.random.default_rng(1).standard_normal((2, 4, 4, 4, 4))
X3 = np.random.default_rng(2).standard_normal((2, 4, 6))
X2 = np.random.default_rng(3).standard_normal((3, 4))

# (class name, constructor arguments, input)
CASES = [
    ("ReLU6", (), X4), ("Hardtanh", (), X4), ("Threshold", (0.1, 0.0), X4), ("SELU", (), X4),
    ("CELU", (), X4), ("RReLU", (), X4), ("PReLU", (4,), X4), ("GLU", (1,), X4),
    ("Hardsigmoid", (), X4), ("Hardshrink", (), X4), ("Softshrink", (), X4),
    ("LogSigmoid", (), X4), ("Softsign", (), X4), ("Tanhshrink", (), X4), ("Softmin", (1,), X4),
    ("Softmax2d", (), X4),
    ("ZeroPad2d", (1,), X4), ("ConstantPad3d", (1, 2.0), X5), ("ReflectionPad1d", (2,), X3),
    ("ReplicationPad2d", (1,), X4), ("CircularPad3d", (1,), X5),
    ("Conv3d", (4, 2, 3), X5), ("ConvTranspose3d", (4, 2, 2), X5), ("BatchNorm3d", (4,), X5),
    ("InstanceNorm3d", (4,), X5), ("SyncBatchNorm", (4,), X4), ("LazyConv2d", (3, 3), X4),
    ("LazyBatchNorm2d", (), X4), ("AdaptiveMaxPool2d", (3,), X4),
    ("AdaptiveAvgPool3d", (2,), X5), ("LPPool2d", (2, 2), np.abs(X4)),
    ("FractionalMaxPool2d", (2,), X4, {"output_size": 3}), ("RMSNorm", ((6,),), X4),
    ("LocalResponseNorm", (3,), X4), ("CrossMapLRN2d", (3,), X4), ("Dropout2d", (), X4),
    ("AlphaDropout", (), X4), ("FeatureAlphaDropout", (), X4), ("ChannelShuffle", (2,), X4),
    ("Unfold", (2,), X4), ("UpsamplingNearest2d", (None, 2), X4),
    ("UpsamplingBilinear2d", (None, 2), X4),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_hooks_fire_on_new_modules(case):
    name, args, x = case[:3]
    kwargs = case[3] if len(case) > 3 else {}
    log = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        module = getattr(nn, name)(*args, **kwargs)
    module.register_forward_pre_hook(lambda m, inp: log.append("pre"))
    module.register_forward_hook(lambda m, inp, out: log.append("forward"))
    module.register_full_backward_pre_hook(lambda m, g: log.append("backward_pre"))
    module.register_full_backward_hook(lambda m, gi, go: log.append(
        ("backward", tuple(None if g is None else tuple(g.shape) for g in gi))))
    xd = disthook.tensor(x, dtype=disthook.float32, requires_grad=True)
    out = module(xd)
    out.sum().backward()
    assert log == ["pre", "forward", "backward_pre", ("backward", (tuple(x.shape),))]
    assert xd.grad is not None and xd.grad.shape == tuple(x.shape)


def test_hooks_on_two_input_and_loss_modules():
    log = []
    for module, inputs in [
        (nn.Bilinear(4, 4, 2), (X2, X2)), (nn.PairwiseDistance(), (X2, X2 + 1)),
        (nn.KLDivLoss(reduction="batchmean"), (X2, np.abs(X2))),
        (nn.TripletMarginLoss(), (X2, X2 + 1, X2 - 1)),
        (nn.GaussianNLLLoss(), (X2, X2 + 1, np.abs(X2) + 0.1)),
    ]:
        module.register_forward_hook(lambda m, inp, out: log.append(type(m).__name__))
        module.register_full_backward_hook(lambda m, gi, go: log.append(len(gi)))
        tensors = [disthook.tensor(a, dtype=disthook.float32, requires_grad=True)
                   for a in inputs]
        module(*tensors).sum().backward()
    assert log == ["Bilinear", 2, "PairwiseDistance", 2, "KLDivLoss", 2, "TripletMarginLoss", 3,
                   "GaussianNLLLoss", 3]
