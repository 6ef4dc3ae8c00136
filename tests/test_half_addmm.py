"""float16 ``addmm`` (nn.Linear with a bias, ``torch.addmm``) as torch's kernel computes it:
the product and the bias summed in float32, rounded to half once (the half product rounded,
then its sum rounded again, was up to 2 ulps off in a quarter of the elements); and
``torch.addmm`` records torch's node, AddmmBackward0."""
import numpy as np
import pytest

import disthook as torch


def _operands(k: int):
    rs = np.random.RandomState(k)
    return [rs.randn(*shape).astype(np.float32).astype(np.float16)
            for shape in ((32, k), (k, 16), (16,))]


@pytest.mark.parametrize("k", [6, 64])
def test_half_addmm_is_the_float32_sum_rounded_once(k):
    a, b, c = _operands(k)
    # at these sizes float32 holds every product and partial sum of halves exactly enough
    # that one rounding of the float32 result is what torch's kernel gives
    want = ((a.astype(np.float32) @ b.astype(np.float32)) + c).astype(np.float16)
    ta, tb, tc = (torch.from_numpy(v) for v in (a, b, c))
    assert np.array_equal(torch.addmm(tc, ta, tb).numpy(), want)
    assert np.array_equal(torch.nn.functional.linear(ta, tb.t(), tc).numpy(), want)
    twice = (a @ b + c)  # numpy's half arithmetic: rounded twice
    assert not np.array_equal(twice, want)  # (the case this test is about)


def test_addmm_records_addmm_and_its_gradients():
    a = torch.randn(3, 4, requires_grad=True)
    b = torch.randn(4, 2, requires_grad=True)
    c = torch.randn(3, 1, requires_grad=True)  # broadcast over the columns
    y = torch.addmm(c, a, b)
    assert y.grad_fn.name() == "AddmmBackward0"
    y.sum().backward()
    assert c.grad.tolist() == [[2.0]] * 3
    assert np.allclose(a.grad.numpy(), np.ones((3, 2)) @ b.detach().numpy().T)
    scaled = torch.addmm(c, a, b, beta=2, alpha=0.5)  # torch's formula, scaled
    assert np.allclose(scaled.detach().numpy(),
                       2 * c.detach().numpy() + 0.5 * (a @ b).detach().numpy())
