"""An attached client's copies of the modules its deployer keeps on its client (a dropout
the deploy left there, the root whose forward runs there) follow the deployer's modes: set
by the model's train()/eval(), by the module's own (Monte Carlo dropout: eval, then the
dropout back to train), or by ``module.training = ...``. Before, the workers knew only their
own modules: a dropout that the deployer alone switched kept dropping on the attached
client, and one that runs before any placed part missed even the model's eval() in the
attached client's next call. Each case is compared with one process."""
from contextlib import contextmanager

import pytest
from helpers import same_logs

import disthook as torch
from disthook import nn
from disthook.distributed import connect

pytestmark = pytest.mark.timeout(240)
CLUSTER_WORKERS = 2  # (the conftest's cluster fixture)


class DropFirst(nn.Module):
    """A dropout that runs before the first placed part, on the client."""

    def __init__(self):
        super().__init__()
        self.drop, self.lin1, self.lin2 = nn.Dropout(0.5), nn.Linear(4, 8), nn.Linear(8, 3)

    def forward(self, x):
        return self.lin2(self.lin1(self.drop(x)))


def made():
    torch.manual_seed(0)
    return DropFirst()


@contextmanager
def attached_to(cluster, name):
    """The deployer's model, published as ``name``, and another client's attached to it."""
    remote = cluster.deploy(made(), name=name, placement={"lin1": 0, "lin2": 1})
    try:
        with connect(cluster.address) as other:
            attached = other.attach(name)
            try:
                yield remote, attached
            finally:
                attached.close()
    finally:
        remote.close()


def _model_eval(m):
    m.eval()


def _monte_carlo(m):
    m.eval()
    m.drop.train()


def _drop_eval(m):
    m.train()
    m.drop.eval()


def _drop_flag(m):
    m.drop.training = False


@pytest.mark.parametrize("change", [_model_eval, _monte_carlo, _drop_eval, _drop_flag],
                         ids=["model-eval", "monte-carlo", "drop-eval", "training-flag"])
def test_the_attached_client_computes_in_the_deployers_modes(cluster, change):
    x = torch.randn(16, 4, generator=torch.Generator().manual_seed(1))

    def program(model):
        seen = []
        handle = model.drop.register_forward_hook(lambda m, a, o: seen.append(m.training))
        torch.manual_seed(5)  # the same dropout mask, where it drops
        out = model(x).detach().numpy()
        handle.remove()
        return seen, {p or "<root>": m.training for p, m in model.named_modules()}, out

    local = made()
    change(local)
    want = program(local)
    with attached_to(cluster, f"a1-{change.__name__}") as (remote, attached):
        program(attached)  # a call before the change: this client holds the form then
        change(remote)
        got = program(attached)
    same_logs(got, want)


class Body(nn.Module):
    """Its parts go to two workers (it is split, and runs on the client), a dropout of its
    own stays on the client."""

    def __init__(self):
        super().__init__()
        self.lin1, self.drop, self.lin2 = nn.Linear(4, 8), nn.Dropout(0.5), nn.Linear(8, 3)

    def forward(self, x):
        return self.lin2(self.drop(self.lin1(x)))


class Wrapped(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = Body()

    def forward(self, x):
        return self.body(x)


def test_a_split_modules_eval_reaches_the_attached_client(cluster):
    """``model.body.eval()`` of a module whose parts are on two workers: its placed parts
    take it on their workers, its own dropout on the attached client too."""
    x = torch.randn(16, 4, generator=torch.Generator().manual_seed(1))

    def program(model):
        torch.manual_seed(5)
        out = model(x).detach().numpy()
        return {p or "<root>": m.training for p, m in model.named_modules()}, out

    torch.manual_seed(0)
    local = Wrapped()
    local.body.eval()
    want = program(local)
    torch.manual_seed(0)
    remote = cluster.deploy(Wrapped(), name="a1-split",
                            placement={"body.lin1": 0, "body.lin2": 1})
    try:
        with connect(cluster.address) as other:
            attached = other.attach("a1-split")
            try:
                program(attached)
                remote.body.eval()
                got = program(attached)
            finally:
                attached.close()
    finally:
        remote.close()
    assert want[0]["body.drop"] is False
    same_logs(got, want)
