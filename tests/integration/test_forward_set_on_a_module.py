"""A forward set on a module itself (``module.forward = wrapper``, as accelerate's hooks,
quantizers and patching tools do) runs on a deployed model as in one process: on a part of
a model whose forward runs on the client, on the model itself, and on a stage of a chain
(whose stages would otherwise pass activations among themselves without calling it); the
output, the parameters' gradients and the module's hooks equal one process's, and ``del
module.forward`` brings the class's forward back. It was silently ignored before."""
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
