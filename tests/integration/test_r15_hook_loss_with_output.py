"""A loss term computed here from tensors forward hooks got on the workers, added to a loss
of the model's output, in one backward (DeepInversion's batch-norm statistics, perceptual
and feature-matching losses, activation penalties), or in two backward passes over two
layers' hooks: the gradients one process gets. With a hook that a backward fires on the
model, that stays refused (it would fire once per pass)."""
import numpy as np
import pytest
from helpers import deployed_run

import disthook as torch
from disthook import nn


class Tree(nn.Module):  # a forward of its own: each part called from here
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU())
        self.neck = nn.Sequential(nn.Conv2d(4, 2, 3), nn.BatchNorm2d(2))
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        return self.head(self.neck(self.body(x)).flatten(1))


def chain():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Conv2d(4, 2, 3),
                         nn.BatchNorm2d(2), nn.Flatten(), nn.Linear(8, 3)).double().eval()


def tree():
    torch.manual_seed(0)
    return Tree().double().eval()


def _x():
    return torch.from_numpy(np.random.RandomState(1).rand(2, 3, 6, 6))


def _hooked(model):
    stats = []

    def hook(module, inputs, output):  # DeepInversion's statistics loss
        x = inputs[0]
        var = x.permute(1, 0, 2, 3).reshape(x.shape[1], -1).var(1, unbiased=False)
        stats.append(torch.norm(module.running_var - var) +
                     torch.norm(module.running_mean - x.mean([0, 2, 3])))

    handles = [m.register_forward_hook(hook) for m in model.modules()
               if isinstance(m, nn.BatchNorm2d)]
    return stats, handles


def _grads(model, x):
    return [x.grad.numpy().copy()] + [p.grad.numpy().copy() for p in model.parameters()]


def one_backward(model):
    stats, handles = _hooked(model)
    x = _x().requires_grad_(True)
    loss = torch.nn.functional.cross_entropy(model(x), torch.tensor([0, 2])) + 0.1 * sum(stats)
    loss.backward()
    for h in handles:
        h.remove()
    return [loss.item()] + _grads(model, x)


def two_backwards(model):
    stats, handles = _hooked(model)
    x = _x().requires_grad_(True)
    model(x).pow(2).sum().backward(retain_graph=True)
    sum(stats).backward()  # the hooks' tensors of both stages, after the output's backward
    for h in handles:
        h.remove()
    return _grads(model, x)


def _same(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("make", [chain, tree], ids=["chain", "tree"])
def test_hook_loss_with_output_in_one_backward(cluster, make):
    got, want = deployed_run(cluster, make, one_backward)
    _same(got, want)


@pytest.mark.parametrize("make", [chain, tree], ids=["chain", "tree"])
def test_hook_losses_of_two_stages_after_the_output(cluster, make):
    got, want = deployed_run(cluster, make, two_backwards)
    _same(got, want)


def test_with_a_backward_hook_it_stays_refused(cluster):
    model = cluster.deploy(chain(), stages=2)
    try:
        seen = []
        model[3].register_full_backward_hook(lambda m, gi, go: seen.append(go[0].sum()))
        with pytest.raises(RuntimeError, match="would fire in each with a part of the gradient"):
            one_backward(model)
    finally:
        model.close()

