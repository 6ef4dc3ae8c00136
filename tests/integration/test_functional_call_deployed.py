"""``torch.func.functional_call`` on a deployed model computes with the tensors given, as in
one process (MAML's inner loop, influence functions, ensembles of weights): a part whose
parameters or buffers are swapped runs its forward on the client with them, the others on
their workers, and gradients reach the tensors given. It computed with the workers' own
parameters before, silently."""
import pytest
from helpers import norm_chain, norm_tree

import disthook as torch
from disthook import nn
from disthook.func import functional_call

pytestmark = pytest.mark.timeout(240)


def inner_loop(model):
    """A MAML-style step: gradients with respect to the weights as given, a second call
    with the updated ones (only some names swapped in a third), then the model itself."""
    torch.manual_seed(1)
    x, y = torch.randn(5, 4), torch.randint(0, 2, (5,))
    weights = {k: v.detach().clone().requires_grad_(True) for k, v in model.named_parameters()}
    loss = nn.functional.cross_entropy(functional_call(model, weights, (x,)), y)
    grads = torch.autograd.grad(loss, list(weights.values()))
    fast = {k: w - 0.1 * g for (k, w), g in zip(weights.items(), grads)}
    after = functional_call(model, fast, (x,))
    first = next(iter(weights))
    some = functional_call(model, {first: weights[first] * 0}, (x,))
    buffers = {k: v.detach().clone() for k, v in model.named_buffers()}
    with_buffers = functional_call(model, (weights, buffers), (x,))  # train mode: updated
    return ([g.numpy().tolist() for g in grads], after.detach().numpy().tolist(),
            some.detach().numpy().tolist(), with_buffers.detach().numpy().tolist(),
            {k: v.numpy().tolist() for k, v in buffers.items()},
            model(x).detach().numpy().tolist(),
            {k: v.detach().numpy().tolist() for k, v in model.state_dict().items()})


@pytest.mark.parametrize("make", [norm_tree, norm_chain], ids=["tree", "chain"])
def test_functional_call_computes_with_the_tensors_given(cluster_2_or_3, make):
    torch.manual_seed(0)
    want = inner_loop(make())
    torch.manual_seed(0)
    remote = cluster_2_or_3.deploy(make(), stages=2 if make is norm_tree else cluster_2_or_3.stages)
    try:
        got = inner_loop(remote)
        if make is norm_chain:  # the swaps are over: the chain passes activations itself again
            remote.stats(reset=True)
            remote(torch.randn(2, 4))
            assert remote.stats()["bytes_between_workers"] > 0
    finally:
        remote.close()
    for g, w in zip(got, want):
        assert g == w
