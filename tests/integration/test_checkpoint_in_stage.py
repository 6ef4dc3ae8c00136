"""Activation checkpointing inside a deployed model's stage (torch.utils.checkpoint in a
block's forward, run on its worker): the same outputs and gradients as one process, by plain
backward and by a pipelined train_step, with a client hook inside the checkpointed part
firing as in one process (once in forward, and again when backward recomputes it)."""
import copy

import numpy as np
import pytest

import disthook as torch
from disthook import nn
from disthook.utils.checkpoint import checkpoint

pytestmark = pytest.mark.timeout(180)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.f = nn.Sequential(nn.Linear(6, 12), nn.GELU(), nn.Linear(12, 6))

    def forward(self, x):
        return x + checkpoint(self.f, x, use_reentrant=False)


def model():
    torch.manual_seed(0)
    return nn.Sequential(Block(), Block(), Block(), nn.Linear(6, 2))


def test_checkpointed_blocks_on_workers_give_one_process_gradients(cluster):
    local = model()
    x, y = torch.randn(8, 6), torch.randn(8, 2)
    remote = cluster.deploy(copy.deepcopy(local), stages=2, chunks=2)
    try:
        calls = {"local": 0, "remote": 0}
        for name, m in (("local", local), ("remote", remote)):
            m[1].f[0].register_forward_hook(
                lambda mod, args, out, name=name: calls.__setitem__(name, calls[name] + 1))
        nn.functional.mse_loss(local(x), y).backward()
        expected = copy.deepcopy(local)  # its gradients, for the train_step below
        nn.functional.mse_loss(remote(x), y).backward()
        assert calls["remote"] == 2 * calls["local"] == 4  # 2 micro-batches: twice each
        grads = remote.named_gradients()
        for name, p in local.named_parameters():
            np.testing.assert_allclose(grads[name].numpy(), p.grad.numpy(), rtol=1e-5,
                                       atol=1e-7, err_msg=name)
        remote.zero_grad()
        remote.train_step(x, y, nn.functional.mse_loss)  # mean over the whole batch
        grads = remote.named_gradients()
        for name, p in expected.named_parameters():
            np.testing.assert_allclose(grads[name].numpy(), p.grad.numpy(), rtol=1e-5,
                                       atol=1e-7, err_msg=name)
    finally:
        remote.close()
