"""Gradients with respect to tensors that hooks handle, as layer-attribution libraries take
them: ``autograd.grad(out, kept)`` where a forward hook on a worker's module kept its output;
a hook that returns a tensor of the client's own that requires grad (Captum's layer
integrated gradients) gets that tensor's gradient, by ``autograd.grad`` or in ``.grad``;
a kept tensor used on the client in what a backward differentiates is refused loudly
(its gradient could not flow on into the worker's graph). On 2 and 3 workers, for a chain
and for a model whose forward runs on the client."""
import copy

import numpy as np
import pytest

import disthook as torch
import disthook.nn.functional as F
from disthook import nn

pytestmark = pytest.mark.timeout(180)
CLUSTER_WORKERS = 3


class Residual(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(4, 5)
        self.mid = nn.Linear(5, 5)
        self.out = nn.Linear(5, 2)

    def forward(self, x):
        h = F.tanh(self.inp(x))
        return self.out(h + F.tanh(self.mid(h)))


def chain():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 5), nn.Tanh(),
                         nn.Linear(5, 2))


def residual():
    torch.manual_seed(0)
    return Residual()


def layer(model):
    """The hooked module: the middle Linear."""
    return model.mid if hasattr(model, "mid") else model[2]


def kept_gradient(model, x):
    kept = []
    handle = layer(model).register_forward_hook(lambda m, args, out: kept.append(out))
    out = model(x)
    (g,) = torch.autograd.grad(out.square().sum(), kept[0])
    handle.remove()
    return g


def fed_gradients(model, x):
    """The hook replaces the layer's output by a tensor of its own (scaled, requiring grad),
    as integrated gradients does; its gradient by autograd.grad, then by backward."""
    fed = []

    def replace(m, args, out):
        fed.append((out.detach() * 0.5).requires_grad_())
        return fed[-1]

    handle = layer(model).register_forward_hook(replace)
    (by_grad,) = torch.autograd.grad(model(x).sum(), fed[-1])
    model(x).sum().backward()
    handle.remove()
    return by_grad, fed[-1].grad


@pytest.mark.parametrize("stages", [2, 3])
@pytest.mark.parametrize("make", [chain, residual])
def test_gradients_with_respect_to_what_hooks_handle(cluster, make, stages):
    # seeded: x came from whatever stream the tests before had left, and the deployed sum of
    # a kept output's two gradients adds in another order than one process's, a float32
    # rounding that near a cancellation passed atol=1e-7 on some inputs (2.4e-7 seen)
    torch.manual_seed(1)
    x = torch.randn(6, 4)
    local = make()
    remote = cluster.deploy(copy.deepcopy(local), stages=stages)
    try:
        np.testing.assert_allclose(kept_gradient(remote, x).numpy(),
                                   kept_gradient(local, x).numpy(), rtol=1e-5, atol=1e-6)
        for got, want in zip(fed_gradients(remote, x), fed_gradients(local, x), strict=True):
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
        # a kept output used on the client in the loss: one process's gradients (the
        # workers' backward of the output, then one from the kept tensor)
        for model in (remote, local):
            model.zero_grad()
            kept = []
            layer(model).register_forward_hook(lambda m, args, out, kept=kept: kept.append(out))
            out = model(x)
            (out.sum() + kept[0].square().sum()).backward()
        for (name, p), q in zip(remote.named_parameters(), local.parameters(), strict=True):
            np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-5, atol=1e-6,
                                       err_msg=name)
        remote(x).sum().backward()  # kept, not used: a plain backward is untouched
    finally:
        remote.close()


@pytest.mark.parametrize("stages", [2, 3])
@pytest.mark.parametrize("make", [chain, residual])
def test_autograd_grad_leaves_every_grad_as_it_is(cluster, make, stages):
    """autograd.grad through a deployed model (Captum's saliency, an FGSM step inside a
    training loop) fills no parameter's .grad on the workers, as in one process; backward
    restricted to inputs= neither; a plain backward does."""
    torch.manual_seed(1)  # (as above)
    x = torch.randn(6, 4, requires_grad=True)
    local = make()
    remote = cluster.deploy(copy.deepcopy(local), stages=stages)
    try:
        for model in (local, remote):
            (g,) = torch.autograd.grad(model(x).sum(), x)
            assert g.shape == x.shape
            model(x).sum().backward(inputs=[x])
        assert all(p.grad is None for p in local.parameters())
        assert not remote.named_gradients()
        remote(x).sum().backward()
        local(x).sum().backward()
        grads = remote.named_gradients()
        for name, p in local.named_parameters():
            np.testing.assert_allclose(grads[name].numpy(), p.grad.numpy(), rtol=1e-5,
                                       atol=1e-7)
    finally:
        remote.close()


def neuron_gradients(model, x):
    """Captum's neuron attributions: the model's output to the kept layer output first
    (without retain_graph), then one neuron of the kept output to the input; then a
    backward from the kept output alone (its part of the parameters' gradients)."""
    kept = []
    handle = layer(model).register_forward_hook(lambda m, args, out: kept.append(out))
    xin = x.clone().requires_grad_(True)
    out = model(xin)
    (to_layer,) = torch.autograd.grad(out.sum(), kept[0])
    (to_input,) = torch.autograd.grad(kept[0][:, 0].sum(), xin)
    xin2 = x.clone().requires_grad_(True)
    model(xin2)  # its output dropped: the kept tensor holds the graph
    kept[1].square().sum().backward()
    handle.remove()
    return to_layer, to_input, xin2.grad


@pytest.mark.parametrize("stages", [2, 3])
@pytest.mark.parametrize("make", [chain, residual])
def test_a_kept_tensor_differentiates_to_the_input(cluster, make, stages):
    torch.manual_seed(1)  # (as above)
    x = torch.randn(6, 4)
    local = make()
    remote = cluster.deploy(copy.deepcopy(local), stages=stages)
    try:
        for got, want in zip(neuron_gradients(remote, x), neuron_gradients(local, x),
                             strict=True):
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
        grads = remote.named_gradients()  # the kept-only backward: the part below it
        assert sorted(grads) == sorted(n for n, p in local.named_parameters()
                                       if p.grad is not None)
        for name, p in local.named_parameters():
            if p.grad is not None:
                np.testing.assert_allclose(grads[name].numpy(), p.grad.numpy(), rtol=1e-5,
                                           atol=1e-7)
        # both gradients in two passes, as the refusal suggests: the sum of one process's
        remote.zero_grad()
        local.zero_grad()
        for model in (remote, local):
            kept = []
            handle = layer(model).register_forward_hook(lambda m, a, o, kept=kept:
                                                        kept.append(o))
            out = model(x)
            out.sum().backward(retain_graph=True)
            kept[0].square().sum().backward()
            handle.remove()
        grads = remote.named_gradients()
        for name, p in local.named_parameters():
            np.testing.assert_allclose(grads[name].numpy(), p.grad.numpy(), rtol=1e-5,
                                       atol=1e-7)
    finally:
        remote.close()
