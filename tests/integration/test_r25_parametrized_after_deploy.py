"""A parametrization registered on a placed part after the deploy, then assigned through
(``part.weight = W``): torch runs the parametrization's ``right_inverse`` and stores what
it gives in ``parametrizations.weight.original``. The part's class is the parametrized one
here, not on its worker, and the assignment went to the worker's plain copy, which raised
``TypeError: cannot assign 'torch.FloatTensor' as parameter 'weight'``. The setter of the
class it has now runs here, as in one process."""
import numpy as np
import pytest
from helpers import deployed_run, same_logs

import disthook as torch
from disthook import nn
from disthook.nn.utils import parametrizations, parametrize

pytestmark = pytest.mark.timeout(240)
CLUSTER_WORKERS = 2


class Symmetric(nn.Module):
    def forward(self, X):
        return X.triu() + X.triu(1).transpose(-1, -2)

    def right_inverse(self, A):
        return A.triu()


class LowRank(nn.Module):
    """Two tensors from one: ``right_inverse`` returns a tuple."""

    def forward(self, A, B):
        return A @ B

    def right_inverse(self, W):
        return W[:, :2].clone(), torch.eye(2, W.shape[1])


def chain():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 5), nn.Tanh(), nn.Linear(5, 5), nn.Tanh(),
                         nn.Linear(5, 4))


def assign_and_train(model) -> list:
    parametrize.register_parametrization(model[2], "weight", Symmetric())
    parametrize.register_parametrization(model[4], "weight", LowRank())
    parametrizations.orthogonal(model[0])
    W = torch.linspace(-1, 1, 25).reshape(5, 5)
    model[2].weight = W
    model[4].weight = W[:4] * 2
    model[0].weight = torch.eye(5).flip(0)
    log = [model[2].weight.detach().numpy(), model[4].weight.detach().numpy(),
           model[0].weight.detach().numpy(), sorted(model.state_dict())]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.linspace(-2, 2, 20).reshape(4, 5)
    for _ in range(2):
        opt.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        log += [loss.detach().numpy(),
                [(n, p.grad.numpy()) for n, p in model.named_parameters()]]
    return log + [model(x).detach().numpy(),
                  np.asarray(type(model[2]).__name__ == "ParametrizedLinear")]


def test_assigning_a_parametrized_tensor_of_a_placed_part_runs_right_inverse(cluster):
    got, want = deployed_run(cluster, chain, assign_and_train)
    same_logs(got, want, rtol=1e-4, atol=1e-5, where="parametrized")
