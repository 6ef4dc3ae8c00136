"""sgn of a complex tensor, z / |z| (0 at 0), with torch's gradient (the part of the incoming
gradient along the unit circle's tangent over |z|, 0 at z = 0), first and second order: a
modReLU activation of a complex-valued network, relu(|z| + b) * sgn(z). Before, it was
refused as not implemented for complex."""
import numpy as np
import pytest

import disthook as torch

REAL = np.random.default_rng(0).standard_normal((3, 4, 2))
REAL[0, 1] = 0.0


def _mod_relu(lib, z, b):
    return lib.relu(z.abs() + b) * z.sgn()


def _run(lib, dtype):
    r = lib.tensor(REAL, dtype=getattr(lib, dtype), requires_grad=True)
    b = lib.tensor([0.1, -0.5, 0.3, 0.0], dtype=r.dtype, requires_grad=True)
    z = lib.view_as_complex(r)
    out = lib.view_as_real(_mod_relu(lib, z, b)) + lib.view_as_real(lib.sgn(z.t()).t())
    w = lib.tensor(np.random.default_rng(1).standard_normal(tuple(out.shape)), dtype=r.dtype)
    gr, gb = lib.autograd.grad((out * w).sum(), (r, b), create_graph=True)
    (gr.pow(2).sum() + gb.pow(2).sum()).backward()
    return [t.detach().numpy() for t in (out, gr, gb, r.grad, b.grad)]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_mod_relu_matches_torch_to_second_order(dtype):
    torch_ = pytest.importorskip("torch")
    tol = 1e-5 if dtype == "float32" else 1e-12
    for got, want in zip(_run(torch, dtype), _run(torch_, dtype)):
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_sgn_values_at_zero_and_of_real_tensors():
    z = torch.tensor([3 + 4j, 0j, -2j], dtype=torch.complex128, requires_grad=True)
    s = z.sgn()
    assert s.dtype == torch.complex128 and s.tolist() == pytest.approx([0.6 + 0.8j, 0j, -1j])
    s.real.sum().backward()
    assert z.grad[1].item() == 0
    x = torch.tensor([-2.0, 0.0, 3.0], requires_grad=True)
    x.sgn().sum().backward()
    assert x.sgn().tolist() == [-1.0, 0.0, 1.0] and x.grad.tolist() == [0.0, 0.0, 0.0]
    y = torch.tensor([0j, 5j])
    y.sgn_()
    assert y.tolist() == [0j, 1j]
