"""F.scaled_dot_product_attention, F.interpolate and nn.Upsample through check_op (numpy
reference, finite differences, torch), their errors, and attention's dropout."""
import math

import numpy as np
import pytest
from helpers import check_op, lib

import disthook
import disthook.nn.functional as F

try:
    import torch
except ImportError:
    torch = None


def nnf(x):
    return disthook.nn.functional if isinstance(x, disthook.Tensor) else torch.nn.functional


def np_attention(q, k, v, mask=None, causal=False, scale=None):
    w = q @ np.swapaxes(k, -1, -2) * (scale or 1 / math.sqrt(q.shape[-1]))
    L, S = w.shape[-2:]
    if causal:
        mask = np.tril(np.ones((L, S), bool))
    if mask is not None:
        w = np.where(mask, w, -np.inf) if mask.dtype == bool else w + mask
    e = np.exp(w - w.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True) @ v


# small feature sizes: every element of every input is a finite difference (twice over for
# the second order), and what is checked (batch and head dimensions, 4 queries on 5 keys for
# the masks, feature sizes that differ between keys and values) needs no more
Q, K, V = (2, 3, 4, 3), (2, 3, 5, 3), (2, 3, 5, 2)
BOOL_MASK = np.random.default_rng(3).random((4, 5)) > 0.3
BOOL_MASK[:, 0] = True  # every query keeps a key


# ---- attention -------------------------------------------------------------------------------

@pytest.mark.parametrize("shapes", [(Q, K, V), ((4, 3), (5, 3), (5, 2)), ((3, 4, 3), (3, 5, 3),
                                                                       (3, 5, 2))])
def test_attention(shapes):
    # torch records the last product as its folded bmm's view: no node name to match
    check_op(lambda q, k, v: nnf(q).scaled_dot_product_attention(q, k, v), *shapes,
             np_fn=np_attention, double=True, name=False)


def test_attention_scale_and_causal():
    check_op(lambda q, k, v: nnf(q).scaled_dot_product_attention(q, k, v, scale=0.3), Q, K, V,
             np_fn=lambda q, k, v: np_attention(q, k, v, scale=0.3), name=False)
    check_op(lambda q, k, v: nnf(q).scaled_dot_product_attention(q, k, v, is_causal=True),
             (2, 3, 5, 3), K, V, np_fn=lambda q, k, v: np_attention(q, k, v, causal=True),
             double=True, name=False)


def test_attention_masks():
    check_op(lambda q, k, v: nnf(q).scaled_dot_product_attention(
        q, k, v, attn_mask=lib(q).tensor(BOOL_MASK)), Q, K, V, name=False, double=True,
        np_fn=lambda q, k, v: np_attention(q, k, v, BOOL_MASK))
    check_op(lambda q, k, v, m: nnf(q).scaled_dot_product_attention(q, k, v, attn_mask=m),
             Q, K, V, (3, 4, 5), np_fn=lambda q, k, v, m: np_attention(q, k, v, m), name=False)


def test_attention_grouped_query_heads():
    check_op(lambda q, k, v: nnf(q).scaled_dot_product_attention(q, k, v, enable_gqa=True),
             (2, 4, 3, 3), (2, 2, 5, 3), (2, 2, 5, 2), name=False, double=True)


def test_attention_query_with_every_key_masked_gives_zeros():
    mask = BOOL_MASK.copy()
    mask[1] = False
    check_op(lambda q, k, v: nnf(q).scaled_dot_product_attention(
        q, k, v, attn_mask=lib(q).tensor(mask)), Q, K, V, name=False)
    out = F.scaled_dot_product_attention(disthook.randn(Q), disthook.randn(K), disthook.randn(V),
                                         attn_mask=disthook.tensor(mask))
    assert (out[:, :, 1] == 0).all()


