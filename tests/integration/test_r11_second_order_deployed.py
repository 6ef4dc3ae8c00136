"""Second order with respect to a deployed model's parameters from ``p.grad`` after
``backward(create_graph=True)`` (AdaHessian's Hutchinson step, PyHessian's Hessian-vector
products): ``p.grad`` is the gradient the worker kept with its graph, so differentiating it
again runs that graph there and gives one process's values (it raised "element 0 of tensors
does not require grad"). Where the worker's gradient grew from two backwards (or two calls of
the part) it is refused, naming the parameter and what to do, never answered from one part."""
import warnings

import numpy as np
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
    torch.manual_seed(2)
    vs = [torch.randn(p.shape, dtype=torch.float64) for p in params]
    return [h.numpy() for h in torch.autograd.grad(grads, params, grad_outputs=vs)]


def hutchinson_step(model):
    """AdaHessian's: zero the gradients, backward with graph, H z for z of +-1, twice."""
    out = []
    for step in range(2):
        model.zero_grad()
        backward_with_graph(model)
        params = list(model.parameters())
        grads = [p.grad for p in params]
        zs = [torch.ones_like(p) - 2 * (torch.arange(p.numel()).reshape(p.shape) % 2)
              for p in params]
        h = torch.autograd.grad(grads, params, grad_outputs=zs)
        out.append([(hz * z).numpy() for hz, z in zip(h, zs)])
        with torch.no_grad():
            for p, g in zip(params, grads):
                p.sub_(0.1 * g)
        out.append([p.detach().numpy().copy() for p in params])
    return out


@pytest.mark.parametrize("copy", [False, True], ids=["p.grad", "p.grad + 0"])
def test_hessian_vector_products_from_grads_are_one_process(cluster, copy):
    local = make()
    backward_with_graph(local)
    expected = hessian_vector_products(local, copy)
    model = cluster.deploy(make(), stages=2)
    try:
        backward_with_graph(model)
        got = hessian_vector_products(model, copy)
    finally:
        model.close()
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-10, atol=1e-12)


def test_adahessian_steps_are_one_process(cluster):
    expected = hutchinson_step(make())
    model = cluster.deploy(make(), stages=2)
    try:
        got = hutchinson_step(model)
    finally:
        model.close()
    for gs, es in zip(got, expected):
        for g, e in zip(gs, es):
            np.testing.assert_allclose(g, e, rtol=1e-10, atol=1e-12)


def test_a_gradient_grown_from_two_backwards_is_refused_naming_it(cluster):
    """In one process p.grad then holds the graphs of both; here the second backward adds
    to what the first kept: refused (never the first backward's part alone)."""
    model = cluster.deploy(make(), stages=2)
    try:
        backward_with_graph(model)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            first_order(model)  # a plain backward adds to the kept p.grad
        with pytest.raises(NotImplementedError) as info:
            hessian_vector_products(model, copy=False)
        message = str(info.value)
        assert "'a.weight'" in message and "zero_grad()" in message
        assert "to_local()" in message
        local = make()
        backward_with_graph(local)
        first_order(local)
        np.testing.assert_allclose(model.a.weight.grad.numpy(),
                                   local.a.weight.grad.detach().numpy(), rtol=1e-12)
        model.zero_grad(set_to_none=False)  # zeroed in place: the value, no graph
        assert not model.a.weight.grad.requires_grad
        assert float(model.a.weight.grad.abs().sum()) == 0.0
    finally:
        model.close()


@pytest.mark.parametrize("before", [False, True], ids=["plain", "after-zero_grad"])
def test_without_a_graph_the_error_is_torchs(cluster, before):
    """A ``.grad`` computed without create_graph has no graph in one process either (also
    where a backward with graph ran before the gradients were zeroed): torch's RuntimeError,
    with nothing about the deployment."""
    model = cluster.deploy(make(), stages=2)
    try:
        if before:
            backward_with_graph(model)
            model.zero_grad()
        first_order(model)
        with pytest.raises(RuntimeError) as info:
            hessian_vector_products(model, copy=False)
        assert type(info.value) is RuntimeError
        assert str(info.value) == ("element 0 of tensors does not require grad and does "
                                   "not have a grad_fn")
    finally:
        model.close()


