"""Second order with respect to a deployed model's parameters, from ``p.grad`` after
``backward(create_graph=True)`` (AdaHessian's Hutchinson step, PyHessian's Hessian-vector
products): the gradients' graph stays on the workers, so it is refused, saying which
parameter and what to do, not with torch's "does not require grad" alone, which tells a
user of one process that the program is wrong (it is right there)."""
import pytest
from test_r9_grads_with_graph import backward_with_graph, make

import disthook as torch
from disthook import nn

pytestmark = pytest.mark.timeout(180)
CLUSTER_WORKERS = 2


def first_order(model):
    torch.manual_seed(1)
    x, y = torch.randn(6, 5, dtype=torch.float64), torch.randint(0, 3, (6,))
    nn.functional.cross_entropy(model(x), y).backward()


def hessian_vector_products(model, copy):
    params = list(model.parameters())
    grads = [p.grad + 0.0 if copy else p.grad for p in params]
    vs = [torch.ones_like(p) for p in params]
    return torch.autograd.grad(grads, params, grad_outputs=vs)


@pytest.mark.parametrize("copy", [False, True], ids=["adahessian", "pyhessian"])
def test_hessian_vector_products_from_grads_are_refused_naming_them(cluster, copy):
    local = make()
    backward_with_graph(local)
    assert all(h is not None for h in hessian_vector_products(local, copy))  # one process
    model = cluster.deploy(make(), stages=2)
    try:
        backward_with_graph(model)
        with pytest.raises(NotImplementedError) as info:
            hessian_vector_products(model, copy)
        message = str(info.value)
        assert "'a.weight'" in message and "create_graph=True" in message
        assert "to_local()" in message
        model.zero_grad()
        first_order(model)  # the model goes on being usable
        assert model.a.weight.grad is not None
    finally:
        model.close()


def test_without_a_graph_the_error_is_torchs(cluster):
    """A ``.grad`` computed without create_graph has no graph in one process either:
    torch's RuntimeError, with nothing about the deployment."""
    model = cluster.deploy(make(), stages=2)
    try:
        first_order(model)
        with pytest.raises(RuntimeError) as info:
            hessian_vector_products(model, copy=False)
        assert type(info.value) is RuntimeError
        assert str(info.value) == ("element 0 of tensors does not require grad and does "
                                   "not have a grad_fn")
    finally:
        model.close()
