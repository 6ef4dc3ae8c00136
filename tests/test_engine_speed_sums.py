"""The engine sums a broadcast operand's gradient back to its shape (ops.base.sum_to): a
bias's, every step. Without create_graph it records nothing, so it runs Sum's forward alone,
not the method and the op's bookkeeping (25-30 us a call); what a hook sees and the values
are still torch's, and under create_graph the sum is an op again."""
import numpy as np
import pytest

import disthook
from disthook.ops import reduce as R

torch = pytest.importorskip("torch")


def _linear(lib, create_graph=False):
    rng = np.random.default_rng(0)
    x = lib.tensor(rng.standard_normal((6, 5)).astype(np.float32))
    w = lib.tensor(rng.standard_normal((5, 4)).astype(np.float32), requires_grad=True)
    b = lib.tensor(rng.standard_normal((1, 4)).astype(np.float32), requires_grad=True)
    c = lib.tensor(rng.standard_normal(4).astype(np.float32), requires_grad=True)
    seen = []
    b.register_hook(lambda g: seen.append((g._is_view(), tuple(g.shape))))
    c.register_hook(lambda g: seen.append((g._is_view(), tuple(g.shape))))
    loss = ((x @ w + b + c) ** 2).sum()
    grads = lib.autograd.grad(loss, (b, c), create_graph=create_graph)
    return loss, grads, seen


def test_a_bias_gradient_is_summed_without_an_op_and_is_torchs(monkeypatch):
    calls = []
    real = R.Sum.apply.__func__
    monkeypatch.setattr(R.Sum, "apply", classmethod(
        lambda cls, *a, **k: calls.append(cls) or real(cls, *a, **k)))
    _, grads, seen = _linear(disthook)
    assert calls == [R.SumAll]  # the loss's own sum, in the forward
    _, t_grads, t_seen = _linear(torch)
    assert seen == t_seen  # a (1, 4) sum, and a (4,) view of one, as torch's
    for mine, theirs in zip(grads, t_grads):
        assert mine.dtype == disthook.float32 and tuple(mine.shape) == tuple(theirs.shape)
        np.testing.assert_allclose(mine.numpy(), theirs.numpy(), rtol=1e-6)


def test_under_create_graph_the_sum_is_differentiable_as_torchs():
    results = []
    for lib in (disthook, torch):
        _, (gb, gc), _ = _linear(lib, create_graph=True)
        assert gb.grad_fn is not None and gc.grad_fn is not None
        names = (gb.grad_fn.name(), gc.grad_fn.name())
        x = gb.sum() * 2 + (gc ** 2).sum()
        results.append((names, x.item()))
    (names, value), (t_names, t_value) = results
    assert names == t_names
    assert value == pytest.approx(t_value, rel=1e-6)


def _graph_names(fn) -> list:
    out, seen, stack = [], set(), [fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        out.append(type(node).__name__)
        stack += [nxt for nxt, _ in node.next_functions]
    return sorted(out)


@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_a_full_reductions_gradient_expands_the_0d_gradient_as_torch(reduction):
    """sum() and mean() give their 0-d gradient to expand as it is (torch's formula), with
    no reshape to (1, 1) first: one op less each backward, and under create_graph no
    ViewBackward0 that torch's graph does not have."""
    found = []
    for lib in (disthook, torch):
        x = lib.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
        seed = lib.tensor(2.0, dtype=lib.float64, requires_grad=True)
        (g,) = lib.autograd.grad(getattr(x, reduction)(), x, seed, create_graph=True)
        (g_seed,) = lib.autograd.grad((g * g).sum(), seed)
        names = [n for n in _graph_names(g.grad_fn) if not n.startswith("Div")]
        found.append((names, g.detach().numpy().tolist(), g_seed.item()))
    assert found[0] == found[1]
