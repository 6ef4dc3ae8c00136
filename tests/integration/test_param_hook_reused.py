"""A deployed parameter's tensor hook where several calls of one forward use the parameter
(a placed module called twice, tied weights in two placed parts): the workers give each
call's gradient to the hook apart, where one process fires it once with their sum. Until
that is summed first, the client says so when the hook fires again in one backward; a
parameter used once stays silent."""
import warnings

import pytest

import disthook as torch
from disthook import nn

pytestmark = pytest.mark.timeout(240)
CLUSTER_WORKERS = 2


class Twice(nn.Module):
    def __init__(self):
        super().__init__()
        self.block, self.head = nn.Linear(4, 4), nn.Linear(4, 2)

    def forward(self, x):
        return self.head(torch.tanh(self.block(torch.tanh(self.block(x)))))


def test_a_hook_on_a_parameter_two_calls_use_warns_and_one_use_does_not(cluster):
    torch.manual_seed(0)
    remote = cluster.deploy(Twice(), stages=2)
    try:
        fired = []
        remote.block.weight.register_hook(lambda g: fired.append("block"))
        remote.head.weight.register_hook(lambda g: fired.append("head"))
        with pytest.warns(RuntimeWarning, match=r"tensor hook on 'block.weight' of a deployed "
                                                r"model fired again in this backward"):
            remote(torch.ones(3, 4)).sum().backward()
        assert fired.count("block") == 2 and fired.count("head") == 1
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the head's alone: no warning
            remote.block.weight.requires_grad_(False)
            remote(torch.ones(3, 4)).sum().backward()
    finally:
        remote.close()
