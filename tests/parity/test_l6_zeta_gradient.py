"""``torch.special.zeta(x, q)`` records a node and differentiates in ``q`` as torch:
-x zeta(x + 1, q); backward to ``x`` is torch's NotImplementedError. Here its result was
detached (no gradient reached ``q``: backward raised that nothing required grad)."""
from __future__ import annotations

import pytest

import disthook
from parity.l6_outcome import outcome

torch = pytest.importorskip("torch")

CASES = {
    "tensors": lambda lib, q: lib.special.zeta(lib.tensor([2.0, 3.0, 4.5]), q),
    "number x": lambda lib, q: lib.special.zeta(2.0, q),
    "broadcast": lambda lib, q: lib.special.zeta(lib.tensor([[2.0], [3.0]]), q),
    "x requires grad": lambda lib, q: lib.special.zeta(q, lib.tensor([2.0, 3.0, 4.0])),
    "number q": lambda lib, q: lib.special.zeta(q, 2.0),
}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", CASES)
def test_zeta_node_and_gradient_as_torch(name, dtype):
    results = []
    for lib in (torch, disthook):
        q = lib.tensor([1.5, 2.0, 3.25], dtype=getattr(lib, dtype), requires_grad=True)
        z = CASES[name](lib, q)
        error = outcome(lambda: z.sum().backward())  # noqa: B023 - called here
        results.append((z.requires_grad, type(z.grad_fn).__name__, error,
                        None if q.grad is None else q.grad.tolist(), z.reshape(-1).tolist()))
    ours, theirs = results[1], results[0]
    assert ours[:3] == theirs[:3]
    if theirs[3] is None:
        assert ours[3] is None
    else:
        assert ours[3] == pytest.approx(theirs[3], rel=1e-5)
    assert ours[4] == pytest.approx(theirs[4], rel=1e-5)
