"""What is set on a deployed module after the deploy reaches its class's code, as in one
process: a forward set on the module itself (``module.forward = wrapper``, as accelerate's
hooks, quantizers and patching tools do) or a method its forward calls runs from the client,
on a part of a model whose forward runs on the client, on the model itself, inside a part
placed whole, and on a stage of a chain (whose stages would otherwise pass activations among
themselves without calling it); a value over a class default goes to the worker. The
output, the parameters' gradients and the module's hooks equal one process's, and deleting
what was set brings the class's back. Each was silently ignored before."""
import functools

import pytest

import disthook as torch
from disthook import nn

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def cluster(shared_clusters):
    with shared_clusters.lend(2) as c:
        yield c


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 2)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def chain():
    return nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4), nn.Tanh(),
                         nn.Linear(4, 2))


def doubled(module):
    """The usual wrapper: the module's forward as it was, its output scaled."""
    old = module.forward

    @functools.wraps(old)
    def forward(*args, **kwargs):
        return old(*args, **kwargs) * 2

    module.forward = forward


def session(model, target):
    """Outputs, gradients and the target's forward-hook log with the wrapper, then without."""
    torch.manual_seed(1)
    x = torch.randn(3, 4)
    fired = []
    target.register_forward_hook(lambda m, args, out: fired.append(out.detach().numpy()))
    doubled(target)
    out = model(x)
    out.pow(2).sum().backward()
    grads = [p.grad.numpy() for p in model.parameters()]
    del target.forward
    return out.detach().numpy(), grads, fired, model(x).detach().numpy()


def same(got, want):
    out, grads, fired, plain = got
    out2, grads2, fired2, plain2 = want
    assert out.tolist() == out2.tolist() and plain.tolist() == plain2.tolist()
    assert not (out == plain).all()  # the wrapper did change the output
    assert [g.tolist() for g in grads] == [g.tolist() for g in grads2]
    assert [f.tolist() for f in fired] == [f.tolist() for f in fired2]


@pytest.mark.parametrize("make, path, stages", [
    (Net, "a", 2), (Net, "", 2), (chain, "2", 2), (chain, "", 2), (chain, "4", 2)],
    ids=["tree-part", "tree-root", "chain-stage-module", "chain-root", "chain-last"])
def test_a_forward_set_on_a_module_runs_as_in_one_process(cluster, make, path, stages):
    torch.manual_seed(0)
    local = make()
    want = session(local, local.get_submodule(path))
    torch.manual_seed(0)
    remote = cluster.deploy(make(), stages=stages)
    try:
        same(session(remote, remote.get_submodule(path)), want)
    finally:
        remote.close()


def test_a_chain_with_a_forward_set_on_a_stage_module_takes_its_train_step_from_here(cluster):
    """train_step would run the stages on the workers, where the wrapper is not: the step
    runs from the client instead, micro-batch by micro-batch, with one process's values."""
    torch.manual_seed(2)
    x, y = torch.randn(6, 4), torch.randint(0, 2, (6,))
    torch.manual_seed(0)
    local = chain()
    doubled(local[2])
    losses = []
    for rows in (slice(0, 3), slice(3, 6)):
        loss = nn.functional.cross_entropy(local(x[rows]), y[rows])
        (loss * 0.5).backward()
        losses.append(loss.item())
    torch.manual_seed(0)
    remote = cluster.deploy(chain(), stages=2, chunks=2)
    try:
        doubled(remote[2])
        got = remote.train_step(x, y, nn.functional.cross_entropy)
        assert [float(v) for v in got] == pytest.approx(losses, rel=1e-6)
        for p, q in zip(remote.parameters(), local.parameters()):
            assert p.grad.numpy().tolist() == q.grad.numpy().tolist()
    finally:
        remote.close()


class Doubling(nn.Linear):
    """A module that sets its forward on itself when made: its worker's copy has it too."""

    def __init__(self, n):
        super().__init__(n, n)
        self.forward = self._doubled

    def _doubled(self, x):
        return nn.Linear.forward(self, x) * 2


