"""torch.utils.checkpoint around deployed parts, against one process: the part runs
checkpointed on its worker (its saved tensors dropped and recomputed in the backward), so
its hooks fire again in the recomputation exactly where they do in one process (up to the
last saved tensor with early stop, all of them without), with the random stream it had;
outputs, gradients, tensor hooks and autograd.grad to a hook's tensor are one process's."""
import numpy as np
import pytest
from helpers import deployed_run, same_logs

import disthook as torch
from disthook import nn
from disthook.utils.checkpoint import checkpoint, set_checkpoint_early_stop

pytestmark = pytest.mark.timeout(240)
CLUSTER_WORKERS = 2


class Layer(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc, self.drop, self.act = nn.Linear(d, d), nn.Dropout(0.2), nn.GELU()

    def forward(self, x):
        return x + self.act(self.drop(self.fc(x)))


class Net(nn.Module):
    """Each layer checkpointed as transformers' gradient checkpointing does."""

    def __init__(self, reentrant: bool):
        super().__init__()
        self.inp = nn.Linear(4, 8)
        self.layers = nn.ModuleList([Layer(8) for _ in range(3)])
        self.out = nn.Linear(8, 2)
        self.reentrant = reentrant

    def forward(self, x):
        x = self.inp(x)
        for layer in self.layers:
            x = checkpoint(layer.__call__, x, use_reentrant=self.reentrant)
        return self.out(x)


def net(reentrant=False):
    torch.manual_seed(0)
    return Net(reentrant)


X = torch.tensor(np.linspace(-1, 1, 24, dtype=np.float32).reshape(6, 4))


def run(model, early_stop=True, reentrant=False) -> list:
    """(The reentrant checkpoint's forward runs under no_grad: its layers' outputs take no
    tensor hooks and have no gradient, in one process too.)"""
    fired, acts, grads = [], [], []
    for i, layer in enumerate(model.layers):
        def forward_hook(mod, inputs, out, i=i):
            fired.append(("forward", i))
            acts.append(out)
            if out.requires_grad:
                out.register_hook(lambda g, i=i: grads.append((i, g.numpy())))

        layer.register_forward_hook(forward_hook)
        layer.fc.register_forward_hook(lambda mod, i_, o, i=i: fired.append(("fc", i)))
        layer.fc.register_full_backward_hook(
            lambda mod, gi, go, i=i: fired.append(("fc backward", i)))
    torch.manual_seed(5)  # the dropout masks, and their recomputation
    with set_checkpoint_early_stop(early_stop):
        out = model(X)
        loss = out.pow(2).sum()
        g1 = None if reentrant else torch.autograd.grad(loss, acts[1], retain_graph=True)[0]
        loss.backward()
    return [out.detach().numpy(), None if g1 is None else g1.numpy(), fired, grads,
            *[p.grad.numpy() for p in model.parameters()]]


@pytest.mark.parametrize("early_stop", [True, False], ids=["early-stop", "whole-rerun"])
def test_checkpointed_deployed_layers_fire_and_differentiate_as_in_one_process(
        cluster, early_stop):
    same_logs(*deployed_run(cluster, net, lambda m: run(m, early_stop)))


def test_the_reentrant_checkpoint_around_deployed_layers_too(cluster):
    same_logs(*deployed_run(cluster, lambda: net(reentrant=True),
                            lambda m: run(m, reentrant=True)))
