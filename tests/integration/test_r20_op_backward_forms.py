"""An op run on a worker on a kept value (remote_values.remote_apply), differentiated with
create_graph=True and again: its second backward's answer depends on the op's parameters as
well as on its arguments' shapes. A force loss over per-molecule energies read out by
``scatter_reduce`` with ``amax`` (whose gradient depends on the incoming gradient only) and
then with ``prod`` (whose gradient depends on its inputs too), same shapes: before, the
second was answered ahead with the first's form and failed ("the worker's answer differs");
now the form is kept per parameters and both give one process's gradients."""
import numpy as np
from helpers import deployed_run

import disthook as torch
from disthook import nn


class PerAtom(nn.Module):
    def __init__(self):
        super().__init__()
        self.f = nn.Linear(3, 1)
        self.g = nn.Linear(1, 1)

    def forward(self, pos, batch, reduce):
        e_atom = self.g(self.f(pos)).squeeze(-1) * (pos ** 2).sum(-1)
        return torch.zeros(2, dtype=pos.dtype).scatter_reduce(0, batch, e_atom, reduce,
                                                              include_self=False)


def make():
    torch.manual_seed(0)
    return PerAtom().double()


def force_training(model):
    log = []
    pos0 = torch.tensor([[0.1, 0.2, 0.3], [1.0, 0.5, -0.2], [0.3, -0.4, 0.9],
                         [0.7, 0.1, 0.2]], dtype=torch.float64)
    batch = torch.tensor([0, 0, 1, 1])
    for reduce in ("sum", "amax", "prod", "amax", "prod"):
        pos = pos0.clone().requires_grad_(True)
        energy = model(pos, batch, reduce)
        forces = -torch.autograd.grad(energy.sum(), pos, create_graph=True)[0]
        for p in model.parameters():
            p.grad = None
        ((forces ** 2).sum() + (energy ** 2).sum()).backward()
        log.append((reduce, forces.detach().numpy(), pos.grad.numpy(),
                    model.f.weight.grad.numpy(), model.g.weight.grad.numpy()))
    return log


def test_op_backward_forms_are_kept_per_parameters(cluster):
    got, want = deployed_run(cluster, make, force_training)
    assert [r for r, *_ in got] == [r for r, *_ in want]
    for (reduce, *mine), (_, *theirs) in zip(got, want):
        for a, b in zip(mine, theirs):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14, err_msg=reduce)
