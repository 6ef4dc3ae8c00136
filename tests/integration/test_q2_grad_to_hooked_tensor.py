"""``torch.autograd.grad(score, kept)`` where ``kept`` is a tensor a forward hook was given
and put a tensor hook on (the Grad-CAM hook that saves the activation and hooks its
gradient, with an attribution that then differentiates to the saved activation): in one
process the gradient comes back, the tensor hook fires once and its change counts. Deployed,
the kept tensor was not reachable ("appears to not have been used in the graph")."""
import pytest

import disthook as torch
from disthook import nn

pytestmark = pytest.mark.timeout(240)
CLUSTER_WORKERS = 2


def made():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 3))


def attribution(model):
    x = torch.linspace(-1, 1, 12).reshape(3, 4)
    kept, log = {}, []

    def save(module, args, out):
        kept["act"] = out
        out.register_hook(lambda g: log.append(round(g.sum().item(), 5)))
        out.register_hook(lambda g: g * 2)

    model[1].register_forward_hook(save)
    out = model(x)
    (g,) = torch.autograd.grad(out[:, 2].sum(), kept["act"], retain_graph=True)
    out.sum().backward()
    return [g.tolist(), log, model[0].weight.grad.tolist()]


def test_autograd_grad_to_a_kept_tensor_that_a_hook_hooked(cluster):
    expected = attribution(made())
    assert len(expected[1]) == 2  # each backward fired the hook once
    remote = cluster.deploy(made(), stages=2)
    try:
        got = attribution(remote)
    finally:
        remote.close()
    assert got[1] == pytest.approx(expected[1], abs=1e-4)
    for g, e in zip((got[0], got[2]), (expected[0], expected[2])):
        assert torch.allclose(torch.tensor(g), torch.tensor(e), atol=1e-6)
