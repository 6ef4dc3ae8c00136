"""``F.interpolate`` in 'bicubic' mode (timm's and DINO's resampling of a ViT's position
embeddings) and with ``antialias=True`` (torchvision's tensor ``Resize``), forward, gradient
and second order through check_op, against torch when it is installed."""
import pytest
from helpers import check_op, lib

import disthook

CASES = [
    ((1, 2, 5, 7), {"size": (9, 4), "mode": "bicubic"}),
    ((1, 2, 5, 7), {"size": (3, 11), "mode": "bicubic", "align_corners": True}),
    ((2, 1, 4, 4), {"scale_factor": 1.5, "mode": "bicubic"}),
    ((1, 2, 6, 5), {"scale_factor": (0.5, 2), "mode": "bicubic",
                    "recompute_scale_factor": True}),
    ((1, 2, 9, 8), {"size": (4, 3), "mode": "bilinear", "antialias": True}),
    ((1, 2, 9, 8), {"size": (4, 12), "mode": "bilinear", "antialias": True}),
    ((1, 2, 9, 8), {"size": (5, 3), "mode": "bicubic", "antialias": True}),
    ((1, 1, 7, 7), {"scale_factor": 0.4, "mode": "bicubic", "antialias": True,
                    "align_corners": True}),
]


@pytest.mark.parametrize("shape, kwargs", CASES)
def test_bicubic_and_antialiased_interpolation(shape, kwargs):
    check_op(lambda x: lib(x).nn.functional.interpolate(x, **kwargs), shape, double=True)


@pytest.mark.parametrize("kwargs, node", [
    ({"mode": "bicubic"}, "UpsampleBicubic2DBackward0"),
    ({"mode": "bilinear", "antialias": True}, "UpsampleBilinear2DAaBackward0"),
    ({"mode": "bicubic", "antialias": True}, "UpsampleBicubic2DAaBackward0"),
])
def test_the_nodes_are_named_as_torchs(kwargs, node):
    x = disthook.randn(1, 1, 4, 4, requires_grad=True)
    assert type(disthook.nn.functional.interpolate(x, size=(3, 2), **kwargs).grad_fn).__name__ \
        == node


@pytest.mark.parametrize("shape, kwargs, error, message", [
    ((1, 2, 5), {"size": 3, "mode": "bicubic"}, NotImplementedError,
     "Only 3D, 4D and 5D input Tensors supported (got 3D) for the modes"),
    ((1, 2, 5, 5), {"size": 3, "mode": "nearest", "antialias": True}, ValueError,
     "Anti-alias option is restricted to bilinear, bicubic, and lanczos modes"),
    ((1, 2, 3, 3, 3), {"size": 2, "mode": "bicubic", "antialias": True}, ValueError,
     "requires a 4-D tensor as input"),
])
def test_what_torch_refuses_is_refused_so(shape, kwargs, error, message):
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
        disthook.nn.functional.interpolate(disthook.randn(*shape), **kwargs)
