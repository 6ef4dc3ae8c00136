"""Gradients with respect to a deployed model's parameters, as in one process:
``torch.autograd.grad(loss, model.parameters())`` (MAML's first-order step, saliency of the
weights, influence estimates) and ``loss.backward(inputs=[...])``. The workers compute them
where the parameters live and send them back as the gradients of taps; ``autograd.grad``
leaves every ``.grad`` as it is, ``backward(inputs=...)`` adds to the named ones only. It
raised "appears to not have been used in the graph" (None with ``allow_unused=True``)."""
import numpy as np
import pytest

import disthook as torch
from disthook import nn

pytestmark = pytest.mark.timeout(240)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.unused = nn.Linear(4, 5), nn.Linear(5, 2), nn.Linear(2, 2)

    def forward(self, x):
        return self.b(torch.tanh(self.a(x)))


def chain():
    return nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 5), nn.ReLU(),
                         nn.Linear(5, 2))


def values(gs):
    return [None if g is None else g.numpy().tolist() for g in gs]


def session(model):
    torch.manual_seed(1)
    x = torch.randn(6, 4, requires_grad=True)
    params = [p for n, p in model.named_parameters() if not n.startswith("unused")]
    out = model(x)
    loss = out.pow(2).sum()
    seen = [values(torch.autograd.grad(loss, params, retain_graph=True))]
    seen.append(values(torch.autograd.grad(loss, [x, params[-1]], retain_graph=True)))
    seen.append(values(torch.autograd.grad(out[:, 0].sum(), params[:1], retain_graph=True)))
    seen.append([p.grad for p in model.parameters()])  # autograd.grad filled none
    loss.backward(inputs=params[1:3], retain_graph=True)
    seen.append(values([p.grad for p in model.parameters()]))
    loss.backward()  # a plain backward adds every gradient once more
    seen.append(values([p.grad for p in model.parameters()]))
    if isinstance(model, Net):
        seen.append(values(torch.autograd.grad(model(x).sum(), model.unused.weight,
                                               allow_unused=True)))
    return seen


@pytest.mark.parametrize("make, chunks", [(Net, 1), (chain, 1), (chain, 3)],
                         ids=["tree", "chain", "chain-chunks"])
def test_gradients_with_respect_to_parameters_as_in_one_process(cluster_2_or_3, make, chunks):
    torch.manual_seed(0)
    want = session(make())
    torch.manual_seed(0)
    stages = 2 if make is Net else cluster_2_or_3.stages
    remote = cluster_2_or_3.deploy(make(), stages=stages, chunks=chunks)
    try:
        got = session(remote)
    finally:
        remote.close()
    if chunks == 1:
        assert got == want
    else:  # the micro-batches' gradients are summed: equal up to the order of the sums
        close(got, want)


def close(a, b):
    if isinstance(a, list) and a and isinstance(a[0], (list, type(None))):
        assert isinstance(b, list) and len(a) == len(b)
        for x, y in zip(a, b):
            close(x, y)
    elif a is None or b is None:
        assert a is b
    else:
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_a_second_order_step_through_them_is_one_process(cluster_2_or_3):
    """``autograd.grad(loss, params, create_graph=True)`` (MAML's second-order step, the
    Hessian-vector products of influence functions): the workers keep the gradients with
    their graph, and differentiating them again runs it there (it was refused)."""
    def second_order(model):
        torch.manual_seed(1)
        params = [model.a.weight, model.b.bias]
        loss = model(torch.randn(3, 4, dtype=torch.float64)).pow(2).sum()
        grads = torch.autograd.grad(loss, params, create_graph=True)
        penalty = sum((g * g).sum() for g in grads)
        return [g.detach().numpy() for g in (*grads, *torch.autograd.grad(penalty, params))]

    torch.manual_seed(0)
    expected = second_order(Net().double())
    torch.manual_seed(0)
    remote = cluster_2_or_3.deploy(Net().double(), stages=2)
    try:
        got = second_order(remote)
    finally:
        remote.close()
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-10, atol=1e-12)


def test_a_second_order_step_through_a_chain_says_what_to_do(cluster_2_or_3):
    torch.manual_seed(0)
    remote = cluster_2_or_3.deploy(chain(), stages=2)
    try:
        loss = remote(torch.randn(3, 4)).pow(2).sum()
        with pytest.raises(NotImplementedError, match="placement="):
            torch.autograd.grad(loss, [remote[0].weight], create_graph=True)
    finally:
        remote.close()


def test_a_parameter_used_here_and_on_its_worker_gets_both_gradients(cluster_2_or_3):
    """Used by the model on its worker and by code here (F.linear(x, p)), a parameter's
    gradient is the sum of both, as in one process."""
    def grads(model):
        torch.manual_seed(1)
        x, z = torch.randn(3, 4), torch.randn(2, 4)
        w = model[0].weight
        loss = model(x).pow(2).sum() + nn.functional.linear(z, w).sum()
        return values(torch.autograd.grad(loss, [w, model[2].bias]))

    torch.manual_seed(0)
    want = grads(chain())
    torch.manual_seed(0)
    remote = cluster_2_or_3.deploy(chain(), stages=cluster_2_or_3.stages)
    try:
        assert grads(remote) == want
    finally:
        remote.close()
