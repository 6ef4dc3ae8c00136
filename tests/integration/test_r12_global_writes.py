"""A placed module's forward that changes a global of the program in place (a tensor hook it
registers appending to the script's list, as hook-logging code does) changes the worker's
copy, which the program never sees: the deploy warns, naming the class and the global. Kept
on the module, the list comes back after each call, and nothing warns."""
import warnings

import pytest

import disthook as torch
from disthook import nn

pytestmark = pytest.mark.timeout(240)

CLUSTER_WORKERS = 2  # (the conftest's cluster fixture)

LOG = []


class LogsToAGlobal(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x):
        h = self.fc(x)
        h.register_hook(lambda g: LOG.append(g.sum().item()))
        return h


class LogsToItself(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc, self.log = nn.Linear(3, 3), []

    def forward(self, x):
        h = self.fc(x)
        h.register_hook(lambda g: self.log.append(g.sum().item()))
        return h


def test_a_forward_that_changes_a_global_warns_at_deploy(cluster):
    model = nn.Sequential(LogsToAGlobal(), LogsToAGlobal())
    with pytest.warns(RuntimeWarning, match="LogsToAGlobal.forward changes the global 'LOG'"):
        deployed = cluster.deploy(model, stages=2)
    try:
        deployed(torch.randn(2, 3)).sum().backward()
        assert LOG == []  # what the warning says: the workers' copies got the items
    finally:
        deployed.close()


def test_a_list_on_the_module_comes_back_and_nothing_warns(cluster):
    model = nn.Sequential(nn.Linear(3, 3), LogsToItself())
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        deployed = cluster.deploy(model, stages=2)
    try:
        deployed(torch.randn(2, 3)).sum().backward()
        assert len(deployed[1].log) == 1
    finally:
        deployed.close()
