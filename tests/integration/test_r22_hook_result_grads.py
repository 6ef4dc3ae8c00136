"""A forward hook that returns a tensor it computed from the module's output (Captum's layer
gradients return ``output.clone()`` from their hook and keep it; TCAV's directional
derivatives then take ``autograd.grad(logits, that_clone)``), or a forward pre-hook that
returns new arguments: the program differentiates to the tensor it kept, as in one process.
Before, the deployed model's backward could not reach it ("appears to not have been used in
the graph"). A plain backward after such a hook, with tensor hooks or retain_grad on the kept
tensor, still gives one process's gradients and fires each hook once."""
import numpy as np
import pytest
from helpers import deployed_run, same_logs

import disthook as torch
from disthook import nn

CLUSTER_WORKERS = 2


class Tree(nn.Module):  # a forward of its own: each part called from here
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 5)
        self.act = nn.Tanh()
        self.b = nn.Linear(5, 3)

    def forward(self, x):
        return self.b(self.act(self.a(x)))


def tree():
    torch.manual_seed(0)
    return Tree().double()


def chain():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 6), nn.Tanh(),
                         nn.Linear(6, 3)).double()


def _x():
    return torch.from_numpy(np.random.RandomState(1).rand(3, 4))


def _layer(model):
    return model.act if isinstance(model, Tree) else model[3]


def layer_grads(model, pre=False, scale=1.0):
    """Captum's pattern: the hook returns a clone of the layer's output (or new inputs) and
    keeps it; the gradient of each sample's logit to it, one autograd.grad per class."""
    kept = {}

    def hook(module, inputs, output):
        kept["t"] = output.clone() * scale
        return kept["t"]

    def pre_hook(module, args):
        kept["t"] = args[0] * scale
        return (kept["t"],)

    layer = _layer(model)
    handle = layer.register_forward_pre_hook(pre_hook) if pre else \
        layer.register_forward_hook(hook)
    log = []
    for target in range(3):
        out = model(_x())
        (g,) = torch.autograd.grad(torch.unbind(out[:, target]), kept["t"])
        log.append(g.numpy().copy())
    handle.remove()
    log.append(out.detach().numpy())
    return log


@pytest.mark.parametrize("make", [tree, chain], ids=["tree", "chain"])
@pytest.mark.parametrize("pre,scale", [(False, 1.0), (False, 2.0), (True, 1.5)],
                         ids=["clone", "scaled", "pre-hook"])
def test_autograd_grad_to_a_hook_result(cluster, make, pre, scale):
    got, want = deployed_run(cluster, make, lambda m: layer_grads(m, pre, scale))
    same_logs(got, want, where="layer gradients")


def hooked_backward(model):
    """The kept clone has a tensor hook and retains its gradient; a plain backward."""
    log = []

    def hook(module, inputs, output):
        c = output.clone()
        c.register_hook(lambda g: log.append(g.numpy().copy()))
        c.retain_grad()
        hook.kept = c
        return c

    handle = _layer(model).register_forward_hook(hook)
    x = _x().requires_grad_(True)
    (model(x) ** 2).sum().backward()
    handle.remove()
    return log + [hook.kept.grad.numpy(), x.grad.numpy()] + [
        p.grad.numpy() for p in model.parameters()]


@pytest.mark.parametrize("make", [tree, chain], ids=["tree", "chain"])
def test_plain_backward_fires_a_kept_clone_hook_once(cluster, make):
    got, want = deployed_run(cluster, make, hooked_backward)
    assert len(got) == len(want)
    same_logs(got, want, where="hooked clone")


def _kept_and_input(model, together):
    kept = {}

    def pre_hook(module, args):
        kept["t"] = args[0] * 1.5
        return (kept["t"],)

    handle = _layer(model).register_forward_pre_hook(pre_hook)
    x = _x().requires_grad_(True)
    loss = (model(x) ** 2).sum()
    try:
        if together:
            return list(torch.autograd.grad(loss, [kept["t"], x]))
        return [torch.autograd.grad(loss, kept["t"], retain_graph=True)[0].numpy(),
                torch.autograd.grad(loss, x)[0].numpy()]
    finally:
        handle.remove()


@pytest.mark.parametrize("make", [tree, chain], ids=["tree", "chain"])
def test_kept_result_then_the_input_in_two_calls(cluster, make):
    got, want = deployed_run(cluster, make, lambda m: _kept_and_input(m, False))
    same_logs(got, want, where="two autograd.grad calls")


def test_kept_result_and_the_input_in_one_call_is_refused(cluster):
    """The workers give the input's gradient through the hook's vjp; going on from the kept
    tensor too would count it twice: refused, saying to take them in two calls."""
    remote = cluster.deploy(tree(), stages=2)
    try:
        with pytest.raises(NotImplementedError, match="Take them in two calls"):
            _kept_and_input(remote, True)
    finally:
        remote.close()
