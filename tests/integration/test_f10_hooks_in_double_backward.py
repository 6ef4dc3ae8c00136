"""A loss of a deployed part's output and of its input gradient taken with
``create_graph=True`` (an energy and its forces): the second backward reaches the part's
forward graph through the call and through the graph of the call's first backward, which the
deployment runs as two passes on the worker. A hook in that graph (a module's full backward
hook, a tensor hook on an activation) got only the part that came through the call (the
full hook's grad_input: norm 0.67237 against 0.67465 in one process); now refused, naming the
hook. A loss of the forces alone, and a hook on a module kept on the client, stay exact."""
import numpy as np
import pytest

import disthook as torch
from disthook import nn

pytestmark = pytest.mark.timeout(180)
CLUSTER_WORKERS = 2


class Pot(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.act, self.l2 = nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1)

    def forward(self, x):
        return self.l2(self.act(self.l1(x)))


class Inner(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(3, 4)

    def forward(self, x):
        y = torch.tanh(self.l1(x))
        if y.requires_grad:
            y.register_hook(lambda g: g * 2)
        return y


class Pot2(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner, self.l2 = Inner(), nn.Linear(4, 1)

    def forward(self, x):
        return self.l2(self.inner(x))


def make(cls=Pot):
    torch.manual_seed(0)
    return cls().double()


def energy_and_forces(model, with_energy: bool, hooked: bool = True):
    """The log of act's hooks and the parameters' gradients after a loss of the forces
    (and of the energy)."""
    log = []
    if hooked:
        model.act.register_full_backward_hook(
            lambda m, gin, gout: log.append(("full", gin[0].detach().numpy().copy(),
                                             gout[0].detach().numpy().copy())))
        model.act.register_full_backward_pre_hook(
            lambda m, gout: log.append(("pre", gout[0].detach().numpy().copy())))
    pos = torch.tensor(np.linspace(-1, 1, 12).reshape(4, 3), requires_grad=True)
    e = model(pos)
    f = torch.autograd.grad(e.sum(), pos, create_graph=True)[0]
    loss = (f ** 2).sum()
    if with_energy:
        loss = loss + (e ** 2).sum()
    loss.backward()
    return log, [None if p.grad is None else p.grad.numpy().copy() for p in model.parameters()]


def same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        if isinstance(x, tuple):
            assert x[0] == y[0]
            same(x[1:], y[1:])
        elif x is None or y is None:
            assert x is None and y is None
        else:
            np.testing.assert_allclose(x, y, rtol=1e-10, atol=1e-12)


def test_full_hook_in_a_part_differentiated_twice_is_refused(cluster):
    model = cluster.deploy(make(), placement={"l1": 0, "act": 0, "l2": 0})
    with pytest.raises(NotImplementedError, match=r"full backward hook of module 'act'.*"
                       r"outside the twice-differentiated part.*to_local\(\)"):
        energy_and_forces(model, with_energy=True)


def test_tensor_hook_on_an_activation_in_such_a_part_is_refused(cluster):
    model = cluster.deploy(make(Pot2), placement={"inner": 0, "l2": 1})
    pos = torch.tensor(np.linspace(-1, 1, 12).reshape(4, 3), requires_grad=True)
    e = model(pos)
    f = torch.autograd.grad(e.sum(), pos, create_graph=True)[0]
    with pytest.raises(NotImplementedError, match="tensor hook on an activation"):
        ((f ** 2).sum() + (e ** 2).sum()).backward()


def test_what_stays_exact(cluster):
    # the forces alone: in one process the full hook does not fire either
    model = cluster.deploy(make(), placement={"l1": 0, "act": 0, "l2": 0})
    same(energy_and_forces(model, False)[0], energy_and_forces(make(), False)[0])
    model = cluster.deploy(make(), placement={"l1": 0, "act": 0, "l2": 0})
    got, expected = energy_and_forces(model, False), energy_and_forces(make(), False)
    same(got[0], expected[0])
    same(got[1], expected[1])
    # energy and forces, the hooked module kept on the client: one engine pass there
    model = cluster.deploy(make(), placement={"l1": 0, "l2": 1})
    got, expected = energy_and_forces(model, True), energy_and_forces(make(), True)
    same(got[0], expected[0])
    same(got[1], expected[1])
    # energy and forces, no hook in the part: the gradients as in one process
    model = cluster.deploy(make(), placement={"l1": 0, "act": 0, "l2": 0})
    got, expected = (energy_and_forces(model, True, hooked=False),
                     energy_and_forces(make(), True, hooked=False))
    same(got[1], expected[1])
    # two backwards, the energy's after the forces': each fires as in one process
    logs = []
    for m in (cluster.deploy(make(), placement={"l1": 0, "act": 0, "l2": 0}), make()):
        log = []
        m.act.register_full_backward_hook(
            lambda mod, gin, gout, log=log: log.append(gin[0].detach().numpy().copy()))
        pos = torch.tensor(np.linspace(-1, 1, 12).reshape(4, 3), requires_grad=True)
        e = m(pos)
        f = torch.autograd.grad(e.sum(), pos, create_graph=True)[0]
        (f ** 2).sum().backward(retain_graph=True)
        (e ** 2).sum().backward()
        logs.append(log)
    assert len(logs[1]) == 2
    same(logs[0], logs[1])
