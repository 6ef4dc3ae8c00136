"""``torch.nn.attention.flex_attention``: score and mask functions as modded-nanogpt, gpt-fast
and torchtune write them (causal, sliding window, packed documents, ALiBi, soft-capping, GQA),
forward against torch's (torch has no backward for it on the CPU), and gradients against
finite differences and against the same attention written with plain torch ops."""
import numpy as np
import pytest
from helpers import check_op, lib

import disthook
from disthook.nn.attention import flex_attention as fa

DOC = [0, 0, 1, 1, 1, 2]  # three documents packed in one sequence of 6


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def window(b, h, q_idx, kv_idx):
    return q_idx - kv_idx <= 2


def first_row_sees_nothing(b, h, q_idx, kv_idx):
    return (q_idx > 0) & (kv_idx <= q_idx + b)


def mods(lib_):
    doc = lib_.tensor(DOC)
    bias = lib_.tensor([0.5, -0.25, 0.125, 1.0], dtype=lib_.float64)

    def documents(b, h, q_idx, kv_idx):
        return (doc[q_idx] == doc[kv_idx]) & (q_idx >= kv_idx)

    def alibi(score, b, h, q_idx, kv_idx):
        return score + bias[h] * (kv_idx - q_idx) + lib_.where(q_idx == kv_idx, 0.5, 0.0)

    def softcap(score, b, h, q_idx, kv_idx):
        return 3.0 * lib_.tanh(score / 3.0)

    return documents, alibi, softcap


def run(lib_, flex, arrays, case):
    q, k, v = (lib_.from_numpy(a.copy()) for a in arrays)
    documents, alibi, softcap = mods(lib_)
    mask_mod, score_mod, kw = {
        "causal": (causal, None, {}),
        "window_and_causal": (flex.and_masks(causal, window), softcap, {}),
        "documents_alibi_gqa": (documents, alibi, {"enable_gqa": True, "scale": 0.3}),
        "empty_rows_lse": (first_row_sees_nothing, alibi, {"enable_gqa": True,
                                                           "return_lse": True}),
        "no_mask": (None, softcap, {}),
    }[case]
    B = 2 if case == "empty_rows_lse" else None
    block_mask = None if mask_mod is None else flex.create_block_mask(mask_mod, B, None, 6, 6,
                                                                      device="cpu")
    if not kw.get("enable_gqa"):
        k, v = k[:, :4], v[:, :4]
    out = flex.flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask, **kw)
    return [o.numpy() for o in (out if isinstance(out, tuple) else (out,))]


CASES = ["causal", "window_and_causal", "documents_alibi_gqa", "empty_rows_lse", "no_mask"]


def inputs():
    rng = np.random.default_rng(0)
    q = rng.standard_normal((2, 4, 6, 3))
    kv = rng.standard_normal((2, 8, 6, 3))
    return q, kv[:, :4].copy(), kv[:, 4:].copy()


@pytest.mark.parametrize("case", CASES)
def test_forward_is_torch_s(case):
    torch_ = pytest.importorskip("torch")
    from torch.nn.attention import flex_attention as tfa

    q, k, v = inputs()
    gqa = case in ("documents_alibi_gqa", "empty_rows_lse")
    arrays = (q, k[:, :2].copy(), v[:, :2].copy()) if gqa else (q, k, v)
    got = run(disthook, fa, arrays, case)
    with torch_.no_grad():
        want = run(torch_, tfa, arrays, case)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)
    if case == "empty_rows_lse":
        assert np.all(got[0][:, :, 0] == 0) and np.all(got[1][:, :, 0] == -np.inf)


def reference(q, k, v, bias):
    """The documents/ALiBi/GQA case written with plain ops, under either library."""
    t = lib(q)
    k, v = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)
    i = t.arange(6)
    doc = t.tensor(DOC)
    keep = (doc[:, None] == doc[None, :]) & (i[:, None] >= i[None, :])
    s = q @ k.transpose(-2, -1) * 0.3
    s = s + bias.view(1, 4, 1, 1) * (i[None, :] - i[:, None]).to(s.dtype)
    s = s + t.where(i[:, None] == i[None, :], 0.5, 0.0)
    return s.masked_fill(~keep, float("-inf")).softmax(-1) @ v


def flex_with_bias(q, k, v, bias):
    doc = disthook.tensor(DOC)

    def documents(b, h, q_idx, kv_idx):
        return (doc[q_idx] == doc[kv_idx]) & (q_idx >= kv_idx)

    def alibi(score, b, h, q_idx, kv_idx):
        return score + bias[h] * (kv_idx - q_idx) + disthook.where(q_idx == kv_idx, 0.5, 0.0)

    mask = fa.create_block_mask(documents, None, None, 6, 6)
    return fa.flex_attention(q, k, v, score_mod=alibi, block_mask=mask, scale=0.3,
                             enable_gqa=True)


def test_gradients_reach_query_key_value_and_a_captured_bias():
    check_op(flex_with_bias, (2, 4, 6, 3), (2, 2, 6, 3), (2, 2, 6, 3), (4,),
             torch_fn=reference, name=False)


def test_a_row_that_keeps_nothing_has_zero_gradients_not_nan():
    q = disthook.randn(1, 1, 4, 2, dtype=disthook.float64, requires_grad=True)
    k = disthook.randn(1, 1, 4, 2, dtype=disthook.float64, requires_grad=True)
    v = disthook.randn(1, 1, 4, 2, dtype=disthook.float64, requires_grad=True)
    mask = fa.create_block_mask(lambda b, h, qi, ki: (qi > 0) & (qi >= ki), 1, 1, 4, 4)
    out, lse = fa.flex_attention(q, k, v, block_mask=mask, return_lse=True)
    out.square().sum().backward()
    assert np.all(out.detach().numpy()[0, 0, 0] == 0) and lse.detach().numpy()[0, 0, 0] == -np.inf
    for t in (q, k, v):
        assert np.all(np.isfinite(t.grad.numpy()))
    assert np.all(q.grad.numpy()[0, 0, 0] == 0)


def test_masks_and_block_masks_are_torch_s():
    pytest.importorskip("torch")
    from torch.nn.attention import flex_attention as tfa

    combos = [lambda m: m.and_masks(causal, window), lambda m: m.or_masks(causal, m.noop_mask),
              lambda m: first_row_sees_nothing]
    for make in combos:
        got = fa.create_mask(make(fa), 2, 3, 5, 7).numpy()
        want = tfa.create_mask(make(tfa), 2, 3, 5, 7).numpy()
        np.testing.assert_array_equal(got, want)
    got = fa.create_block_mask(causal, None, None, 300, 200)
    want = tfa.create_block_mask(causal, None, None, 300, 200, device="cpu")
    assert got.shape == tuple(want.shape) and got.seq_lengths == tuple(want.seq_lengths)
    np.testing.assert_array_equal(got.to_dense().numpy(), want.to_dense().numpy())


def test_wrong_lengths_and_heads_are_refused_saying_so():
    q = disthook.randn(1, 4, 6, 3)
    kv = disthook.randn(1, 2, 6, 3)
    with pytest.raises(ValueError, match="enable_gqa=True"):
        fa.flex_attention(q, kv, kv)
    mask = fa.create_block_mask(causal, None, None, 5, 5)
    with pytest.raises(ValueError, match="q_len=6 and kv_len=6"):
        fa.flex_attention(q, kv, kv, block_mask=mask, enable_gqa=True)
