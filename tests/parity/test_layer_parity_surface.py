"""Issue 20's layers against torch 2.13 with the same weights (disthook's state_dict loaded
into torch): outputs, gradients of inputs and parameters, running statistics."""
import numpy as np
import pytest

import disthook
from parity.test_layer_parity import assert_close, copy_to_torch, run_both

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(0)
IMAGES = RNG.standard_normal((2, 4, 7, 6))
SEQUENCES = RNG.standard_normal((3, 4, 9))
VOLUMES = RNG.standard_normal((2, 3, 5, 6, 4))

MODULES = [
    ("elu", lambda nn: nn.ELU(alpha=0.7), SEQUENCES),
    ("softplus", lambda nn: nn.Softplus(beta=2, threshold=1.5), SEQUENCES),
    ("mish", lambda nn: nn.Mish(), SEQUENCES),
    ("hardswish", lambda nn: nn.Hardswish(), SEQUENCES * 3),
    ("group_norm", lambda nn: nn.GroupNorm(2, 4), IMAGES),
    ("group_norm_plain", lambda nn: nn.GroupNorm(4, 4, eps=1e-3, affine=False), SEQUENCES),
    ("group_norm_no_bias", lambda nn: nn.GroupNorm(1, 4, bias=False), IMAGES),
    ("conv_transpose2d", lambda nn: nn.ConvTranspose2d(4, 6, 3), IMAGES),
    ("conv_transpose2d_strided", lambda nn: nn.ConvTranspose2d(
        4, 6, (3, 2), stride=2, padding=1, output_padding=1, groups=2, dilation=(1, 2)), IMAGES),
    ("conv_transpose2d_unbatched", lambda nn: nn.ConvTranspose2d(4, 2, 2, bias=False),
     IMAGES[0]),
    ("conv_transpose1d", lambda nn: nn.ConvTranspose1d(4, 3, 4, stride=3, padding=2),
     SEQUENCES),
    ("max_pool3d", lambda nn: nn.MaxPool3d(2), VOLUMES),
    ("max_pool3d_padded", lambda nn: nn.MaxPool3d(3, 2, padding=1, ceil_mode=True), VOLUMES),
    ("avg_pool3d", lambda nn: nn.AvgPool3d(2, 1), VOLUMES),
    ("avg_pool3d_padded", lambda nn: nn.AvgPool3d((3, 2, 3), 2, padding=1,
                                                  count_include_pad=False), VOLUMES),
    ("pixel_shuffle", lambda nn: nn.PixelShuffle(2), IMAGES),
    ("pixel_unshuffle", lambda nn: nn.PixelUnshuffle(2), IMAGES[:, :, :6]),
    ("upsample", lambda nn: nn.Upsample(scale_factor=2), IMAGES),
    ("upsample_bilinear", lambda nn: nn.Upsample(size=(5, 9), mode="bilinear",
                                                 align_corners=True), IMAGES),
]


@pytest.mark.parametrize("make, x", [c[1:] for c in MODULES], ids=[c[0] for c in MODULES])
def test_module_matches_torch(make, x):
    run_both(make, x)


@pytest.mark.parametrize("make, x", [
    (lambda nn: nn.InstanceNorm1d(4), SEQUENCES),
    (lambda nn: nn.InstanceNorm1d(4, affine=True), SEQUENCES[0]),
    (lambda nn: nn.InstanceNorm2d(4, affine=True, track_running_stats=True), IMAGES),
    (lambda nn: nn.InstanceNorm2d(4, track_running_stats=True, momentum=0.3), IMAGES),
], ids=["1d", "1d_unbatched", "2d_tracked", "2d_tracked_no_affine"])
def test_instance_norm_train_steps_then_eval(make, x):
    dh_m, t_m = run_both(make, x, steps=3)
    dh_m.eval()
    t_m.eval()
    a = (x * 0.5 - 1).astype(np.float32)
    assert_close(dh_m(disthook.tensor(a)), t_m(torch.tensor(a)), "eval output")


def test_conv_transpose_output_size():
    x = IMAGES.astype(np.float32)
    dh_m, t_m = disthook.nn.ConvTranspose2d(4, 2, 3, stride=2), torch.nn.ConvTranspose2d(4, 2, 3,
                                                                                       stride=2)
    copy_to_torch(dh_m, t_m)
    a = dh_m(disthook.tensor(x), output_size=(16, 14))
    b = t_m(torch.tensor(x), output_size=(16, 14))
    assert a.shape == b.shape == (2, 2, 16, 14)
    assert_close(a, b)


@pytest.mark.parametrize("a, b, kwargs", [((5, 8), (5, 8), {}), ((2, 3, 4), (1, 3, 4),
                                                                 {"dim": -1, "eps": 1e-3})])
def test_cosine_similarity_matches_torch(a, b, kwargs):
    x1, x2 = RNG.standard_normal(a).astype(np.float32), RNG.standard_normal(b).astype(np.float32)
    outs, grads = [], []
    for lib in (disthook, torch):
        t1, t2 = lib.tensor(x1, requires_grad=True), lib.tensor(x2, requires_grad=True)
        y = lib.nn.CosineSimilarity(**kwargs)(t1, t2)
        (y * lib.tensor(np.arange(y.numel(), dtype=np.float32).reshape(tuple(y.shape)))).sum(
        ).backward()
        outs.append(y)
        grads.append((t1.grad, t2.grad))
    assert_close(outs[0], outs[1], "output")
    for g, h in zip(*grads):
        assert_close(g, h, "grad")


def test_lazy_linear_matches_torch_after_materialising():
    dh_m, t_m = disthook.nn.LazyLinear(3), torch.nn.LazyLinear(3)
    x = SEQUENCES.astype(np.float32)
    dh_m(disthook.tensor(x))
    t_m(torch.tensor(x))
    assert type(t_m).__name__ == type(dh_m).__name__ == "Linear"
    copy_to_torch(dh_m, t_m)
    run_both(lambda nn: dh_m if nn is disthook.nn else t_m, x)
