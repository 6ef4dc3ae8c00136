"""A client forward hook on a deployed model whose result is computed from tensors of the
client that require grad besides the tensors the hook was given (a steering vector being
learned, an SAE spliced in, ROME's delta, a soft prompt): in a plain backward the vjp the
worker asks for is a backward here too, so those tensors get their gradients as in one
process, with the model trainable or frozen (then the worker's tensor requires grad for
their sake alone), over a chain or a tree; a hook whose result comes from its own tensors
and a leaf it returns are as before."""
import warnings

import numpy as np
import pytest
from helpers import deployed_run, same_logs

import disthook as torch
from disthook import nn

pytestmark = pytest.mark.timeout(240)
CLUSTER_WORKERS = 2


class Three(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = nn.Linear(3, 4), nn.Linear(4, 4), nn.Linear(4, 2)

    def forward(self, x):
        return self.c(torch.tanh(self.b(torch.tanh(self.a(x)))))


def make_tree():
    torch.manual_seed(0)
    return Three()


def make_chain():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 4), nn.Tanh(),
                         nn.Linear(4, 2))


def steering(frozen: bool, learned: int = 3):
    """Learn a steering vector (and a scale computed from it before the forward) added to a
    middle layer's output, a few SGD steps; the vector, its gradients and the model's."""
    def run(model):
        for p in model.parameters():
            p.requires_grad_(not frozen)
        layer = model.b if isinstance(model, Three) else model[2]
        torch.manual_seed(1)
        vector = torch.randn(4, requires_grad=True)
        seen = []
        vector.register_hook(lambda g: seen.append(g.numpy().copy()))
        opt = torch.optim.SGD([vector], lr=0.1)
        x = torch.randn(5, 3, generator=torch.Generator().manual_seed(2))
        for _ in range(learned):
            scale = vector.norm()  # computed before the forward: the hook reads it

            def steer(module, args, out, scale=scale):
                out = out.clone()
                out[:, :2] = out[:, :2] + vector[:2] / scale
                return out

            handle = layer.register_forward_hook(steer)
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            handle.remove()
            opt.step()
        grads = [None if p.grad is None else p.grad.numpy().copy()
                 for p in model.parameters()]
        return vector.detach().numpy().copy(), seen, grads
    return run


@pytest.mark.parametrize("make", [make_tree, make_chain], ids=["tree", "chain"])
@pytest.mark.parametrize("frozen", [False, True], ids=["trainable", "frozen"])
def test_a_vector_learned_through_a_hook_gets_one_process_gradients(cluster, make, frozen):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got, want = deployed_run(cluster, make, steering(frozen))
    assert np.abs(want[0] - steering(frozen, 0)(make())[0]).max() > 1e-3  # it did learn
    same_logs(got, want)


def test_own_tensors_only_and_a_returned_leaf_are_as_before(cluster):
    torch.manual_seed(0)
    remote = cluster.deploy(Three(), stages=2)
    x = torch.ones(2, 3)
    try:
        leaf = torch.ones(2, 4, requires_grad=True)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            for hook in (lambda m, a, o: o * 2, lambda m, a, o: leaf):
                handle = remote.b.register_forward_hook(hook)
                remote(x).sum().backward()
                handle.remove()
            assert leaf.grad is not None  # a leaf it returns gets its gradient
            delta = torch.zeros(4, requires_grad=True)
            handle = remote.b.register_forward_hook(lambda m, a, o: o + delta)
            with torch.no_grad():
                remote(x)
            handle.remove()
    finally:
        remote.close()


def test_where_the_gradient_cannot_go_through_the_hook_the_client_says_so(cluster):
    torch.manual_seed(0)
    remote = cluster.deploy(Three(), stages=2)
    try:
        delta = torch.zeros(4, requires_grad=True)

        def steer(module, args, out):
            return out + delta

        remote.b.register_forward_hook(steer)
        x = torch.ones(2, 3, requires_grad=True)
        with pytest.warns(RuntimeWarning, match=r"the forward hook 'steer' on 'b' of a deployed "
                                                r"model gave a tensor computed from tensors of "
                                                r"this process .*autograd\.grad"):
            (gx,) = torch.autograd.grad(remote(x).sum(), [x])
        assert gx.shape == (2, 3) and delta.grad is None
    finally:
        remote.close()
