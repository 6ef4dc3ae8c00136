"""cumsum of a complex tensor, with its gradient (linear: the suffix sum of the incoming
gradient, as for real tensors), as torch's: an S5/LRU-style diagonal recurrence written in
closed form, x_t = sum_k Lambda^(t-k) B u_k with Lambda^t = exp(cumsum(log Lambda)). Before,
it was refused as not implemented for complex."""
import numpy as np
import pytest

import disthook as torch


def _closed_form_scan(lib, lam_re, lam_im, bu):
    """x_t = Lambda^t * cumsum_k(Lambda^-k * Bu_k), Lambda complex diagonal (P,), Bu (B, L, P)."""
    lam = lib.complex(lam_re, lam_im)
    steps = lib.ones(bu.shape[1], 1, dtype=lam.dtype) * lib.log(lam)   # (L, P)
    log_pow = lib.cumsum(steps, dim=0) - lib.log(lam)                      # t * log Lambda
    return lib.exp(log_pow) * lib.cumsum(lib.exp(-log_pow) * bu, dim=1)


def _loop_scan(lib, lam_re, lam_im, bu):
    lam = lib.complex(lam_re, lam_im)
    x = lib.zeros(bu.shape[0], bu.shape[2], dtype=lam.dtype)
    out = []
    for t in range(bu.shape[1]):
        x = lam * x + bu[:, t]
        out.append(x)
    return lib.stack(out, 1)


def _grads(lib, scan):
    rng = np.random.default_rng(0)
    re = lib.tensor(-0.1 - 0.2 * rng.random(4), requires_grad=True)
    im = lib.tensor(rng.standard_normal(4), requires_grad=True)
    bu_r = lib.tensor(rng.standard_normal((2, 6, 4, 2)), requires_grad=True)
    y = scan(lib, re, im, lib.view_as_complex(bu_r))
    w = lib.tensor(rng.standard_normal((2, 6, 4)))
    (y.real * w + y.imag).sum().backward()
    return [y.detach()] + [t.grad.numpy() for t in (re, im, bu_r)]


def test_closed_form_scan_matches_the_loop_and_torch():
    torch_ = pytest.importorskip("torch")
    got = _grads(torch, _closed_form_scan)
    want = _grads(torch_, _closed_form_scan)
    loop = _grads(torch, _loop_scan)
    np.testing.assert_allclose(torch.view_as_real(got[0]).numpy(),
                               torch_.view_as_real(want[0]).numpy(), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(torch.view_as_real(got[0]).numpy(),
                               torch.view_as_real(loop[0]).numpy(), rtol=1e-10, atol=1e-12)
    for g, w, lp in zip(got[1:], want[1:], loop[1:]):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(g, lp, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_complex_cumsum_matches_torch(dtype):
    torch_ = pytest.importorskip("torch")
    r = np.random.default_rng(2).standard_normal((3, 5, 2))
    outs = []
    for lib in (torch, torch_):
        x = lib.tensor(r, dtype=lib.float32 if dtype == "complex64" else lib.float64,
                       requires_grad=True)
        z = lib.view_as_complex(x).t()                      # non-contiguous
        y = z.cumsum(0) * (1 - 2j) + lib.cumsum(z, dim=-1)
        lib.view_as_real(y).pow(2).sum().backward()
        outs.append((str(y.dtype), lib.view_as_real(y).detach().numpy(), x.grad.numpy()))
    assert outs[0][0] == outs[1][0]
    for g, w in zip(outs[0][1:], outs[1][1:]):
        np.testing.assert_allclose(g, w, rtol=1e-5 if dtype == "complex64" else 1e-12)


def test_complex_cumsum_of_nothing_and_of_a_real_tensor_into_complex():
    assert torch.zeros(0, dtype=torch.complex64).cumsum(0).shape == (0,)
    y = torch.tensor([1.0, 2.0]).cumsum(0, dtype=torch.complex64)
    assert y.dtype == torch.complex64 and y.tolist() == [1 + 0j, 3 + 0j]