def test_attention_dropout_uses_disthooks_generator():
    q, k, v = (disthook.randn(s) for s in (Q, K, V))
    disthook.manual_seed(5)
    a = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    disthook.manual_seed(5)
    b = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    assert a.equal(b)
    assert not a.equal(F.scaled_dot_product_attention(q, k, v))
    zero = F.scaled_dot_product_attention(q, k, v, dropout_p=1.0)
    assert (zero == 0).all()
    # kept weights are scaled by 1 / (1 - p): the mean output is unchanged
    big_q, big_k = disthook.zeros(1, 1, 1, 4), disthook.zeros(1, 1, 2000, 4)
    ones = disthook.ones(1, 1, 2000, 3)
    out = F.scaled_dot_product_attention(big_q, big_k, ones, dropout_p=0.25)
    assert abs(out.mean().item() - 1.0) < 0.05


ATTENTION_ERRORS = [
    ("causal_and_mask", lambda t, q, k, v: t.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=t.ones(4, 5, dtype=t.bool), is_causal=True), RuntimeError,
     "_scaled_dot_product_attention: Explicit attn_mask should not be set when is_causal=True"),
    ("key_features", lambda t, q, k, v: t.nn.functional.scaled_dot_product_attention(
        q, k[..., :7], v), RuntimeError,
     "Expected size for first two dimensions of batch2 tensor to be: [6, 8] but got: [6, 7]."),
    ("value_positions", lambda t, q, k, v: t.nn.functional.scaled_dot_product_attention(
        q, k, v[:, :, :4]), RuntimeError,
     "Expected size for first two dimensions of batch2 tensor to be: [6, 5] but got: [6, 4]."),
    ("dtypes", lambda t, q, k, v: t.nn.functional.scaled_dot_product_attention(
        q, k, v.double()), RuntimeError,
     ("Expected query, key, and value to have the same dtype, but got query.dtype: float "
     "key.dtype: float and value.dtype: double instead.")),
    ("mask_dtype", lambda t, q, k, v: t.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=t.ones(4, 5, dtype=t.int64)), RuntimeError,
     ("Expected attn_mask dtype to be bool or float or to match query dtype, but got "
     "attn_mask.dtype: long int and  query.dtype: float instead.")),
    ("mask_shape", lambda t, q, k, v: t.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=t.ones(3, 5)), RuntimeError,
     "The size of tensor a (4) must match the size of tensor b (3) at non-singleton dimension 2"),
    ("one_dim", lambda t, q, k, v: t.nn.functional.scaled_dot_product_attention(
        q[0, 0, 0], k[0, 0], v[0, 0]), RuntimeError,
     ("Expected query, key, and value to all be  at least 2 dimensional, but got query.dim: 1 "
     "key.dim: 2 and value.dim: 2 instead.")),
    ("dropout", lambda t, q, k, v: t.nn.functional.scaled_dot_product_attention(
        q, k, v, dropout_p=1.5), RuntimeError,
     "dropout probability has to be between 0 and 1, but got 1.5"),
]


ERROR_SHAPES = (2, 3, 4, 8), (2, 3, 5, 8), (2, 3, 5, 6)  # torch's messages name these sizes


def _raises(lib_, fn, exc, message):
    args = [lib_.ones(s) for s in ERROR_SHAPES]
    with pytest.raises(exc) as info:
        fn(lib_, *args)
    assert type(info.value) is exc and str(info.value) == message


@pytest.mark.parametrize("fn, exc, message", [c[1:] for c in ATTENTION_ERRORS],
                         ids=[c[0] for c in ATTENTION_ERRORS])
def test_attention_errors_are_torchs(fn, exc, message):
    _raises(disthook, fn, exc, message)
    if torch is not None:
        _raises(torch, fn, exc, message)


# ---- interpolate ------------------------------------------------------------------------------

