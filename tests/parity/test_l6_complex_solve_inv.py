"""``linalg.inv`` and ``linalg.solve`` (and their ``_ex`` forms, ``inverse``, ``left=False``,
batches) of complex matrices, with gradients, as torch: the gradients take the conjugate
transposes where the real ones transpose (torch's convention). Here both refused complex
input."""
from __future__ import annotations

import pytest

import disthook

torch = pytest.importorskip("torch")

A = [[1 + 1j, 2, 0.5j], [0, 1j, 1 - 1j], [2 - 1j, 0.5, 3]]
B = [[1 + 0j, 2j], [3, -1], [0.5j, 1]]
V = [1 + 0j, 2j, -1]

CALLS = {
    "inv": lambda lib, a, b, v: lib.linalg.inv(a),
    "inv_ex": lambda lib, a, b, v: lib.linalg.inv_ex(a)[0],
    "inverse": lambda lib, a, b, v: a.inverse(),
    "solve": lambda lib, a, b, v: lib.linalg.solve(a, b),
    "solve vector": lambda lib, a, b, v: lib.linalg.solve(a, v),
    "solve batch": lambda lib, a, b, v: lib.linalg.solve(a.unsqueeze(0).expand(2, 3, 3), b),
    "solve_ex": lambda lib, a, b, v: lib.linalg.solve_ex(a, b)[0],
    "solve left=False": lambda lib, a, b, v: lib.linalg.solve(a, b.mT, left=False),
}


def rounded(t, places):
    return [complex(round(z.real, places), round(z.imag, places))
            for z in t.reshape(-1).tolist()]


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
@pytest.mark.parametrize("name", CALLS)
def test_complex_inv_and_solve_with_gradients_as_torch(name, dtype):
    places = 3 if dtype == "complex64" else 9
    results = []
    for lib in (torch, disthook):
        dt = getattr(lib, dtype)
        a, b, v = (lib.tensor(x, dtype=dt, requires_grad=True) for x in (A, B, V))
        out = CALLS[name](lib, a, b, v)
        (out * lib.full(out.shape, 0.5 - 2j, dtype=dt)).real.sum().backward()
        results.append([rounded(out.detach(), places)] + [
            None if t.grad is None else rounded(t.grad, places) for t in (a, b, v)])
    assert results[1] == results[0]


def test_real_inv_and_solve_gradients_unchanged():
    results = []
    for lib in (torch, disthook):
        a = lib.tensor([[2.0, 1.0], [0.5, 3.0]], dtype=lib.float64, requires_grad=True)
        b = lib.tensor([[1.0], [2.0]], dtype=lib.float64, requires_grad=True)
        (lib.linalg.inv(a).sum() + lib.linalg.solve(a, b).sum()).backward()
        results.append(a.grad.reshape(-1).tolist() + b.grad.reshape(-1).tolist())
    assert results[1] == pytest.approx(results[0], rel=1e-12)
