"""A global that a placed module's methods read, bound again after the deploy (a notebook's
later cell: ``SCALE = 2.0``, ``MASK = torch.ones(4)``): one process reads it at each call,
so the next call computes with the new value; deployed, the module now computes here with
it (as for a patched function, code_changes.py), and on its worker again once the old value
is put back. Before, the worker's copy of the class kept the values of the deploy: a
silently different result. Driven as IPython cells where IPython is installed, and as the
same program in a module of its own."""
import copy

import numpy as np
import pytest

import disthook as torch
from disthook import nn

pytestmark = pytest.mark.timeout(240)

CLUSTER_WORKERS = 2  # (the conftest's cluster fixture)

SCALE = 1.0
MASK = torch.ones(4)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return torch.tanh(self.fc(x)) * SCALE * MASK


def _both(net, ref, x):
    got, want = net(x), ref(x)
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-6)
    return float(want.sum())


def test_a_global_of_the_models_module_bound_again_is_read_at_the_next_call(cluster):
    global SCALE, MASK
    torch.manual_seed(0)
    net = nn.Sequential(Block(), nn.ReLU(), Block())
    ref, x = copy.deepcopy(net), torch.randn(3, 4)
    net = cluster.deploy(net, stages=2)
    try:
        first = _both(net, ref, x)
        SCALE = 2.0
        assert _both(net, ref, x) != first
        SCALE, MASK = 1.0, torch.tensor([1.0, 0.0, 1.0, 0.0])
        _both(net, ref, x)
    finally:
        SCALE, MASK = 1.0, torch.ones(4)
    assert _both(net, ref, x) == pytest.approx(first)
    net.close()


CELLS = [
    """
import copy
import disthook as torch
from disthook import nn
SCALE = 1.0
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
    def forward(self, x):
        return torch.tanh(self.fc(x)) * SCALE
torch.manual_seed(0)
net = nn.Sequential(Block(), nn.ReLU(), Block())
ref, x = copy.deepcopy(net), torch.randn(3, 4)
net = cluster.deploy(net, stages=2)
""",
    "results = [(net(x), ref(x))]",
    "SCALE = 3.0",  # a later cell
    "results.append((net(x), ref(x)))",
]


def test_a_notebook_global_set_in_a_later_cell_is_read_by_the_deployed_model(cluster):
    shell_module = pytest.importorskip(
        "IPython.core.interactiveshell", reason="IPython is not installed: no cells to run")
    shell = shell_module.InteractiveShell.instance()
    shell.user_ns["cluster"] = cluster
    for cell in CELLS:
        result = shell.run_cell(cell, silent=True)
        assert result.error_in_exec is None, result.error_in_exec
    results = shell.user_ns["results"]
    for got, want in results:
        np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-6)
    assert not np.allclose(results[0][1].detach().numpy(), results[1][1].detach().numpy())
    shell.user_ns["net"].close()
