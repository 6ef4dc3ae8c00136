"""What the hook fuzzer's seeds left by F9 came down to on deployed models (F11), each as
the small program it came down to.

Seed 2007: a legacy ``register_backward_hook`` on a chain (``nn.Sequential`` deployed with
``stages=``) whose last module's output a client forward hook replaced (``o * -1.0``). In
one process the legacy hook sits on the node of that hook's last op, ``MulBackward0``, and
gets its grad_input ``(g, None)`` (the scalar's slot None). Deployed, the replacement was
computed on the client and stood on the worker as one node over the hook's tensors (the
module's input and output), so the hook got ``(None, g)``: a silent wrong value. The worker
cannot know the grad_input of an op that ran on the client: it now refuses such a hook
with NotImplementedError, at the call.

Seed 1965: see below (a full hook on a part beside a legacy hook on the model).
"""
from __future__ import annotations

import numpy as np
import pytest
from helpers import deployed_run

import disthook as torch
from disthook import nn

CLUSTER_WORKERS = 2


def _make():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 3), nn.Tanh())


def _legacy_grads(model, replace=True, on_root=True):
    """A legacy hook (on the model, or on its last module) logs what it gets; a forward
    hook on the last module replaces its output (or not)."""
    log = []
    if replace:
        model[1].register_forward_hook(lambda m, args, out: out * -1.0)
    target = model if on_root else model[1]
    target.register_backward_hook(lambda m, gi, go: log.append(
        [None if g is None else g.numpy().copy() for g in gi]))
    x = torch.tensor([[1.0, -2.0, 3.0], [0.5, 0.0, -1.0]], requires_grad=True)
    model(x).sum().backward()
    return log


@pytest.mark.parametrize("on_root", [True, False])
def test_a_legacy_hook_on_a_client_hooks_result_is_refused(cluster, on_root):
    want = _legacy_grads(_make(), on_root=on_root)
    assert want[0][1] is None and want[0][0] is not None  # (g, None) in one process
    remote = cluster.deploy(_make(), stages=2)
    try:
        with pytest.raises(NotImplementedError, match="client hook") as caught:
            _legacy_grads(remote, on_root=on_root)
        assert "register_full_backward_hook" in str(caught.value)
    finally:
        remote.close()


def test_a_legacy_hook_without_a_client_result_is_as_in_one_process(cluster):
    """The refusal is only where a client hook computed the output: the model's legacy hook
    on its own output still gets the last op's grad_input."""
    got, want = deployed_run(cluster, _make, lambda m: _legacy_grads(m, replace=False))
    assert len(got) == len(want) == 1
    for a, b in zip(got[0], want[0]):
        np.testing.assert_allclose(a, b)


# Seed 1965: a legacy hook on a model whose forward runs here (its parts placed) and a full
# backward hook on a part. The model's legacy hooks run on the parts' workers as a legacy
# hook of each part (``glue.route_node_hooks``), and the worker refused the part's full hook
# (RuntimeError "Cannot use both regular backward hooks and full backward hooks on a single
# Module") where one process runs: the two are on different modules there.

class _Root(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(3, 3), nn.Tanh())

    def forward(self, x):
        return self.body(x) * 2.0


def _full_then_legacy(model):
    """A full hook on the part, then a legacy hook on the model; two backward passes."""
    log = []
    model.body.register_full_backward_hook(
        lambda m, gi, go: log.append(("full", go[0].numpy().copy())))
    model.register_backward_hook(lambda m, gi, go: log.append(
        ("legacy", [None if g is None else g.numpy().copy() for g in gi])))
    x = torch.tensor([[1.0, -2.0, 3.0], [0.5, 0.0, -1.0]], requires_grad=True)
    for _ in range(2):
        model(x).sum().backward()
    return log


def test_a_full_hook_on_a_part_beside_a_legacy_hook_on_the_model(cluster):
    def make():
        torch.manual_seed(0)
        return _Root()

    got, want = deployed_run(cluster, make, _full_then_legacy, stages=1)
    assert [e[0] for e in got] == [e[0] for e in want] == ["legacy", "full"] * 2
    for (_, a), (_, b) in zip(got, want):
        for u, v in zip(a if isinstance(a, list) else [a], b if isinstance(b, list) else [b]):
            assert (u is None) == (v is None)
            if u is not None:
                np.testing.assert_allclose(u, v, rtol=1e-6)


def test_a_full_hook_on_a_part_after_the_models_legacy_hook_ran_is_refused(cluster):
    """The other order: the model's legacy hook is routed to the part at the model's first
    call; a full hook on the part after that is refused clearly, and the part's other hooks
    still register."""
    remote = cluster.deploy(_Root(), stages=1)
    try:
        remote.register_backward_hook(lambda m, gi, go: None)
        x = torch.ones(2, 3, requires_grad=True)
        remote(x).sum().backward()
        with pytest.raises(NotImplementedError, match="before the model's first call"):
            remote.body.register_full_backward_hook(lambda m, gi, go: None)
        seen = []
        remote.body.register_forward_hook(lambda m, a, o: seen.append(1))
        remote(x).sum().backward()
        assert seen == [1]
    finally:
        remote.close()
