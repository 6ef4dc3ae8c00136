"""A bfloat16 model's pipelined training step (``remote.train_step``): its activations and
gradients go between the stages as bfloat16 (a stage read them with ``Tensor.numpy()``,
which refuses bfloat16 as torch's does, and the step failed on its first send), and the
losses and gradients are one process's, micro-batch by micro-batch, bit for bit."""
import numpy as np
import pytest

import disthook as torch
from disthook import nn

pytestmark = pytest.mark.timeout(240)

ROWS, CHUNKS = 8, 4


def make_net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.Tanh(),
                         nn.Linear(16, 4)).to(torch.bfloat16)


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe", "zb-h1"])
def test_a_bfloat16_model_trains_in_a_pipeline_as_in_one_process(cluster, schedule):
    torch.manual_seed(1)
    x, y = torch.randn(ROWS, 8).to(torch.bfloat16), torch.randint(0, 4, (ROWS,))
    local = make_net()
    rows = ROWS // CHUNKS
    losses = []
    for i in range(0, ROWS, rows):  # one process, micro-batch by micro-batch, in order
        loss = nn.functional.cross_entropy(local(x[i:i + rows]), y[i:i + rows])
        losses.append(loss.item())
        (loss * (rows / ROWS)).backward()
    remote = cluster.deploy(make_net(), stages=2, chunks=CHUNKS, schedule=schedule)
    try:
        got = remote.train_step(x, y, nn.functional.cross_entropy)
        assert got.tolist() == losses
        for (name, p), q in zip(local.named_parameters(), remote.parameters()):
            assert q.grad is not None and q.grad.dtype == torch.bfloat16, name
            np.testing.assert_array_equal(q.grad.float().numpy(), p.grad.float().numpy(),
                                          err_msg=name)
    finally:
        remote.close()
