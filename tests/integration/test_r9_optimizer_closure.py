"""``opt.step(closure)`` over a deployed model's parameters, where the closure zeroes the
gradients itself (Lightning's closure, many a LAMB or Lion script): the closure's
``zero_grad()`` reaches the workers' gradients, so each step sees its own gradient, as in
one process, not the sum of every step's so far."""
import numpy as np
import pytest

import disthook as torch
from disthook import nn, optim

pytestmark = pytest.mark.timeout(180)
CLUSTER_WORKERS = 2


class Net(nn.Module):
    """A forward of its own: the client runs it, each Linear on its worker."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(6, 8), nn.Linear(8, 3)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


def make_net(chain):
    torch.manual_seed(0)
    if chain:
        return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))
    return Net()


def train_with_closure(model, as_keyword):
    torch.manual_seed(1)
    x, y = torch.randn(10, 6), torch.randint(0, 3, (10,))
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for _ in range(3):
        def closure():
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            return loss
        loss = opt.step(closure=closure) if as_keyword else opt.step(closure)
        losses.append(loss.item())
    return losses, {n: p.detach().numpy().copy() for n, p in model.named_parameters()}


@pytest.mark.parametrize("chain", [False, True], ids=["own-forward", "sequential"])
@pytest.mark.parametrize("as_keyword", [False, True], ids=["positional", "keyword"])
def test_a_closure_that_zeroes_the_gradients_steps_as_in_one_process(cluster, chain,
                                                                    as_keyword):
    local_losses, local_params = train_with_closure(make_net(chain), as_keyword)
    remote = cluster.deploy(make_net(chain), stages=2)
    try:
        losses, params = train_with_closure(remote, as_keyword)
    finally:
        remote.close()
    np.testing.assert_allclose(losses, local_losses, rtol=1e-5)
    assert params.keys() == local_params.keys()
    for name in params:
        np.testing.assert_allclose(params[name], local_params[name], rtol=1e-5, atol=1e-6,
                                   err_msg=name)
