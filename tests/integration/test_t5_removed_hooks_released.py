"""A removed client hook of a deployed model, and what it captures, is kept only while a
call under way or a graph recorded before its removal may still fire it (as one process's
graph keeps the hooks it took), then released. Before, the client kept the last 1024
removed hooks alive whatever ran (and with them a program's closures over big tensors)."""
import gc
import weakref

import numpy as np
import pytest

import disthook as torch
from disthook import nn

pytestmark = pytest.mark.timeout(120)


class Big:  # what a program's hook captures (a big tensor, a model)
    def __init__(self):
        self.data = np.zeros(1 << 16)


@pytest.fixture
def remote(cluster):
    torch.manual_seed(0)
    deployed = cluster.deploy(nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3)),
                              stages=2)
    yield deployed
    deployed.close()


def _alive(refs) -> int:
    gc.collect()
    return sum(r() is not None for r in refs)


def test_hooks_removed_in_a_loop_are_released(remote):
    refs, fired = [], []
    x = torch.ones(2, 4, requires_grad=True)
    for _ in range(20):
        big = Big()
        refs.append(weakref.ref(big))
        handles = [
            remote[0].register_forward_hook(lambda m, a, o, big=big: fired.append(1)),
            remote[2].register_full_backward_hook(
                lambda m, gi, go, big=big: fired.append(2)),
        ]
        remote(x).sum().backward()
        for h in handles:
            h.remove()
        del big, handles
    assert fired.count(1) == 20 and fired.count(2) == 20
    assert _alive(refs) == 0


def test_a_hook_removed_by_a_running_hook_is_released_after_the_call(remote):
    refs, fired = [], []
    x = torch.ones(2, 4, requires_grad=True)
    for _ in range(5):
        big = Big()
        refs.append(weakref.ref(big))
        later = remote[2].register_forward_hook(lambda m, a, o, big=big: fired.append("later"))
        first = remote[0].register_forward_hook(lambda m, a, o, later=later: later.remove())
        out = remote(x)
        first.remove()
        del big, later, first
        assert _alive(refs[-1:]) == 1  # its graph (out) may still fire what it took
        out.sum().backward()
        del out
    assert _alive(refs) == 0


def test_a_graph_keeps_the_hooks_removed_after_it_was_recorded(remote):
    """retain_graph, the full backward hook removed, a second backward: it fires again (as
    in one process), and goes with the graph."""
    fired = []
    big = Big()
    ref = weakref.ref(big)
    handle = remote[2].register_full_backward_hook(lambda m, gi, go, big=big: fired.append(1))
    x = torch.ones(2, 4, requires_grad=True)
    loss = remote(x).sum()
    loss.backward(retain_graph=True)
    handle.remove()
    del big, handle
    other = remote(x).sum()  # recorded after the removal: fires nothing removed
    assert _alive([ref]) == 1
    loss.backward()
    assert fired == [1, 1]
    other.backward()
    assert fired == [1, 1]
    del loss
    assert _alive([ref]) == 0
