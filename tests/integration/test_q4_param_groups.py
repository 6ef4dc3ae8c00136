"""A param group added to an optimizer after its first step (progressive unfreezing:
``opt.add_param_group({"params": model.head.parameters()})``) is stepped by the worker
whose share of the optimizer was made before, as in one process; before, the share kept
its old groups and the new group's parameters on that worker silently never moved. A
group whose parameters change after the first step is refused there, saying so."""
import numpy as np
import pytest

import disthook as torch
from disthook import nn

pytestmark = pytest.mark.timeout(240)


CLUSTER_WORKERS = 2  # (the conftest's cluster fixture)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = nn.Linear(4, 8), nn.Linear(8, 8), nn.Linear(8, 2)

    def forward(self, x):
        return self.c(self.b(self.a(x).tanh()).tanh())


def train(model, opt, steps=2):
    torch.manual_seed(1)
    x, y = torch.randn(16, 4), torch.randn(16, 2)
    for _ in range(steps):
        opt.zero_grad()
        ((model(x) - y) ** 2).mean().backward()
        opt.step()


def unfreeze(model):
    opt = torch.optim.Adam([*model.a.parameters(), *model.b.parameters()], lr=0.01)
    train(model, opt)
    opt.add_param_group({"params": model.c.parameters(), "lr": 0.02, "betas": (0.8, 0.9)})
    train(model, opt)
    return [p.detach().numpy().copy() for p in model.parameters()]


def test_a_group_added_after_the_first_step_is_stepped(cluster):
    torch.manual_seed(0)
    want = unfreeze(Net())
    torch.manual_seed(0)
    model = cluster.deploy(Net(), stages=2)  # b and c on the second worker
    try:
        got = unfreeze(model)
    finally:
        model.close()
    for w, g in zip(want, got):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-7)


def test_a_group_whose_parameters_change_after_the_first_step_is_refused(cluster):
    model = cluster.deploy(Net(), stages=2)
    try:
        opt = torch.optim.SGD([*model.a.parameters(), *model.b.parameters()], lr=0.1)
        train(model, opt, steps=1)
        opt.param_groups[0]["params"].append(model.c.weight)
        with pytest.raises(Exception, match="cannot change after the first step"):
            train(model, opt, steps=2)
    finally:
        model.close()


def cosine(model):
    """A hand-written schedule computing lr and weight_decay with numpy (np.float64,
    np.float32), as training scripts do."""
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    torch.manual_seed(1)
    x, y = torch.randn(8, 4), torch.randn(8, 2)
    for i in range(3):
        for g in opt.param_groups:
            g["lr"] = 0.01 * 0.5 * (1 + np.cos(np.pi * i / 3))
            g["weight_decay"] = np.float32(0.01)
            g["betas"] = (np.float64(0.9), 0.99)
        opt.zero_grad()
        ((model(x) - y) ** 2).mean().backward()
        opt.step()
    return [p.detach().numpy().copy() for p in model.parameters()]


def test_hyperparameters_computed_with_numpy(cluster):
    torch.manual_seed(0)
    want = cosine(Net())
    torch.manual_seed(0)
    model = cluster.deploy(Net(), stages=2)
    try:
        got = cosine(model)
    finally:
        model.close()
    for w, g in zip(want, got):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-8)
