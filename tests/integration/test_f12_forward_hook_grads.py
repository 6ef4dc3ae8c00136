"""The hook fuzzer's eighth round (F12) on deployed models: ``torch.autograd.grad`` inside
a forward hook of a placed part, from its output to its argument (seeds 2350, 2420).

Deployed, the worker keeps the call's graph only once its hooks have answered, so such a
product is refused with NotImplementedError (docs/hooks.md). Where an earlier hook of the
same call had been given the argument too (a global forward hook, a forward pre-hook), the
output's tensor here linked to it through that hook's tap, the check that refuses it did
not see the call, and the product asked the worker for a graph it did not have yet: an
internal RuntimeError ("no forward graph of context"). It is now refused the same way.
"""
from __future__ import annotations

import pytest

import disthook as torch
from disthook import nn

CLUSTER_WORKERS = 2


class _Root(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.blocks = nn.ModuleList([nn.Linear(3, 3), nn.Linear(3, 3)])

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


def _grads_in_forward(model, earlier: str):
    """A forward hook of the first part takes autograd.grad of its output to its argument;
    ``earlier``: the hook of the same call given the argument before it."""
    log = []

    def grads(m, args, out):
        (g,) = torch.autograd.grad(out.sum(), args[0], retain_graph=True)
        log.append(g.numpy().round(5).tolist())

    handles = []
    if earlier == "global":
        handles.append(nn.modules.module.register_module_forward_hook(
            lambda m, args, out: None))
    elif earlier == "pre":
        handles.append(model.blocks[0].register_forward_pre_hook(lambda m, args: None))
    handles.append(model.blocks[0].register_forward_hook(grads))
    try:
        model(torch.ones(2, 3, requires_grad=True)).sum().backward()
    finally:
        for h in handles:
            h.remove()
    return log


@pytest.mark.parametrize("earlier", ["global", "pre", "none"])
def test_a_product_in_a_forward_hook_is_refused_after_an_earlier_hook(cluster, earlier):
    assert len(_grads_in_forward(_Root(), earlier)) == 1  # one process: it runs
    remote = cluster.deploy(_Root(), stages=2)
    try:
        with pytest.raises(NotImplementedError, match="autograd.grad to a tensor that a "
                                                      "forward"):
            _grads_in_forward(remote, earlier)
    finally:
        remote.close()
