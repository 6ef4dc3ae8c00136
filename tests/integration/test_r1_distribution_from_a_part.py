"""A placed part that returns a probability distribution (pytorch-a2c-ppo-acktr's policy head,
``return FixedCategorical(logits=self.linear(x))``): it comes back to the client as a
distribution of its class with its parameters kept on the worker, so log_prob, entropy and
their gradients are what one process gives. One that holds what cannot travel (a transform
object) is refused, saying what to return instead."""
import copy

import numpy as np
import pytest

import disthook as torch
from disthook import nn

CLUSTER_WORKERS = 2


class FixedCategorical(torch.distributions.Categorical):
    def log_probs(self, actions):
        return super().log_prob(actions.squeeze(-1)).unsqueeze(-1)

    def mode(self):
        return self.probs.argmax(dim=-1, keepdim=True)


class Head(nn.Module):
    def __init__(self, make=FixedCategorical):
        super().__init__()
        self.linear = nn.Linear(4, 3)
        self.make = make

    def forward(self, x):
        return self.make(logits=self.linear(x))


class Policy(nn.Module):
    def __init__(self, make=FixedCategorical):
        super().__init__()
        self.base = nn.Sequential(nn.Linear(4, 4), nn.Tanh())
        self.dist = Head(make)

    def evaluate(self, x, actions):
        dist = self.dist(self.base(x))
        return dist.log_probs(actions), dist.entropy().mean(), dist.mode(), dist.batch_shape


def test_a_distribution_from_a_part_trains_as_in_one_process(cluster):
    torch.manual_seed(0)
    policy = Policy()
    x = torch.tensor(np.linspace(-1, 1, 20).reshape(5, 4))
    actions = torch.tensor([[0], [2], [1], [1], [0]])
    logs = []
    for model in (policy, cluster.deploy(copy.deepcopy(policy), stages=2)):
        log_probs, entropy, mode, batch_shape = model.evaluate(x.float(), actions)
        (-log_probs.mean() - 0.01 * entropy).backward()
        logs.append([log_probs.detach().numpy(), entropy.item(), mode.numpy(),
                     tuple(batch_shape), model.dist.linear.weight.grad.numpy(),
                     model.base[0].weight.grad.numpy()])
    assert logs[1][3] == logs[0][3] == (5,)
    for got, want in zip(logs[1], logs[0]):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


def lognormal(logits):
    return torch.distributions.LogNormal(logits, torch.ones_like(logits))


def test_a_distribution_that_cannot_travel_says_what_to_return_instead(cluster):
    remote = cluster.deploy(Policy(lognormal), stages=2)
    try:
        with pytest.raises(TypeError, match=r"returned a ExpTransform, which cannot go back.*"
                                            r"return those \(its logits; its loc and scale\)"):
            remote.dist(remote.base(torch.randn(2, 4)))
    finally:
        remote.close()
