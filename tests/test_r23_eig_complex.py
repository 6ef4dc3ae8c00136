"""linalg.eigh of a complex Hermitian matrix and linalg.eig / eigvals of a general one, as
torch's, without a gradient: S4's HiPPO-LegS initialisation diagonalises its normal part with
eigh(S * -1j) and keeps half of each conjugate pair. Before, eigh refused a complex input
and eig/eigvals said complex tensors did not exist here. Where the input requires grad,
each says it has no gradient here and what to do, before computing anything."""
import math

import numpy as np
import pytest

import disthook as torch


def _hippo_nplr(lib, n=8):
    """The normal-plus-low-rank form of HiPPO-LegS, as S4's initialisation computes it."""
    q = np.arange(n, dtype=np.float64)
    col, row = np.meshgrid(q, q)
    r = 2 * q + 1
    m = -(np.where(row >= col, r, 0) - np.diag(q))
    t = np.sqrt(np.diag(2 * q + 1))
    a = lib.tensor(t @ m @ np.linalg.inv(t))
    p = lib.tensor(np.sqrt(q + 0.5))
    s = a + p.unsqueeze(-2) * p.unsqueeze(-1)
    w_re = lib.mean(lib.diagonal(s), -1, keepdim=True)
    w_im, v = lib.linalg.eigh(s * -1j)
    w = w_re + 1j * w_im
    _, idx = lib.sort(w.imag)
    w, v = w[idx][: n // 2], v[:, idx][:, : n // 2]
    ap = v @ lib.diag_embed(w) @ v.conj().transpose(-1, -2)
    return w_im, w, v, ap


def test_hippo_normal_part_diagonalises_as_torch():
    torch_ = pytest.importorskip("torch")
    got = _hippo_nplr(torch)
    want = _hippo_nplr(torch_)
    assert got[0].dtype == torch.float64 and got[2].dtype == torch.complex128
    np.testing.assert_allclose(got[0].numpy(), want[0].numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got[1].numpy(), want[1].numpy(), rtol=1e-12, atol=1e-12)
    # the eigenvectors are fixed up to a phase: compare the matrix they rebuild
    np.testing.assert_allclose(got[3].numpy(), want[3].numpy(), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64", "complex128"])
def test_eig_values_and_vectors_as_torch(dtype):
    torch_ = pytest.importorskip("torch")
    a = np.random.default_rng(0).standard_normal((2, 4, 4, 2))
    outs = []
    for lib in (torch, torch_):
        x = lib.tensor(a, dtype=getattr(lib, "float32" if dtype in ("float32", "complex64")
                                         else "float64"))
        x = lib.view_as_complex(x) if dtype.startswith("complex") else x[..., 0]
        values, vectors = lib.linalg.eig(x)
        residual = x.to(vectors.dtype) @ vectors - vectors * values.unsqueeze(-2)
        outs.append((str(values.dtype), str(vectors.dtype), values.numpy(),
                     lib.linalg.eigvals(x).numpy(), residual.abs().max().item(),
                     vectors.abs().pow(2).sum(-2).numpy()))
    got, want = outs
    assert got[:2] == want[:2]
    tol = 1e-4 if dtype in ("float32", "complex64") else 1e-10
    key = lambda z: np.sort_complex(np.round(z, 3))           # the order is LAPACK's
    np.testing.assert_allclose(key(got[2]), key(want[2]), rtol=tol, atol=1e-3)
    np.testing.assert_allclose(got[3], got[2])
    assert got[4] < tol * 10
    np.testing.assert_allclose(got[5], np.ones_like(got[5]), rtol=tol)


def test_a_real_matrix_with_real_eigenvalues_still_gives_complex_results():
    values, vectors = torch.linalg.eig(torch.diag(torch.tensor([2.0, -1.0])))
    assert values.dtype == torch.complex64 and vectors.dtype == torch.complex64
    assert sorted(values.real.tolist()) == [-1.0, 2.0]


def test_no_gradient_is_refused_before_computing():
    a = torch.eye(3, dtype=torch.complex128, requires_grad=True)
    with pytest.raises(NotImplementedError, match="without a gradient.*torch.no_grad"):
        torch.linalg.eigh(a)
    with pytest.raises(NotImplementedError, match="linalg.eigvals is computed"):
        torch.linalg.eigvals(torch.eye(3, requires_grad=True))
    with torch.no_grad():
        assert torch.linalg.eigh(a).eigenvalues.tolist() == [1.0, 1.0, 1.0]
    assert torch.linalg.eig(a.detach()).eigenvalues.dtype == torch.complex128
    with pytest.raises(NotImplementedError, match="not implemented for 'Half'"):
        torch.linalg.eig(torch.eye(2, dtype=torch.float16))
    assert math.isclose(torch.linalg.eigh(torch.eye(2) * 2).eigenvalues[0].item(), 2.0)
