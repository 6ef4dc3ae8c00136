"""``torch.add(0, t)`` and the other function forms torch lets a Python number come first in
(TabNet's ``res = torch.add(res, out)`` from ``res = 0``): value, dtype and gradient as
torch's, against torch when it is installed."""
import numpy as np
import pytest

import disthook

torch = pytest.importorskip("torch")

OPS = ["add", "sub", "subtract", "mul", "multiply", "div", "divide", "true_divide",
       "floor_divide", "remainder", "pow", "xlogy"]


@pytest.mark.parametrize("number", [0, 2, 2.5, True], ids=["0", "2", "2.5", "True"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "int32"])
@pytest.mark.parametrize("name", [n for n in OPS if n not in ("sub", "subtract")])
def test_a_number_first_gives_torchs_value_and_dtype(name, dtype, number):
    data = np.array([1.5, 2.0, 3.0]) if dtype.startswith("float") else np.array([1, 2, 3])
    want = getattr(torch, name)(number, torch.tensor(data.astype(dtype)))
    got = getattr(disthook, name)(number, disthook.tensor(data.astype(dtype)))
    assert str(got.dtype) == str(want.dtype)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)


@pytest.mark.parametrize("name", [n for n in OPS if n not in ("floor_divide", "remainder")])
def test_a_number_first_passes_the_gradient_to_the_tensor(name):
    data = np.array([0.5, 1.5, 3.0])
    grads = []
    for lib in (torch, disthook):
        t = lib.tensor(data, requires_grad=True)
        getattr(lib, name)(1.7, t).sum().backward()
        grads.append(np.zeros(3) if t.grad is None else t.grad.numpy())
    np.testing.assert_allclose(grads[1], grads[0], rtol=1e-12)


def test_alpha_rounding_mode_and_two_numbers_as_torch():
    t = np.array([4.0, -3.0])
    for call in (lambda lib, x: lib.sub(0, x), lambda lib, x: lib.subtract(2.5, x.int()),
                 lambda lib, x: lib.add(2, x, alpha=3), lambda lib, x: lib.sub(2, x, alpha=3),
                 lambda lib, x: lib.div(7, x, rounding_mode="floor"),
                 lambda lib, x: lib.div(7, x, rounding_mode="trunc"),
                 lambda lib, x: lib.add(2, 3), lambda lib, x: lib.mul(2.5, 3)):
        want, got = call(torch, torch.tensor(t)), call(disthook, disthook.tensor(t))
        assert str(got.dtype) == str(want.dtype)
        np.testing.assert_allclose(got.numpy(), want.numpy())


def test_a_number_first_elsewhere_is_still_refused_as_torch_does():
    with pytest.raises(TypeError, match=r"maximum\(\): argument 'input' \(position 1\) must "
                                        r"be Tensor, not int"):
        disthook.maximum(2, disthook.ones(2))
