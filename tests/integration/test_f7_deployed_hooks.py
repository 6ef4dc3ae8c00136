"""What the differential hook fuzzer's sixth round left on deployed models (its seeds named
below), each as the small program it came down to.

A legacy ``register_backward_hook`` on a part that returns its input as it came (seed 1568:
an ``nn.Identity`` whose input is another part's output): in one process the hook sits on
the node of the op that made the input (``TanhBackward``) and sees that node's grad_input.
The worker put it on the node standing for the input it received, so the hook saw the
gradient unchanged (grad_input == grad_output), silently. That op ran elsewhere; the worker
now refuses the hook there, at the forward, with NotImplementedError."""
import warnings

import numpy as np
import pytest

import disthook as torch
from disthook import nn

CLUSTER_WORKERS = 2


class _ThroughIdentity(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = nn.Linear(3, 3), nn.Identity(), nn.Linear(3, 3)

    def forward(self, x):
        return self.c(self.b(self.a(x).tanh()))


def _legacy_hook_on_identity(model) -> list:
    seen = []
    model.b.register_backward_hook(lambda m, gi, go: seen.append((gi[0].numpy(),
                                                                  go[0].numpy())))
    return seen


def test_a_legacy_hook_on_a_part_that_returns_its_input_is_refused(cluster):
    torch.manual_seed(0)
    model = _ThroughIdentity()
    seen = _legacy_hook_on_identity(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (torch's word on legacy hooks)
        model(torch.ones(2, 3)).sum().backward()
    (grad_input, grad_output), = seen  # one process: tanh's node, its own grad_input
    assert not np.allclose(grad_input, grad_output)
    model = _ThroughIdentity()
    seen = _legacy_hook_on_identity(model)
    remote = cluster.deploy(model, stages=2)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with pytest.raises(NotImplementedError,
                               match="register_backward_hook on Identity.*full_backward"):
                remote(torch.ones(2, 3)).sum().backward()
        assert seen == []
    finally:
        remote.close()
