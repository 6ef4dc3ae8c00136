"""What a placed module's own code sets on itself while it runs on its worker reaches the
program's module, as in one process: in its forward (``self.last = y``, a counter, an
attention map) and in a tensor hook it put on a tensor of its forward, which fires in the
backward (Chefer's ``attn.register_hook(self.save_attn_gradients)``); on a chain's stages
and on parts of a tree, over several calls; a value that cannot travel leaves the client's
attribute as it was, with one warning; a set by the program afterwards goes to the worker.
Each was silently left on the worker before (the client read the old value)."""
import warnings

import numpy as np
import pytest

import disthook as torch
from disthook import nn

pytestmark = pytest.mark.timeout(240)


CLUSTER_WORKERS = 2  # (the conftest's cluster fixture)


class Keep(nn.Module):
    """Keeps its output, counts its calls, and keeps its output's gradient (a tensor hook
    its forward registers), as interpretability code does."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(2, 2)
        self.last, self.grad, self.calls = None, None, 0

    def save_grad(self, g):
        self.grad = g

    def forward(self, x):
        y = self.lin(x)
        self.last = y
        self.calls += 1
        if y.requires_grad:
            y.register_hook(self.save_grad)
        return y


class Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.k, self.h = Keep(), nn.Linear(2, 2)

    def forward(self, x):
        return self.h(self.k(x))


class Root(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Outer(), Outer()])

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x


def kept(model):
    """Each Keep's (calls, last, grad) as plain values."""
    def value(t):
        return None if t is None else t.detach().numpy().tolist()

    return [(k.calls, value(k.last), value(k.grad)) for k in model.modules()
            if isinstance(k, Keep)]


def session(model):
    x = torch.tensor([[1.0, -2.0], [0.5, 3.0]])
    out = model(x)
    after_forward = kept(model)
    (out * out).sum().backward()
    return after_forward, kept(model)


@pytest.mark.parametrize("make", [lambda: nn.Sequential(Keep(), Keep()),
                                  lambda: nn.Sequential(Outer(), Outer()), Root],
                         ids=["chain", "chain-of-outer", "tree"])
def test_what_the_forward_and_its_tensor_hooks_set_reaches_the_client(cluster, make):
    torch.manual_seed(0)
    local = make()
    want = session(local)
    torch.manual_seed(0)
    model = cluster.deploy(make(), stages=2)
    try:
        got = session(model)
    finally:
        model.close()
    assert want[0][0][0] == 1 and want[1][0][2] is not None
    np.testing.assert_equal(got, want)