@pytest.mark.parametrize("shape, kwargs", [
    ((1, 2, 5, 7), {"scale_factor": 2}),
    ((1, 2, 5, 7), {"size": (3, 9)}),
    ((1, 2, 5, 7), {"scale_factor": 1.7}),
    ((1, 2, 5, 7), {"scale_factor": (0.5, 1.3)}),
    ((2, 3, 6), {"size": 4}),
    ((2, 3, 6), {"scale_factor": 2.5}),
    ((1, 1, 3, 4, 5), {"size": (2, 5, 7)}),
    ((1, 2, 5, 7), {"size": (8, 3), "mode": "nearest-exact"}),
    ((1, 2, 5, 7), {"size": (3, 9), "mode": "bilinear"}),
    ((1, 2, 5, 7), {"size": (3, 9), "mode": "bilinear", "align_corners": True}),
    ((1, 2, 5, 7), {"scale_factor": 1.7, "mode": "bilinear"}),
    ((1, 2, 5, 7), {"scale_factor": 2, "mode": "bilinear", "align_corners": True}),
    ((1, 2, 5, 7), {"scale_factor": 0.6, "mode": "bilinear", "recompute_scale_factor": True}),
    ((2, 3, 6), {"size": 11, "mode": "linear"}),
    ((2, 3, 6), {"size": 1, "mode": "linear", "align_corners": True}),
    ((1, 1, 3, 4, 5), {"size": (2, 5, 7), "mode": "trilinear"}),
    ((1, 2, 5, 7), {"size": (3, 4), "mode": "area"}),
    ((1, 2, 5, 7), {"scale_factor": 0.5, "mode": "area"}),
    ((2, 3, 7), {"size": 3, "mode": "area"}),
])
def test_interpolate(shape, kwargs):
    check_op(lambda x: nnf(x).interpolate(x, **kwargs), shape, double=True)


def test_upsample_layer():
    check_op(lambda x: (disthook.nn if isinstance(x, disthook.Tensor) else torch.nn).Upsample(
        scale_factor=2, mode="bilinear")(x), (1, 2, 3, 4))
    assert repr(disthook.nn.Upsample(scale_factor=2)) == "Upsample(scale_factor=2.0, mode='nearest')"
    assert repr(disthook.nn.Upsample(size=(3, 4), mode="bilinear", align_corners=True)) == \
        "Upsample(size=(3, 4), mode='bilinear')"


INTERPOLATE_ERRORS = [
    ("no_size", lambda F_, x: F_.interpolate(x), ValueError,
     "either size or scale_factor should be defined"),
    ("both", lambda F_, x: F_.interpolate(x, size=3, scale_factor=2), ValueError,
     "only one of size or scale_factor should be defined"),
    ("align_nearest", lambda F_, x: F_.interpolate(x, size=3, align_corners=True), ValueError,
     ("align_corners option can only be set with the interpolating modes: linear | bilinear | "
     "bicubic | trilinear")),
    ("bilinear_3d", lambda F_, x: F_.interpolate(x[0], size=3, mode="bilinear"),
     NotImplementedError, "Got 3D input, but bilinear mode needs 4D input"),
    ("size_dims", lambda F_, x: F_.interpolate(x, size=(3, 4, 5)), ValueError,
     ("Input and output must have the same number of spatial dimensions, but got input with "
     "spatial dimensions of [5, 7] and output size of (3, 4, 5). Please provide input tensor "
     "in (N, C, d1, d2, ...,dK) format and output size in (o1, o2, ...,oK) format.")),
    ("mode", lambda F_, x: F_.interpolate(x, size=3, mode="bicubicx"), NotImplementedError,
     ("Input Error: Only 3D, 4D and 5D input Tensors supported (got 4D) for the modes: nearest "
     "| linear | bilinear | bicubic | trilinear | lanczos | area | nearest-exact (got "
     "bicubicx)")),
    ("zero", lambda F_, x: F_.interpolate(x, size=0), RuntimeError,
     ("Input and output sizes should be greater than 0, but got input (H: 5, W: 7) output "
     "(H: 0, W: 0)")),
]


@pytest.mark.parametrize("fn, exc, message", [c[1:] for c in INTERPOLATE_ERRORS],
                         ids=[c[0] for c in INTERPOLATE_ERRORS])
def test_interpolate_errors_are_torchs(fn, exc, message):
    for lib_ in (disthook, torch) if torch is not None else (disthook,):
        with pytest.raises(exc) as info:
            fn(lib_.nn.functional, lib_.ones(1, 2, 5, 7))
        assert type(info.value) is exc and str(info.value) == message


def test_bench_attention_workload_runs():
    from disthook.bench import engine

    out = engine.attention(disthook)()
    assert tuple(out.shape) == engine.ATTENTION_SHAPE
    assert any(case[1] is engine.attention for case in engine.CASES["nn"])
