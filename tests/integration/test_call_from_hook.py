"""A client hook that calls a placed part of its own model while the call that fired it
waits (a logit lens decoding each block's output with the model's own head, inside the
block's forward hook): the part runs at once, nested, as a module called from a hook runs
inside the call in one process. It waited behind the call that fired the hook, which waited
for the hook: 30 s, then RemoteTimeout. Calls the client sends from outside a hook keep
their order."""
import numpy as np
import pytest

import disthook as torch
from disthook import nn

pytestmark = pytest.mark.timeout(240)
CLUSTER_WORKERS = 2


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.head = nn.Linear(3, 3), nn.Linear(3, 3), nn.Linear(3, 2)

    def forward(self, x):
        return self.head(torch.tanh(self.b(torch.tanh(self.a(x)))))


def decoded(model):
    lens = []
    handles = [part.register_forward_hook(lambda m, i, o: lens.append(model.head(o).detach()))
               for part in (model.a, model.b)]
    x = torch.linspace(-1, 1, 6).reshape(2, 3)
    with torch.no_grad():
        model(x)
    out = model(x)  # in grad mode too, and backward through the outer call
    out.sum().backward()
    for h in handles:
        h.remove()
    return [t.numpy() for t in lens] + [out.detach().numpy(), model.a.weight.grad.numpy()]


def test_a_hook_calls_a_part_on_the_worker_whose_call_fired_it(cluster):
    torch.manual_seed(0)
    expected = decoded(Net())
    torch.manual_seed(0)
    remote = cluster.deploy(Net(), stages=2)
    try:
        # b and head on one worker: the hook on b calls head there while b's call waits
        assert any({"b", "head"} <= set(names) for _, _, names in remote.workers())
        for got, want in zip(decoded(remote), expected, strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    finally:
        remote.close()
