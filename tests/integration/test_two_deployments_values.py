"""One deployed model's activation passed to another deployed model's part (model stitching,
patching across a base and a fine-tuned model): the value, kept on the first model's worker,
goes to the second as a value, and its gradient comes back the same way; it waited 30 s for
a worker-to-worker copy that was never sent, then timed out. Values, gradients and the
stitching layer's gradient are one process's."""
import numpy as np
import pytest
from helpers import TwoLayers

import disthook as torch
from disthook import nn

pytestmark = pytest.mark.timeout(240)
CLUSTER_WORKERS = 2


Two = TwoLayers


def stitched(a, b, stitch):
    x = torch.linspace(-1, 1, 6).reshape(2, 3)
    target = a(x).detach()
    direct = b.q(torch.tanh(a.p(x)))  # a's first part, then b's last part
    y = b.q(stitch(a.p(x)))  # ... with a stitching layer here between them
    loss = (y - target).pow(2).mean() + direct.pow(2).mean()
    loss.backward()
    return [loss.detach(), a.p.weight.grad, b.q.weight.grad, stitch.weight.grad,
            b.p.weight.grad]


def made():
    torch.manual_seed(0)
    return Two(), Two(), nn.Linear(4, 4)


def test_a_value_of_one_deployment_goes_to_another_deployments_part(cluster):
    expected = stitched(*made())
    a, b, stitch = made()
    cluster.deploy(a, stages=2)
    cluster.deploy(b, stages=2)
    try:
        got = stitched(a, b, stitch)
        assert got[-1] is None and expected[-1] is None  # b's first part took no part
        for g, e in zip(got[:-1], expected[:-1]):
            np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-5, atol=1e-6)
    finally:
        a.close()
        b.close()
