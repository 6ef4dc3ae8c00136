"""The norms of a complex tensor are those of its absolute values, real, as torch's
(linalg.vector_norm / norm / matrix_norm('fro'), Tensor.norm, torch.norm, F.normalize: the
norm of an S4/S5 model's complex state or kernel). Before, each was refused with a message
that said complex tensors were expected."""
import numpy as np
import pytest

import disthook as torch

REAL = np.random.default_rng(0).standard_normal((3, 4, 2))
REAL[1, 2] = 0.0                        # a zero entry: its gradient is 0, as torch's


def _complex(lib, requires_grad=True):
    r = lib.tensor(REAL, requires_grad=requires_grad)
    return r, lib.view_as_complex(r)


NORMS = {
    "vector_norm": lambda lib, z: lib.linalg.vector_norm(z),
    "vector_norm_1_dim": lambda lib, z: lib.linalg.vector_norm(z, 1, dim=1),
    "vector_norm_3": lambda lib, z: lib.linalg.vector_norm(z, 3, dim=0, keepdim=True),
    "vector_norm_inf": lambda lib, z: lib.linalg.vector_norm(z, float("inf"), dim=-1),
    "vector_norm_0": lambda lib, z: lib.linalg.vector_norm(z, 0, dim=1),
    "tensor_norm": lambda lib, z: z.norm(dim=1),
    "torch_norm": lambda lib, z: lib.norm(z),
    "linalg_norm": lambda lib, z: lib.linalg.norm(z),
    "matrix_fro": lambda lib, z: lib.linalg.matrix_norm(z),
    "transposed": lambda lib, z: z.t().norm(dim=0),
    "normalize": lambda lib, z: lib.view_as_real(lib.nn.functional.normalize(z, dim=1)),
    "complex128": lambda lib, z: lib.linalg.vector_norm(z, dtype=lib.complex128),
}


def _run(lib, fn):
    r, z = _complex(lib)
    out = fn(lib, z)
    (out * lib.tensor(np.random.default_rng(1).standard_normal(tuple(out.shape)))).sum().backward()
    return out, None if r.grad is None else r.grad.numpy()


@pytest.mark.parametrize("name", sorted(NORMS))
def test_complex_norms_match_torch(name):
    torch_ = pytest.importorskip("torch")
    got, got_grad = _run(torch, NORMS[name])
    want, want_grad = _run(torch_, NORMS[name])
    assert str(got.dtype) == str(want.dtype)
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-12)
    if want_grad is None:                   # ord 0 counts: no gradient reaches the input
        assert got_grad is None
    else:
        np.testing.assert_allclose(got_grad, want_grad, rtol=1e-12, atol=1e-15)


def test_complex_norm_is_real():
    z = torch.tensor([3 + 4j, 0j], dtype=torch.complex64)
    out = torch.linalg.vector_norm(z)
    assert out.dtype == torch.float32 and out.item() == 5.0
    assert z.norm(1).item() == 5.0


def test_the_zero_norm_of_a_real_tensor_leaves_no_gradient():
    x = torch.ones(3, requires_grad=True)
    torch.linalg.vector_norm(x, 0).backward()
    assert x.grad is None


def test_complex_norm_refuses_a_real_dtype_and_integers_stay_refused():
    z = torch.zeros(2, dtype=torch.complex64)
    with pytest.raises(RuntimeError, match="dtype should be complex for complex inputs, but got Double"):
        torch.linalg.vector_norm(z, dtype=torch.float64)
    with pytest.raises(RuntimeError, match="dtype should be complex"):
        z.norm(dtype=torch.float32)
    with pytest.raises(RuntimeError, match="Expected a floating point or complex tensor as input. Got Long"):
        torch.linalg.vector_norm(torch.arange(3))
    assert torch.arange(3).norm(dtype=torch.float32).dtype == torch.float32
