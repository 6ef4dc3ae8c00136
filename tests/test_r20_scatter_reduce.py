"""scatter_reduce's amax, amin and prod differentiate twice (a force loss on energies read
out per molecule by a max or a product: before, NotImplementedError), matching finite
differences of the first derivative and torch; the ties' count includes ``self`` equal to the
result also with include_self=False, as torch counts (before, each tied src took 1/2, torch
gives 1/3); a zero factor of prod under create_graph is a clear NotImplementedError."""
import numpy as np
import pytest

import disthook as torch

INDEX = np.array([[0, 1, 2], [0, 0, 1], [2, 2, 2], [1, 0, 0], [0, 1, 1], [2, 0, 1]])


def _arrays(seed):
    rs = np.random.RandomState(seed)
    # values apart by more than the finite-difference step: no tie moves
    return rs.permutation(12).reshape(3, 4) * 0.07 + 0.5, rs.permutation(18).reshape(6, 3) * 0.05 + 0.6


def _second(lib, a, s, reduce, include_self):
    a = lib.tensor(a, requires_grad=True)
    s = lib.tensor(s, requires_grad=True)
    w = lib.tensor(np.linspace(-1, 1, 12).reshape(3, 4))
    out = a.scatter_reduce(0, lib.tensor(INDEX), s, reduce, include_self=include_self)
    ga, gs = lib.autograd.grad((out * w * out).sum(), [a, s], create_graph=True)
    ((ga ** 2).sum() + (gs ** 3).sum()).backward()
    return [t.detach().numpy() for t in (ga, gs, a.grad, s.grad)]


@pytest.mark.parametrize("reduce", ["amax", "amin", "prod"])
@pytest.mark.parametrize("include_self", [True, False])
def test_second_derivative_matches_finite_differences(reduce, include_self):
    a, s = _arrays(0)
    _, _, gga, ggs = _second(torch, a, s, reduce, include_self)

    def objective(a_, s_):
        x = torch.tensor(a_, requires_grad=True)
        y = torch.tensor(s_, requires_grad=True)
        w = torch.tensor(np.linspace(-1, 1, 12).reshape(3, 4))
        out = x.scatter_reduce(0, torch.tensor(INDEX), y, reduce, include_self=include_self)
        p, q = torch.autograd.grad((out * w * out).sum(), [x, y])
        return ((p ** 2).sum() + (q ** 3).sum()).item()

    eps = 1e-5
    for k in [(0, 0), (2, 1), (5, 2), (3, 0)]:
        up, down = s.copy(), s.copy()
        up[k] += eps
        down[k] -= eps
        fd = (objective(a, up) - objective(a, down)) / (2 * eps)
        assert abs(ggs[k] - fd) <= 1e-4 * max(1.0, abs(fd)), (k, ggs[k], fd)
    for k in [(0, 0), (1, 2), (2, 3)]:
        up, down = a.copy(), a.copy()
        up[k] += eps
        down[k] -= eps
        fd = (objective(up, s) - objective(down, s)) / (2 * eps)
        assert abs(gga[k] - fd) <= 1e-4 * max(1.0, abs(fd)), (k, gga[k], fd)


@pytest.mark.parametrize("reduce", ["amax", "amin", "prod"])
@pytest.mark.parametrize("include_self", [True, False])
def test_second_derivative_matches_torch(reduce, include_self):
    torch_ = pytest.importorskip("torch")
    a, s = _arrays(1)
    for mine, theirs in zip(_second(torch, a, s, reduce, include_self),
                            _second(torch_, a, s, reduce, include_self)):
        np.testing.assert_allclose(mine, theirs, rtol=1e-10, atol=1e-12)


def test_ties_count_self_as_torch_does_without_include_self():
    a = torch.tensor([2.0], requires_grad=True)
    s = torch.tensor([2.0, 2.0, 1.0], requires_grad=True)
    a.scatter_reduce(0, torch.tensor([0, 0, 0]), s, "amax", include_self=False).sum().backward()
    assert a.grad.tolist() == [0.0]
    np.testing.assert_allclose(s.grad.numpy(), [1 / 3, 1 / 3, 0.0])


def test_prod_with_a_zero_factor_under_create_graph_is_refused():
    s = torch.tensor([2.0, 0.0, 3.0], dtype=torch.float64, requires_grad=True)
    out = torch.ones(1, dtype=torch.float64).scatter_reduce(0, torch.tensor([0, 0, 0]), s, "prod")
    g = torch.autograd.grad(out.sum(), s)[0]  # the first derivative alone is computed
    assert g.tolist() == [0.0, 6.0, 0.0]
    with pytest.raises(NotImplementedError, match="scatter_reduce.'prod'. with a zero factor"):
        torch.autograd.grad(out.sum(), s, create_graph=True)


def test_force_loss_through_a_per_molecule_max_trains():
    pos = torch.tensor([[0.0, 0.0], [1.1, 0.2], [0.3, 1.4], [2.0, 2.1]], dtype=torch.float64,
                       requires_grad=True)
    scale = torch.tensor(0.7, dtype=torch.float64, requires_grad=True)
    batch = torch.tensor([0, 0, 1, 1])
    e_atom = scale * (pos ** 2).sum(1).sin()
    e = torch.zeros(2, dtype=torch.float64).scatter_reduce(0, batch, e_atom, "amax",
                                                          include_self=False)
    forces = -torch.autograd.grad(e.sum(), pos, create_graph=True)[0]
    (forces ** 2).sum().backward()
    # only each molecule's max atom has a force, proportional to scale: d/dscale = 2 F^2 / scale
    expected = 2 * (forces.detach() ** 2).sum() / scale.detach()
    assert abs(scale.grad.item() - expected.item()) < 1e-12
