"""The ops that only move values (gather, take_along_dim, diagonal, trace, diag, diag_embed,
tril, triu) take complex tensors, with their gradients, as torch's: I-JEPA-style masks
gathered from a complex state, an S4 DPLR matrix built with diag_embed, a causal mask on a
complex decay matrix. Before, each refused a complex input."""
import numpy as np
import pytest

import disthook as torch

IDX = np.array([[0, 2], [1, 1], [2, 0]])

OPS = {
    "gather": lambda lib, z: z.gather(1, lib.tensor(IDX)),
    "torch_gather": lambda lib, z: lib.gather(z, 0, lib.tensor(IDX.T[:, :3])),
    "take_along_dim": lambda lib, z: lib.take_along_dim(z, lib.tensor(IDX), dim=1),
    "diagonal": lambda lib, z: z.diagonal(offset=1),
    "trace": lambda lib, z: z.trace(),
    "diag_matrix": lambda lib, z: lib.diag(z, -1),
    "diag_vector": lambda lib, z: lib.diag(z[0]),
    "diag_embed": lambda lib, z: lib.diag_embed(z, offset=1),
    "tril": lambda lib, z: z.tril(),
    "triu": lambda lib, z: lib.triu(z, 1),
    "tril_inplace": lambda lib, z: (z * 1).tril_(-1),
    "transposed": lambda lib, z: z.t().triu().gather(0, lib.tensor(IDX)),
}


def _run(lib, fn, dtype):
    real = np.random.default_rng(0).standard_normal((3, 3, 2))
    r = lib.tensor(real, dtype=getattr(lib, dtype), requires_grad=True)
    out = fn(lib, lib.view_as_complex(r))
    out_r = lib.view_as_real(out)
    (out_r * lib.tensor(np.random.default_rng(1).standard_normal(tuple(out_r.shape)),
                        dtype=out_r.dtype)).sum().backward()
    return str(out.dtype), out_r.detach().numpy(), r.grad.numpy()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", sorted(OPS))
def test_complex_moves_match_torch(name, dtype):
    torch_ = pytest.importorskip("torch")
    got = _run(torch, OPS[name], dtype)
    want = _run(torch_, OPS[name], dtype)
    assert got[0] == want[0]
    for g, w in zip(got[1:], want[1:]):
        np.testing.assert_allclose(g, w, rtol=1e-6 if dtype == "float32" else 1e-14, atol=1e-7)


def test_a_complex_gather_of_nothing():
    z = torch.zeros(2, 3, dtype=torch.complex64, requires_grad=True)
    out = z.gather(1, torch.zeros(2, 0, dtype=torch.int64))
    assert out.shape == (2, 0) and out.dtype == torch.complex64
    out.sum().abs().backward()
    assert z.grad.dtype == torch.complex64 and not z.grad.abs().sum().item()
