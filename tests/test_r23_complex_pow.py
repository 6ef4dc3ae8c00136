"""A complex tensor to a tensor's power (Lambda ** arange(L), an S5/LRU kernel's powers of a
complex diagonal), with torch's values and gradients for both operands: the gradients
conjugated, 0 for the base where the exponent is 0 and for the exponent where the base is 0
and the exponent real and >= 0, and torch's values at a zero base (0 ** 0 is nan + nan j,
0 ** -1 is inf + nan j). Before, it was refused as not implemented for complex."""
import numpy as np
import pytest

import disthook as torch


def _run(lib, base_r, exp_values, exp_complex, dtype):
    real = lib.float32 if dtype == "complex64" else lib.float64
    br = lib.tensor(base_r, dtype=real, requires_grad=True)
    base = lib.view_as_complex(br)
    if exp_complex:
        er = lib.tensor(exp_values, dtype=real, requires_grad=True)
        exponent = lib.view_as_complex(er)
    else:
        er = lib.tensor(exp_values, dtype=real, requires_grad=True)
        exponent = er
    out = base ** exponent
    w = lib.tensor(np.random.default_rng(1).standard_normal(tuple(out.shape) + (2,)), dtype=real)
    (lib.view_as_real(out) * w).sum().backward()
    return (str(out.dtype), lib.view_as_real(out).detach().numpy(), br.grad.numpy(),
            er.grad.numpy())


RNG = np.random.default_rng(0)
CASES = {
    "powers": (RNG.standard_normal((4, 1, 2)), np.arange(6.0), False),
    "complex_exponent": (RNG.standard_normal((3, 4, 2)), RNG.standard_normal((3, 4, 2)), True),
    "transposed_base": (RNG.standard_normal((4, 3, 2)).transpose(1, 0, 2).copy(),
                        RNG.standard_normal((3, 4)), False),
    "zero_base": (np.array([[0.0, 0.0]] * 4), np.array([0.0, 2.0, -1.0, 0.5]), False),
}


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_complex_pow_matches_torch(name, dtype):
    torch_ = pytest.importorskip("torch")
    got = _run(torch, *CASES[name], dtype)
    want = _run(torch_, *CASES[name], dtype)
    assert got[0] == want[0]
    tol = 1e-5 if dtype == "complex64" else 1e-12
    for g, w in zip(got[1:], want[1:]):
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)


def test_zero_base_values_are_torchs():
    z = torch.zeros(4, dtype=torch.complex128)
    out = z ** torch.tensor([0.0, 2.0, -1.0, 1j])
    assert np.isnan(out[0].real.item()) and np.isnan(out[0].imag.item())
    assert out[1].item() == 0
    assert out[2].real.item() == float("inf") and np.isnan(out[2].imag.item())


def test_powers_of_a_complex_diagonal_match_the_loop():
    lam = torch.tensor([0.9 * np.exp(0.3j), 0.5 * np.exp(-1.1j)], dtype=torch.complex128)
    powers = lam[:, None] ** torch.arange(5)
    loop = [torch.ones(2, dtype=torch.complex128)]
    for _ in range(4):
        loop.append(loop[-1] * lam)
    np.testing.assert_allclose(powers.numpy(), torch.stack(loop, 1).numpy(), rtol=1e-14)
