"""A placed part that returns a probability distribution (pytorch-a2c-ppo-acktr's policy head,
``return FixedCategorical(logits=self.linear(x))``) cannot give it back to the client: the
error says so, and says to return the distribution's parameters and make it in the caller."""
import pytest

import disthook as torch
from disthook import nn

CLUSTER_WORKERS = 2


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 3)

    def forward(self, x):
        return torch.distributions.Categorical(logits=self.linear(x))


class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.base = nn.Sequential(nn.Linear(4, 4), nn.Tanh())
        self.dist = Head()

    def forward(self, x):
        return self.dist(self.base(x)).entropy()


def test_a_part_that_returns_a_distribution_says_what_to_return_instead(cluster):
    remote = cluster.deploy(Policy(), stages=2)
    try:
        with pytest.raises(TypeError, match=r"returned a Categorical, which cannot go back.*"
                                            r"return those \(its logits; its loc and scale\)"):
            remote(torch.randn(2, 4))
    finally:
        remote.close()
