"""The random stream through deployed parts with client hooks on them, against one
process: the masks a part's dropout draws, and the client's stream after the call. (A hook
answered before its worker went to sleep for it rewound the worker's stream to where the
call began: the next draws repeated, and the client's stream came back elsewhere.)"""
import pytest

import disthook as torch
from disthook import nn

pytestmark = pytest.mark.timeout(240)
CLUSTER_WORKERS = 2


class Twice(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Dropout(0.5), nn.Dropout(0.5)

    def forward(self, x):
        return self.b(self.a(x))


def chain():
    return nn.Sequential(nn.Dropout(0.5), nn.Dropout(0.5))


def draws(model) -> list:
    first = next(iter(model.children()))
    torch.manual_seed(5)
    first.register_forward_hook(lambda m, i, o: None)  # a hook that only looks
    out = [model(torch.ones(2, 16)).tolist() for _ in range(3)]
    return [*out, torch.rand(3).tolist()]


@pytest.mark.parametrize("make", [Twice, chain], ids=["own-forward", "chain"])
def test_draws_with_client_hooks_are_one_process_draws(cluster, make):
    want = draws(make())
    remote = cluster.deploy(make(), stages=2)
    try:
        assert draws(remote) == want
    finally:
        remote.close()
