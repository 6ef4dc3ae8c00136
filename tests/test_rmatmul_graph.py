"""``w.__rmatmul__(x)`` (what ``x @ w`` runs first when ``w``'s class overrides it, as a
deployed model's parameter does) keeps ``x``'s graph, as torch does: it copied ``x`` as a
constant, so ``x.grad`` stayed None."""
import numpy as np
import pytest

import disthook

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("lib", [disthook, torch], ids=["disthook", "torch"])
def test_rmatmul_with_a_tensor_keeps_its_graph(lib):
    x = lib.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    w = lib.tensor([[0.5, -1.0, 2.0], [1.5, 0.25, -0.5]], requires_grad=True)
    y = w.__rmatmul__(x)
    y.sum().backward()
    np.testing.assert_allclose(y.detach().numpy(), np.array(x.detach().numpy()) @ np.array(
        w.detach().numpy()))
    np.testing.assert_allclose(x.grad.numpy(), np.ones((2, 3)) @ w.detach().numpy().T)
    np.testing.assert_allclose(w.grad.numpy(), x.detach().numpy().T @ np.ones((2, 3)))


def test_rmatmul_of_a_list_is_the_matmul_of_its_tensor():
    w = disthook.tensor([[1.0, 0.0], [0.0, 2.0]])
    assert w.__rmatmul__([[1.0, 1.0]]).tolist() == [[1.0, 2.0]]
