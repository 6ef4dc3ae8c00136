"""minGPT's blocks, whose MLP is a lambda over their ModuleDict, deploy unchanged: each
worker makes its blocks again by calling Block(config) (the config a plain object or a
dataclass), then gives them the client's values; forward and backward equal one process's."""
import numpy as np
import pytest
from test_shipping import CONFIGS, Block

import disthook as torch
from disthook import nn

pytestmark = pytest.mark.timeout(180)
CLUSTER_WORKERS = 2


class Stack(nn.Module):
    """Blocks looped over in forward: the root runs on the client, each block on its worker."""

    def __init__(self, config):
        super().__init__()
        self.h = nn.ModuleList([Block(config) for _ in range(2)])
        self.ln_f = nn.LayerNorm(config.n_embd)

    def forward(self, x):
        for block in self.h:
            x = block(x)
        return self.ln_f(x)


def chain(config):
    return nn.Sequential(Block(config), Block(config), nn.LayerNorm(config.n_embd))


def made(kind, config):
    torch.manual_seed(0)
    model = kind(config())
    with torch.no_grad():  # values no constructor call gives: the workers must get these
        for p in model.parameters():
            p.add_(0.1 * torch.randn(p.shape))
    return model


def forward_backward(model, x):
    x = x.detach().clone().requires_grad_()
    out = model(x)
    (out * out).sum().backward()
    return out.detach().numpy(), x.grad.numpy()


@pytest.mark.parametrize("kind", [chain, Stack], ids=["chain", "loop-on-the-client"])
@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
def test_blocks_with_a_lambda_deploy_and_give_one_process_results(cluster, kind, config):
    x = torch.randn(2, 5, 8)
    local = made(kind, config)
    expected_out, expected_grad = forward_backward(local, x)
    remote = cluster.deploy(made(kind, config), stages=2)
    try:
        out, grad = forward_backward(remote, x)
        np.testing.assert_allclose(out, expected_out, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(grad, expected_grad, rtol=1e-6, atol=1e-6)
        grads = remote.named_gradients()
        assert grads.keys() == dict(local.named_parameters()).keys()
        for name, p in local.named_parameters():
            np.testing.assert_allclose(grads[name].numpy(), p.grad.numpy(), rtol=1e-6,
                                       atol=1e-6, err_msg=name)
    finally:
        remote.close()