def test_a_forward_a_module_had_when_deployed_runs_on_its_worker(cluster):
    """Only a forward set since the deploy runs from here: one the module was deployed
    with is its worker's copy's too, and the chain still passes activations worker to
    worker."""
    torch.manual_seed(0)
    local = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), Doubling(4), nn.Linear(4, 2))
    torch.manual_seed(0)
    remote = cluster.deploy(nn.Sequential(nn.Linear(4, 4), nn.ReLU(), Doubling(4),
                                          nn.Linear(4, 2)), stages=2)
    try:
        x = torch.randn(3, 4)
        remote.stats(reset=True)
        assert remote(x).detach().numpy().tolist() == local(x).detach().numpy().tolist()
        assert remote.stats()["bytes_between_workers"] > 0
        doubled(remote[2])  # set since: from here on the model runs from the client
        doubled(local[2])
        remote.stats(reset=True)
        assert remote(x).detach().numpy().tolist() == local(x).detach().numpy().tolist()
        assert remote.stats()["bytes_between_workers"] == 0
    finally:
        remote.close()


class Scored(nn.Module):
    """A module whose forward reads a method and a class-level default of its own."""
    scale = 1.0

    def __init__(self):
        super().__init__()
        self.q = nn.Linear(4, 4)

    def score(self, h):
        return h * self.scale

    def forward(self, x):
        return self.score(self.q(x))


def scored_chain():
    return nn.Sequential(nn.Linear(4, 4), nn.ReLU(), Scored(), nn.Linear(4, 2))


def scored_pair(cluster):
    """An input, the chain in one process and the same chain deployed on two stages."""
    torch.manual_seed(2)
    x = torch.randn(3, 4)
    torch.manual_seed(0)
    local = scored_chain()
    torch.manual_seed(0)
    return x, local, cluster.deploy(scored_chain(), stages=2)


def test_a_method_set_on_a_module_is_what_its_forward_calls(cluster):
    """``attn._attn = my_attention`` (a function the module's forward calls, patched the
    way attention patterns are captured): the forward runs here, calling it; deleting it
    gives the class's method back, and the chain its workers."""
    x, local, remote = scored_pair(cluster)
    try:
        for model in (local, remote):
            model[2].score = lambda h: h.tanh()
            model(x).sum().backward()
        assert remote(x).detach().numpy().tolist() == local(x).detach().numpy().tolist()
        for p, q in zip(remote.parameters(), local.parameters()):
            assert p.grad.numpy().tolist() == q.grad.numpy().tolist()
        del remote[2].score, local[2].score
        remote.stats(reset=True)
        assert remote(x).detach().numpy().tolist() == local(x).detach().numpy().tolist()
        assert remote.stats()["bytes_between_workers"] > 0
    finally:
        remote.close()


def test_a_value_set_over_a_class_default_goes_to_the_worker(cluster):
    """``module.scale = 3.0`` where the class has ``scale = 1.0`` that its forward reads:
    the value goes to the worker's copy (the chain still runs worker to worker)."""
    x, local, remote = scored_pair(cluster)
    try:
        local[2].scale = remote[2].scale = 3.0
        remote.stats(reset=True)
        assert remote(x).detach().numpy().tolist() == local(x).detach().numpy().tolist()
        assert remote.stats()["bytes_between_workers"] > 0
        del local[2].scale, remote[2].scale
        assert remote[2].scale == 1.0
        assert remote(x).detach().numpy().tolist() == local(x).detach().numpy().tolist()
    finally:
        remote.close()


class Outer(nn.Module):
    """A model whose forward runs on the client, with a part that holds a Scored."""

    def __init__(self):
        super().__init__()
        self.first = nn.Linear(4, 4)
        self.block = nn.Sequential(nn.Linear(4, 4), Scored(), nn.ReLU())
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        return self.head(self.block(self.first(x)))


def test_a_method_set_inside_a_part_placed_whole_is_called(cluster):
    """The part placed whole (``block``) would run on its worker with its own copy of the
    module inside it: with a method set on that module, the part runs from here."""
    torch.manual_seed(2)
    x = torch.randn(3, 4)
    torch.manual_seed(0)
    local = Outer()
    torch.manual_seed(0)
    remote = cluster.deploy(Outer(), placement={"first": 0, "block": 1, "head": 0})
    try:
        for model in (local, remote):
            model.block[1].score = lambda h: h.tanh() * 2
            model(x).sum().backward()
        assert remote(x).detach().numpy().tolist() == local(x).detach().numpy().tolist()
        for p, q in zip(remote.parameters(), local.parameters()):
            assert p.grad.numpy().tolist() == q.grad.numpy().tolist()
    finally:
        remote.close()
