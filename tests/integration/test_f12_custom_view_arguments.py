"""Seed 2159 of the deployed hook fuzzer (F12), as the small program it came down to.

A model whose forward runs on the client calls two placed parts, the first with a full
backward hook: in one process its output is that hook's view (a custom Function's view
output), and the second part's forward pre-hook (or its own forward) changing its argument
in place raises torch's "is a view and is being modified inplace". Deployed, the first
part's output reached the second part's worker as a plain computed tensor: the change went
through, silently, and the output differed. The call now says which of its tensors are such
views (the forward record's "views"), and the worker's copy refuses the change as one
process does, in its forward and in the client's hooks given it.
"""
from __future__ import annotations

import pytest
from helpers import deployed_run

import disthook as torch
from disthook import nn

CLUSTER_WORKERS = 2


class _Doubling(nn.Linear):
    """A Linear that doubles its argument in place first (when asked)."""

    def __init__(self):
        super().__init__(3, 3)
        self.in_place = False

    def forward(self, x):
        if self.in_place:
            x.mul_(2)
        return super().forward(x)


class _Root(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(3, 3), _Doubling()])

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


def _make():
    torch.manual_seed(0)
    return _Root()


def _x():
    return torch.tensor([[1.0, -2.0, 3.0], [0.5, 0.0, -1.0]], requires_grad=True)


def test_a_pre_hook_changing_a_full_hooks_view_raises_at_the_statement(cluster):
    def run(model):
        log = []

        def pre(module, args):
            try:
                args[0].mul_(-1)
                log.append("changed")
            except RuntimeError as e:
                log.append(("raised", str(e)))

        model.blocks[0].register_full_backward_hook(lambda m, gi, go: log.append("bwd"))
        model.blocks[1].register_forward_pre_hook(pre)
        out = model(_x())
        out.sum().backward()
        log.append(("out", out.detach().numpy().round(5).tolist()))
        return log

    got, want = deployed_run(cluster, _make, run)
    assert want[0][0] == "raised" and "is a view and is being modified inplace" in want[0][1]
    assert got == want


def test_a_part_changing_a_full_hooks_view_raises_as_in_one_process(cluster):
    def run(model):
        model.blocks[0].register_full_backward_hook(lambda m, gi, go: None)
        model.blocks[1].in_place = True
        with pytest.raises(RuntimeError, match="is a view and is being modified inplace") as e:
            model(_x())
        return str(e.value).splitlines()[0]

    got, want = deployed_run(cluster, _make, run)
    assert want in got


def test_without_the_full_hook_the_change_is_made_as_in_one_process(cluster):
    def run(model):
        model.blocks[1].in_place = True
        x = _x()
        out = model(x)
        out.sum().backward()
        return out.detach().numpy().round(5).tolist(), x.grad.numpy().round(5).tolist()

    got, want = deployed_run(cluster, _make, run)
    assert got == want
