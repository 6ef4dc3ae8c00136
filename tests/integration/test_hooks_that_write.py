"""Client hooks that ask the workers something or write to the model while the call that
fired them runs on a worker: a read of a weight, an attribute the module's forward reads.
Each against the same program in one process; none may hang (they did: the call's answer,
come while the hook asked its own question, was dropped)."""
import numpy as np
import pytest

import disthook as torch
from disthook import nn

pytestmark = pytest.mark.timeout(240)
CLUSTER_WORKERS = 2


class Scaled(nn.Linear):
    """A Linear whose forward reads a plain tensor attribute (``w_eff``) set by hooks."""

    def __init__(self, a, b):
        super().__init__(a, b)
        self.w_eff = self.weight.detach() * 1.0

    def forward(self, x):
        return nn.functional.linear(x, self.w_eff, self.bias)


def chain():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 6), nn.ReLU(), Scaled(6, 6), nn.Tanh(), nn.Linear(6, 2))


X = torch.tensor(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4))


def calls(model, hook, n=3) -> list:
    model[2].register_forward_pre_hook(hook)
    return [model(X).detach().numpy() for _ in range(n)]


@pytest.mark.parametrize("hook", [
    lambda m, i: setattr(m, "seen", float((m.weight * 2).detach().sum())),  # reads a weight there
    lambda m, i: setattr(m, "w_eff", torch.ones(6, 6) * (getattr(m, "n", 0) + 1)),
    lambda m, i: setattr(m, "w_eff", m.weight.detach() * 0.5),  # from its own weight
], ids=["reads", "writes", "writes-from-weight"])
def test_a_hook_that_asks_or_writes_during_a_call_there_gives_one_process_results(
        cluster, hook):
    want = calls(chain(), hook)
    remote = cluster.deploy(chain(), stages=2)
    try:
        for got, expected in zip(calls(remote, hook), want):
            np.testing.assert_allclose(got, expected, rtol=1e-6)
    finally:
        remote.close()
