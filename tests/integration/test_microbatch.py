"""Micro-batches (deploy(..., chunks=M)): the batch is cut along dim 0, the pieces flow
through the stages as a pipeline, and training equals whole-batch training in one process;
hooks fire once per micro-batch, as one process fires them on each micro-batch."""
import numpy as np
import pytest
from test_remote import make_net  # the same network as the other remote tests

import disthook as torch
from disthook import nn
from disthook.distributed import DistributedOptimizer

pytestmark = pytest.mark.timeout(240)


def batch(rows=10, seed=1):
    torch.manual_seed(seed)
    return torch.randn(rows, 8), torch.randint(0, 3, (rows,))


@pytest.mark.parametrize("stages", [2, 3])
@pytest.mark.parametrize("chunks", [1, 2, 4, 8])
def test_training_with_micro_batches_equals_whole_batch_training(cluster, stages, chunks):
    local = make_net()
    x, y = batch()
    opt = torch.optim.SGD(local.parameters(), lr=0.1, momentum=0.9)
    remote = cluster.deploy(make_net(), stages=stages, chunks=chunks)
    ropt = DistributedOptimizer(torch.optim.SGD, remote.parameters(), lr=0.1, momentum=0.9)
    try:
        for _ in range(3):
            for model, o in ((local, opt), (remote, ropt)):
                o.zero_grad()
                nn.functional.cross_entropy(model(x), y).backward()
                o.step()
        state = remote.state_dict()
        for name, p in local.state_dict().items():
            np.testing.assert_allclose(state[name].numpy(), p.numpy(), rtol=1e-5, atol=1e-6)
    finally:
        remote.close()


def test_input_gradient_and_hooks_per_micro_batch(cluster):
    local, x = make_net(), batch()[0]
    remote = cluster.deploy(make_net(), stages=2, chunks=3)  # 10 rows: 4, 3, 3
    try:
        log_local, log_remote = [], []
        for piece in (x[:4], x[4:7], x[7:]):  # one process, micro-batch by micro-batch
            local[2].register_forward_hook(
                lambda m, a, out: log_local.append(out.detach().clone()))
            local(piece)
            local[2]._forward_hooks.clear()
        remote[2].register_forward_hook(lambda m, a, out: log_remote.append(out.detach()))
        xr = x.clone().requires_grad_(True)
        xl = x.clone().requires_grad_(True)
        (remote(xr) ** 2).sum().backward()
        (local(xl) ** 2).sum().backward()
        assert [t.shape[0] for t in log_remote] == [4, 3, 3]
        for got, want in zip(log_remote, log_local):
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(xr.grad.numpy(), xl.grad.numpy(), rtol=1e-5, atol=1e-7)
    finally:
        remote.close()


class Total(nn.Module):
    def forward(self, x):
        return x.sum()


def test_micro_batches_need_outputs_that_keep_the_batch_dimension(cluster):
    remote = cluster.deploy(nn.Sequential(nn.Linear(8, 2), Total()), stages=2, chunks=2)
    try:
        with pytest.raises(RuntimeError, match=r"with chunks=2 the model's output must keep "
                                               r"the batch dimension: micro-batches of \[5, 5\]"):
            remote(batch()[0])
    finally:
        remote.close()
    with pytest.raises(ValueError, match="chunks must be a positive int, got 0"):
        cluster.deploy(make_net(), stages=2, chunks=0)
    few = cluster.deploy(make_net(), stages=2, chunks=8)
    try:  # more micro-batches than rows: one row each
        with torch.no_grad():
            np.testing.assert_allclose(few(batch(3)[0]).numpy(), make_net()(batch(3)[0]).numpy(),
                                       rtol=1e-6, atol=1e-7)
    finally:
        few.close()
