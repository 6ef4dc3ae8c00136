"""A gradient given to ``backward``/``autograd.grad`` (``grad_outputs``) of another dtype than
its output is cast to the output's dtype before anything sees it, as torch's engine does:
a float32 seed of a float64 mean gave 0.33333334 (divided in float32), and the output's
hooks saw float32. A complex seed of a real output (or the reverse) is refused."""
import pytest

import disthook as torch


def test_a_float32_seed_of_a_float64_output_is_cast_before_the_graph_runs():
    x = torch.ones(3, dtype=torch.float64, requires_grad=True)
    y = x.mean()
    seen = []
    y.register_hook(lambda g: seen.append(g.dtype))
    y.grad_fn.register_prehook(lambda go: seen.append(go[0].dtype))
    (g,) = torch.autograd.grad(y, x, grad_outputs=torch.tensor(1.0, dtype=torch.float32))
    assert seen == [torch.float64, torch.float64]
    assert g.dtype == torch.float64 and g.tolist() == [1 / 3] * 3

    x = torch.ones(3, dtype=torch.float64, requires_grad=True)
    y = x.mean()
    y.retain_grad()
    y.backward(torch.tensor(1.0, dtype=torch.float32))
    assert x.grad.tolist() == [1 / 3] * 3 and y.grad.dtype == torch.float64


def test_an_integer_seed_is_taken_as_the_outputs_dtype():
    x = torch.ones(3, requires_grad=True)
    (g,) = torch.autograd.grad(x.mean(), x, grad_outputs=torch.tensor(2))
    assert g.dtype == torch.float32 and g.tolist() == pytest.approx([2 / 3] * 3)


@pytest.mark.parametrize("out_dtype, seed", [
    (torch.float32, torch.tensor(1 + 1j)),
    (torch.complex64, torch.tensor(1.0))])
def test_a_seed_complex_where_the_output_is_not_is_refused(out_dtype, seed):
    x = torch.ones(3, dtype=out_dtype, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"^For complex Tensors, both grad_output and "
                       r"output are required to have the same dtype. Mismatch in dtype: "
                       rf"grad_output\[0\] has a dtype of {seed.dtype} and output\[0\] has "
                       rf"a dtype of {out_dtype}\.$"):
        torch.autograd.grad((x * 2).sum(), x, grad_outputs=seed)
