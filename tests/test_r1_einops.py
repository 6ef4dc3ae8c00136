"""einops over disthook tensors (lucidrains' Perceiver: ``rearrange``, ``repeat`` with ``()``,
``einsum``): values, dtypes and gradients as einops gives them over torch's tensors. Before,
einops refused them ("Tensor type unknown to einops")."""
import numpy as np
import pytest

import disthook

torch = pytest.importorskip("torch")
einops = pytest.importorskip("einops")

X = np.arange(2 * 3 * 4, dtype=np.float64).reshape(2, 3, 4) / 7 - 1

CALLS = {
    "rearrange-merge": lambda t: einops.rearrange(t, "b n (h d) -> (b h) n d", h=2),
    "rearrange-split": lambda t: einops.rearrange(t, "(b1 b2) n d -> b1 (n b2) d", b1=1),
    "repeat-unit": lambda t: einops.repeat(t[:, 0], "b j -> (b h) () j", h=3),
    "repeat-new": lambda t: einops.repeat(t, "b n d -> b k n d", k=2),
    "reduce-mean": lambda t: einops.reduce(t, "b n (d p) -> b d", "mean", p=2),
    "reduce-max": lambda t: einops.reduce(t, "b n d -> n", "max"),
    "reduce-min": lambda t: einops.reduce(t, "b n d -> b d", "min"),
    "reduce-sum": lambda t: einops.reduce(t, "b n d -> b () d", "sum"),
    "reduce-prod": lambda t: einops.reduce(t, "b n d -> d", "prod"),
    "einsum": lambda t: einops.einsum(t, t, "b i d, b j d -> b i j"),
    "pack": lambda t: einops.pack([t, t[:, :, 0]], "b n *")[0],
    "unpack": lambda t: einops.unpack(t, [(2,), (2,)], "b n *")[1],
}


@pytest.mark.parametrize("name", CALLS)
def test_einops_over_disthook_tensors_as_over_torchs(name):
    out = []
    for lib in (torch, disthook):
        t = lib.tensor(X, requires_grad=True)
        y = CALLS[name](t)
        (y * lib.tensor(np.linspace(-1, 1, y.numel()).reshape(tuple(y.shape)))).sum().backward()
        out.append((y.detach().numpy(), t.grad.numpy(), str(y.dtype)))
    np.testing.assert_allclose(out[1][0], out[0][0], rtol=1e-12)
    np.testing.assert_allclose(out[1][1], out[0][1], rtol=1e-12)
    assert out[1][2] == out[0][2]


def test_einops_parse_shape_and_bool_reductions():
    t = disthook.tensor(X > 0)
    assert einops.parse_shape(disthook.tensor(X), "b _ d") == {"b": 2, "d": 4}
    got = einops.reduce(t, "b n d -> d", "any").numpy()
    np.testing.assert_array_equal(got, (X > 0).any(axis=(0, 1)))