class Tied(nn.Module):
    """Two parts hold one weight, named for the part called last (so that its gradient is
    first made by the backward of the part called first, then added to by the other's)."""

    def __init__(self):
        super().__init__()
        self.emb, self.mid, self.head = nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 4)
        self.head.weight = self.emb.weight

    def forward(self, x):
        return self.emb(torch.tanh(self.mid(torch.tanh(self.head(x)))))


def test_a_tied_weight_grows_from_two_calls_and_is_refused(cluster):
    """Each call's backward adds its part to the tied weight's gradient: its p.grad is the
    sum (one process's), and a product from it is refused rather than taken from one call."""
    def run(model):
        torch.manual_seed(3)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model(torch.randn(5, 4, dtype=torch.float64)).square().sum().backward(
                create_graph=True)
        return [p.grad.detach().numpy().copy() for p in model.parameters()]

    torch.manual_seed(0)
    expected = run(Tied().double())
    torch.manual_seed(0)
    model = cluster.deploy(Tied().double(), placement={"emb": 0, "mid": 1, "head": 0})
    try:
        got = run(model)
        for g, e in zip(got, expected):
            np.testing.assert_allclose(g, e, rtol=1e-12)
        params = list(model.parameters())
        with pytest.raises(NotImplementedError, match="'emb.weight'"):
            torch.autograd.grad([p.grad for p in params], params,
                                [torch.ones_like(p) for p in params])
    finally:
        model.close()


def test_clipping_the_kept_gradients_reads_back_clipped(cluster):
    """``clip_grad_norm_`` after ``backward(create_graph=True)`` scales the workers'
    gradients: ``p.grad`` then reads the clipped value, as in one process (not the one kept
    with its graph before)."""
    def run(model):
        backward_with_graph(model)
        nn.utils.clip_grad_norm_(model.parameters(), 0.01)
        return [p.grad.detach().numpy().copy() for p in model.parameters()]

    expected = run(make())
    model = cluster.deploy(make(), stages=2)
    try:
        got = run(model)
    finally:
        model.close()
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-10)


def lissa(model):
    """Influence functions' LiSSA recursion: h = v + h - H h / scale, each H h from
    grad(grad(loss, params, create_graph=True) . h, params, create_graph=True), so that h
    carries the graphs of the earlier steps into the next (a product of a product)."""
    torch.manual_seed(4)
    x = torch.randn(6, 5, dtype=torch.float64)
    params = list(model.parameters())
    v = torch.autograd.grad(model(x[:1]).square().sum(), params, create_graph=True)
    h = list(v)
    for i in range(2):
        loss = model(x[2 * i + 1:2 * i + 3]).tanh().sum()
        grads = torch.autograd.grad(loss, params, create_graph=True)
        hv = torch.autograd.grad(sum((g * e).sum() for g, e in zip(grads, h)), params,
                                 create_graph=True)
        h = [a + b - c / 10 for a, b, c in zip(v, h, hv)]
    return [t.detach().numpy() for t in h]


def test_lissa_products_of_products_are_one_process(cluster):
    expected = lissa(make())
    model = cluster.deploy(make(), stages=2)
    try:
        got = lissa(model)
    finally:
        model.close()
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-10, atol=1e-12)


def test_with_chunks_each_micro_batch_adds_and_the_refusal_says_so(cluster):
    model = cluster.deploy(make(), stages=2, chunks=2)
    try:
        backward_with_graph(model)  # two calls of each part, one per micro-batch
        with pytest.raises(NotImplementedError, match="chunks=2 each micro-batch"):
            hessian_vector_products(model, copy=False)
    finally:
        model.close()
