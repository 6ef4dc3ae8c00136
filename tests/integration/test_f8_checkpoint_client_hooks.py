"""``torch.utils.checkpoint.checkpoint(model, x)`` of a deployed model whose forward runs
here and calls its placed parts, with forward pre-hooks on the model (or global ones, or forward hooks with
always_call=True): in one process the backward reruns the checkpointed forward until it
has what it saved, so those hooks fire again; deployed only the parts are recomputed, on their workers, and those hooks do
not fire again. The client says so with a RuntimeWarning (fuzzer seed 1891)."""
from __future__ import annotations

import pytest

import disthook as T
from disthook import nn


class Net(nn.Module):  # its forward runs here, calling its one placed part
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        return self.lin(x) * 2


def _fired(remote) -> int:
    fired = []
    remote.register_forward_pre_hook(lambda m, args: fired.append(1))
    x = T.ones(2, 3, requires_grad=True)
    out = T.utils.checkpoint.checkpoint(remote, x, use_reentrant=False)
    out.sum().backward()
    return len(fired)


def test_a_checkpointed_model_forward_here_with_hooks_warns(cluster):
    T.manual_seed(0)
    assert _fired(Net()) == 2  # one process: the forward and its rerun
    remote = cluster.deploy(Net(), stages=1)
    try:
        with pytest.warns(RuntimeWarning, match="may not fire again"):
            _fired(remote)
    finally:
        remote.close()


def test_a_checkpointed_part_warns_nothing(cluster):
    import warnings

    remote = cluster.deploy(Net(), stages=1)
    try:
        x = T.ones(2, 3, requires_grad=True)
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            out = T.utils.checkpoint.checkpoint(remote.lin, x, use_reentrant=False)
            out.sum().backward()
    finally:
        remote.close()


def test_a_plain_forward_hook_under_early_stop_warns_nothing(cluster):
    import warnings

    T.manual_seed(0)
    remote = cluster.deploy(Net(), stages=1)
    fired = []
    try:
        remote.register_forward_hook(lambda m, a, o: fired.append(1))
        x = T.ones(2, 3, requires_grad=True)
        with warnings.catch_warnings():  # one process's rerun stops before it: fires once
            warnings.simplefilter("error", RuntimeWarning)
            out = T.utils.checkpoint.checkpoint(remote, x, use_reentrant=False)
            out.sum().backward()
    finally:
        remote.close()
    assert fired == [1]