class Attention(nn.Module):
    """Transformer-Explainability's attention: keeps its map, and its gradient by a hook."""

    def __init__(self, dim, heads=2):
        super().__init__()
        self.heads, self.scale = heads, (dim // heads) ** -0.5
        self.qkv, self.proj = nn.Linear(dim, dim * 3), nn.Linear(dim, dim)
        self.attn_gradients = self.attention_map = None

    def save_attn_gradients(self, g):
        self.attn_gradients = g

    def forward(self, x, register_hook=False):
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        attn = ((qkv[0] @ qkv[1].transpose(-2, -1)) * self.scale).softmax(dim=-1)
        self.attention_map = attn
        if register_hook:
            attn.register_hook(self.save_attn_gradients)
        return self.proj((attn @ qkv[2]).transpose(1, 2).reshape(b, n, c))


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm, self.attn, self.mlp = nn.LayerNorm(dim), Attention(dim), nn.Linear(dim, dim)

    def forward(self, x, register_hook=False):
        x = x + self.attn(self.norm(x), register_hook=register_hook)
        return x + self.mlp(x)


class ViT(nn.Module):
    def __init__(self, dim=8, depth=3):
        super().__init__()
        self.patch = nn.Linear(6, dim)
        self.blocks = nn.ModuleList([Block(dim) for _ in range(depth)])
        self.head = nn.Linear(dim, 4)

    def forward(self, x, register_hook=False):
        x = self.patch(x)
        for blk in self.blocks:
            x = blk(x, register_hook=register_hook)
        return self.head(x[:, 0])


def relevance(model):
    """Chefer's relevance from the kept maps and gradients, then a rollout from the maps of
    a no_grad call."""
    x = torch.tensor(np.linspace(-1, 1, 2 * 5 * 6, dtype=np.float32).reshape(2, 5, 6))
    out = model(x, register_hook=True)
    one_hot = torch.zeros_like(out)
    one_hot[torch.arange(2), out.argmax(-1)] = 1
    model.zero_grad()
    (one_hot * out).sum().backward()
    r = torch.eye(5).expand(2, 5, 5).clone()
    for blk in model.blocks:
        cam = (blk.attn.attn_gradients * blk.attn.attention_map).clamp(min=0).mean(dim=1)
        r = r + torch.bmm(cam, r)
    with torch.no_grad():
        model(x * 2)
    maps = [blk.attn.attention_map.numpy() for blk in model.blocks]
    return r.detach().numpy(), maps


def test_chefer_relevance_from_maps_and_gradients_kept_by_the_attention_modules(cluster):
    torch.manual_seed(0)
    want = relevance(ViT())
    torch.manual_seed(0)
    model = cluster.deploy(ViT(), stages=2)
    try:
        got = relevance(model)
    finally:
        model.close()
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)
    for a, b in zip(got[1], want[1]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


class Counter(nn.Module):
    """Counts its calls, keeps a value it sets on odd calls and deletes on even ones, and
    adds ``offset`` (a name its forward sets first) to its output."""

    def __init__(self):
        super().__init__()
        self.lin, self.calls = nn.Linear(2, 2), 0

    def forward(self, x):
        self.calls += 1
        self.offset = getattr(self, "offset", 0) + 1
        if hasattr(self, "odd"):
            del self.odd
        else:
            self.odd = ("call", self.calls)
        return self.lin(x) + self.offset


@pytest.mark.parametrize("chain", [True, False], ids=["chain", "tree"])
def test_a_counter_over_several_calls_and_a_set_by_the_program_afterwards(cluster, chain):
    """The client sees each call's count (the calls after the first go on without waiting
    for their answers where nothing is set); a set by the program goes to the worker, whose
    forward then goes on from it, for a name deployed with the module and a name its forward
    set first."""
    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = Counter(), Counter()

        def forward(self, x):
            return self.b(self.a(x))

    torch.manual_seed(0)
    model = cluster.deploy(nn.Sequential(Counter(), Counter()) if chain else Two(), stages=2)
    first = model[0] if chain else model.a
    x = torch.ones(1, 2)
    try:
        for n in range(1, 4):
            model(x)
            assert (first.calls, first.offset) == (n, n)
            assert first.__dict__.get("odd") == (("call", n) if n % 2 else None)
        first.calls, first.offset = 10, 20
        with torch.no_grad():
            out = first(x)
        assert (first.calls, first.offset) == (11, 21)
        np.testing.assert_allclose(out.numpy(), (first.lin(x) + 21).detach().numpy(),
                                   rtol=1e-6)
    finally:
        model.close()


class Opaque(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin, self.post, self.calls = nn.Linear(2, 2), None, 0

    def forward(self, x):
        self.post = lambda t: t * 2  # a function: it cannot come to the client
        self.calls += 1
        return self.lin(x)


def test_a_value_that_cannot_travel_warns_once_and_keeps_the_old_value(cluster):
    class Root2(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = Opaque(), nn.Linear(2, 2)

        def forward(self, x):
            return self.b(self.a(x))

    model = cluster.deploy(Root2(), stages=2)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model(torch.ones(1, 2))
            model(torch.ones(1, 2))
        said = [str(w.message) for w in caught if "'post'" in str(w.message)]
        assert len(said) == 1, said
        assert "'a'" in said[0] and "function" in said[0] and "keeps its old value" in \
            said[0]
        assert model.a.post is None and model.a.calls == 2  # the rest of its changes came
    finally:
        model.close()


def test_what_a_chain_sets_in_a_train_step_reaches_the_client(cluster):
    """train_step runs the schedule on the workers: what the stages' modules set in it (the
    last micro-batch's value, as one process calling the model per micro-batch keeps)."""
    torch.manual_seed(0)
    model = cluster.deploy(nn.Sequential(Counter(), Counter()), stages=2, chunks=2)
    try:
        model.train_step(torch.ones(4, 2), torch.zeros(4, 2), nn.MSELoss())
        assert [(m.calls, m.offset) for m in model] == [(2, 2), (2, 2)]
        assert "odd" not in model[0].__dict__ and "odd" not in model[1].__dict__
    finally:
        model.close()


class Gate(nn.Module):
    """A mixture-of-experts layer's habit: an auxiliary loss kept on the module, added to
    the training loss by the program, whose gradient must reach the layer's weights."""

    def __init__(self):
        super().__init__()
        self.lin, self.aux_loss = nn.Linear(2, 2), None

    def forward(self, x):
        y = self.lin(x)
        self.aux_loss = (y * y).mean()
        return torch.tanh(y)


class Gated(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = Gate(), Gate()

    def forward(self, x):
        return self.b(self.a(x))


def aux_step(model):
    out = model(torch.tensor([[1.0, -2.0], [0.5, 3.0]]))
    gates = [m for m in model.modules() if isinstance(m, Gate)]
    (out.sum() + sum(g.aux_loss for g in gates)).backward()
    return [g.aux_loss.item() for g in gates], [p.grad.numpy() for p in model.parameters()]


def test_an_auxiliary_loss_kept_on_a_part_gives_its_gradient_to_the_parts_weights(cluster):
    """A tensor with a graph set on a part of a tree is one more output of the part's call:
    the gradient the program's loss gives it goes to the worker, as in one process."""
    torch.manual_seed(0)
    want = aux_step(Gated())
    torch.manual_seed(0)
    model = cluster.deploy(Gated(), stages=2)
    try:
        got = aux_step(model)
        got2 = aux_step(model)  # the second call waits for its answer too
    finally:
        model.close()
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    for a, b in zip(got[1], want[1]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    for a, b in zip(got2[1], want[1]):
        np.testing.assert_allclose(a, 2 * b, rtol=1e-5, atol=1e-7)


def test_a_tensor_with_a_graph_set_on_a_chain_stage_refuses_a_backward_through_it(cluster):
    """A chain's stages answer with their last output only: the auxiliary loss comes by
    value, and a backward through it says that its graph stayed on the worker (never a
    silent missing gradient)."""
    model = cluster.deploy(nn.Sequential(Gate(), Gate()), stages=2)
    try:
        out = model(torch.ones(1, 2))
        assert model[0].aux_loss.requires_grad and model[0].aux_loss.item() > 0
        with pytest.raises(RuntimeError, match=r"0\.aux_loss was set on its worker "
                                               r"\(stage 0, .*graph stayed there"):
            (out.sum() + model[0].aux_loss).backward()
    finally:
        model.close()


@pytest.mark.parametrize("chain", [True, False], ids=["chain", "tree"])
def test_a_client_forward_hook_reads_what_the_forward_set(cluster, chain):
    """A forward hook of the program on a part (it runs here while the part's call runs on
    its worker) reads the attribute the module's forward set just before, as in one
    process: ``module.last`` and ``module.calls`` of this call, not of the one before."""
    def run(model):
        seen = []
        first = model[0] if chain else model.blocks[0].k
        first.register_forward_hook(
            lambda m, args, out: seen.append((m.calls, m.last.detach().numpy().tolist())))
        for x in (torch.ones(1, 2), torch.full((1, 2), 2.0)):
            model(x)
        return seen

    def make():
        torch.manual_seed(0)
        return nn.Sequential(Keep(), Keep()) if chain else Root()

    want = run(make())
    model = cluster.deploy(make(), stages=2)
    try:
        got = run(model)
    finally:
        model.close()
    assert [c for c, _ in want] == [1, 2]
    np.testing.assert_allclose(np.array([v for _, v in got]), np.array([v for _, v in want]),
                               rtol=1e-6)
    assert [c for c, _ in got] == [1, 2]
