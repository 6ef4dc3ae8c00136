"""The hook fuzzer's sixth round (f1_programs.F6_EXTRAS, checkpoint's use_reentrant=True)
and what it found in one process, each as the small program it came down to.

A forward checkpointed inside ``torch.autocast("cpu", dtype=torch.bfloat16)`` (seed 150):
torch's checkpoint reruns the forward in the backward under the autocast region the forward
ran in. disthook's reran it outside any region: the non-reentrant checkpoint found the
saved tensors of the rerun in float32 where the forward saved bfloat16 and raised
CheckpointError, and the reentrant one computed the gradients in float32, silently other
values than torch's.

The same region's casts, made first argument first (seed 318: a Linear's input, weight and
bias, a hook on the weight raising in the backward): torch's wrapper makes them last
argument first, so in the backward its cast nodes run first argument first (the input's
gradient, then the weight's, then the bias's); disthook's ran the other way, so a hook that
raised on the weight found the bias's ``.grad`` grown and the input's not, where torch's
leaves the input's grown and the bias's not."""
import f1_programs as programs
import numpy as np
import pytest


def _checkpointed_under_autocast(T, reentrant: bool) -> list:
    lin = T.nn.Linear(3, 3)
    rng = np.random.default_rng(5)
    with T.no_grad():
        for p in lin.parameters():
            p.copy_(T.tensor(rng.uniform(-1, 1, p.shape).astype(np.float32)))
    x = T.tensor(rng.uniform(-1, 1, (2, 3)).astype(np.float32), requires_grad=True)
    seen = []
    with T.autocast("cpu", dtype=T.bfloat16):
        out = T.utils.checkpoint.checkpoint(
            lambda t: lin(t).tanh(), x, use_reentrant=reentrant)
    out.register_hook(lambda g: seen.append(str(g.dtype)))
    (out.float() * T.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])).sum().backward()
    return [str(out.dtype), *seen] + [p.grad.numpy().copy() for p in (x, *lin.parameters())]


@pytest.mark.parametrize("reentrant", [False, True])
def test_a_checkpoint_reruns_its_forward_in_the_forward_s_autocast_region(reentrant):
    torch = pytest.importorskip("torch")
    import disthook

    want = _checkpointed_under_autocast(torch, reentrant)
    got = _checkpointed_under_autocast(disthook, reentrant)
    assert got[:2] == want[:2] == ["torch.bfloat16", "torch.bfloat16"]
    for a, b in zip(got[2:], want[2:]):
        assert a.dtype == b.dtype == np.float32
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_the_programs_make_the_sixth_round_s_shapes():
    """Over the default seeds' span the generator makes every F6 shape (so a switch that
    stopped making one would show); deployable programs, as drawn before them, have none
    unless asked, and a program's earlier draws do not move (their own streams)."""
    made = [programs.generate(seed) for seed in range(200)]
    assert {e for p in made for r in p["rounds"] for e in r["f6"]} == set(programs.F6_EXTRAS)
    assert any(r["reentrant"] for p in made for r in p["rounds"])
    assert all(r["checkpoint"] for p in made for r in p["rounds"] if r["reentrant"])
    assert not any(r["f6"] or r["reentrant"] for seed in range(50)
                   for r in programs.generate(seed, deployable=True)["rounds"])
    asked = [programs.generate(seed, deployable=True, extras=True) for seed in range(200)]
    assert {e for p in asked for r in p["rounds"] for e in r["f6"]} == set(programs.F6_EXTRAS)


def _order_under_autocast(T) -> list:
    lin, x, seen = T.nn.Linear(3, 3), T.ones(2, 3, requires_grad=True), []
    for name, t in (("x", x), ("weight", lin.weight), ("bias", lin.bias)):
        t.register_hook(lambda g, name=name: seen.append(name))
    y, w = T.ones(2, 3, requires_grad=True), T.ones(3, 3, requires_grad=True)
    for name, t in (("y", y), ("w", w)):
        t.register_hook(lambda g, name=name: seen.append(name))
    with T.autocast("cpu", dtype=T.bfloat16):
        out = lin(x)
        product = T.matmul(y, w)
    out.float().sum().backward()
    product.float().sum().backward()
    return seen


def test_an_autocast_region_s_casts_run_in_torch_s_order_in_the_backward():
    torch = pytest.importorskip("torch")
    import disthook

    assert _order_under_autocast(disthook) == _order_under_autocast(torch) == [
        "x", "weight", "bias", "y", "w"]
