"""Seed 2217 of the deployed hook fuzzer (F12, with extras), as the small program it came
down to: a forward hook of a deployed model's last module returns a tensor made in
``inference_mode``, in a forward that records no graph (``no_grad``, or the forward of a
reentrant ``torch.utils.checkpoint``). In one process the model's output is that inference
tensor (``is_inference()``; changed in place outside the mode it raises torch's
RuntimeError). Deployed, the worker kept it as one, but the client's output was a plain
tensor: ``is_inference()`` False and the in-place change made, silently. The answer now
says so (a kept value's "inference", a chain's result "inference"), and the client's
output is an inference tensor too.
"""
from __future__ import annotations

import pytest
from helpers import deployed_run

import disthook as torch
from disthook import nn

CLUSTER_WORKERS = 2


class _Root(nn.Module):
    """Its forward runs on the client: each block is a placed call."""

    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(3, 3), nn.Linear(3, 3)])

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


def _make(chain):
    def make():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 3)) if chain else _Root()
    return make


def _inference_result(chain, hooked=True):
    def run(model):
        def made_in_inference(module, args, out):
            with torch.inference_mode():
                return out * -1

        if hooked:
            (model[1] if chain else model.blocks[1]).register_forward_hook(made_in_inference)
        with torch.no_grad():
            out = model(torch.ones(2, 3))
        log = [out.is_inference(), out.numpy().round(5).tolist()]
        try:
            out.add_(1)
            log.append(("changed", out.numpy().round(5).tolist()))
        except RuntimeError as e:
            log.append(("raised", str(e)))
        return log
    return run


@pytest.mark.parametrize("chain", [True, False], ids=["chain", "placed_calls"])
def test_an_output_a_hook_made_in_inference_mode_is_an_inference_tensor(cluster, chain):
    got, want = deployed_run(cluster, _make(chain), _inference_result(chain))
    assert want[0] is True and want[2][0] == "raised"
    assert got == want


@pytest.mark.parametrize("chain", [True, False], ids=["chain", "placed_calls"])
def test_an_output_under_no_grad_alone_is_no_inference_tensor(cluster, chain):
    got, want = deployed_run(cluster, _make(chain), _inference_result(chain, hooked=False))
    assert want[0] is False and want[2][0] == "changed"
    assert got == want
