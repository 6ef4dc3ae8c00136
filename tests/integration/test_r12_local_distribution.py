"""A policy head that returns a distribution of a class made inside a function (an
actor-critic's ``FixedNormal``, made by a factory the module calls in ``__init__``), deployed
on the workers of one's own cluster: the class went to the worker by value, and the
distribution the worker returns is one of the program's own class here, as in one process.
Where the program holds two classes of that name (the factory called twice) it cannot be told
which one the worker's is: a TypeError that says so."""
import numpy as np
import pytest

import disthook as torch
from disthook import nn

pytestmark = pytest.mark.timeout(240)

CLUSTER_WORKERS = 2  # (the conftest's cluster fixture)


def make_policy_class():
    class FixedNormal(torch.distributions.Normal):
        def log_probs(self, actions):
            return super().log_prob(actions).sum(-1, keepdim=True)

        def mode(self):
            return self.mean

    return FixedNormal


class DiagGaussian(nn.Module):
    def __init__(self, dist_cls):
        super().__init__()
        self.fc_mean = nn.Linear(4, 2)
        self.logstd = nn.Parameter(torch.full((2,), -0.5))
        self.dist_cls = dist_cls

    def forward(self, x):
        return self.dist_cls(self.fc_mean(x), self.logstd.exp())


class ActorCritic(nn.Module):
    def __init__(self, dist_cls):
        super().__init__()
        self.body = nn.Linear(3, 4)
        self.dist = DiagGaussian(dist_cls)

    def forward(self, x):
        return self.dist(self.body(x).tanh())


def loss_of(model, x, actions):
    dist = model(x)
    return -dist.log_probs(actions).mean() - 0.01 * dist.entropy().mean(), dist


def test_a_distribution_class_made_in_a_function_comes_back_as_the_program_s(cluster):
    cls = make_policy_class()
    torch.manual_seed(0)
    model, x, actions = ActorCritic(cls), torch.randn(5, 3), torch.randn(5, 2)
    want, _ = loss_of(model, x, actions)
    want.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    deployed = cluster.deploy(model, stages=2)
    try:
        got, dist = loss_of(deployed, x, actions)
        assert type(dist) is cls
        np.testing.assert_allclose(dist.mode().detach().numpy(),
                                   model.dist.fc_mean(model.body(x).tanh()).detach().numpy(),
                                   rtol=1e-6)
        got.backward()
        np.testing.assert_allclose(got.item(), want.item(), rtol=1e-6)
        for n, p in deployed.named_parameters():
            np.testing.assert_allclose(p.grad.numpy(), grads[n].numpy(), rtol=1e-5, atol=1e-7)
    finally:
        deployed.close()


def test_two_classes_of_that_name_here_are_refused_saying_so(cluster):
    first, second = make_policy_class(), make_policy_class()
    deployed = cluster.deploy(ActorCritic(second), stages=2)
    try:
        with pytest.raises(TypeError, match="made inside a function.*several"):
            deployed(torch.randn(5, 3))
    finally:
        deployed.close()
    assert first is not second
