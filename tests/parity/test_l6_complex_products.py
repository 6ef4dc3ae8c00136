"""``prod`` and ``cumprod`` of complex tensors, with gradients, as torch: the gradient of each
element is the incoming gradient times the conjugate of the product of the others (torch's
convention for complex gradients), with zeros among the elements too. Here both refused
complex input."""
from __future__ import annotations

import pytest

import disthook

torch = pytest.importorskip("torch")

VALUES = {
    "no zeros": [[1 + 2j, 3 - 1j, 0.5j], [2, -1 + 1j, 1 - 1j]],
    "zeros": [[1 + 2j, 0, 0.5j], [0, -1 + 1j, 0]],
    "one zero per row": [[1 + 2j, 0, 0.5j], [2, -1 + 1j, 0]],
}
CALLS = {
    "prod": lambda t: t.prod(),
    "prod(1)": lambda t: t.prod(1),
    "prod(0, keepdim)": lambda t: t.prod(0, keepdim=True),
    "cumprod(1)": lambda t: t.cumprod(1),
    "cumprod(0)": lambda t: torch_or_ours(t).cumprod(t, 0),
}


def torch_or_ours(t):
    return torch if isinstance(t, torch.Tensor) else disthook


def rounded(values):
    return [complex(round(v.real, 5), round(v.imag, 5)) for v in values]


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
@pytest.mark.parametrize("values", VALUES)
@pytest.mark.parametrize("call", CALLS)
def test_complex_prod_and_cumprod_with_gradients_as_torch(call, values, dtype):
    results = []
    for lib in (torch, disthook):
        z = lib.tensor(VALUES[values], dtype=getattr(lib, dtype), requires_grad=True)
        out = CALLS[call](z)
        weight = lib.full(out.shape, 0.5 - 2j, dtype=getattr(lib, dtype))
        (out * weight).real.sum().backward()
        results.append((out.dtype == getattr(lib, dtype),
                        rounded(out.detach().reshape(-1).tolist()),
                        rounded(z.grad.reshape(-1).tolist())))
    assert results[1] == results[0]


def test_complex_prod_of_integers_times_complex_keeps_complex():
    results = []
    for lib in (torch, disthook):
        results.append(rounded(lib.tensor([1 + 1j, 2, 3j]).prod(0, keepdim=True).tolist()))
    assert results[1] == results[0]
