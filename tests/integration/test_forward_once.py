"""The forward of a deployed model runs once per call, as written, from the first call on
(issue 29): nothing runs the model to find out what it is. What runs where follows from the
model's class: a root whose forward is nn.Sequential's runs its stages worker to worker;
any other root's forward runs on the client, each placed part on its worker. Each case on 2
and 3 workers against the same program in one process."""
import copy

import numpy as np
import pytest
from clusters import worker_statuses

import disthook as torch
import disthook.nn.functional as F
from disthook import hooks as toolkit
from disthook import nn

pytestmark = pytest.mark.timeout(240)
CLUSTER_WORKERS = 3
STAGES = pytest.mark.parametrize("stages", [2, 3], ids=["2-workers", "3-workers"])


def same(a, b, tol=1e-5):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=1e-6)


def grads_of(model) -> dict:
    return {n: p.grad.numpy().copy() for n, p in model.named_parameters()
            if p.grad is not None}


def weights_of(model) -> dict:
    return {n: v.numpy().copy() for n, v in model.state_dict().items()}


def forwards(cluster) -> int:
    """Placed parts run so far on all workers (the workers' own count)."""
    return sum(s["forwards"] for status in worker_statuses(cluster).values()
               for s in status["stage_stats"].values())


# ---- side effects: once per call, the first included --------------------------------------

SEEN = []  # what every forward of Noisy appended, here or anywhere else


class Noisy(nn.Module):
    """A forward with side effects: a counter set on the module, a list appended to, a
    print, a draw from disthook's and from numpy's random streams."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(6, 8)
        self.b = nn.Linear(8, 8)
        self.c = nn.Linear(8, 3)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        SEEN.append(self.calls)
        print(f"forward {self.calls} on {tuple(x.shape)}")
        h = torch.tanh(self.a(x)) + 0.1 * torch.randn(x.shape[0], 8)
        h = self.b(h) * float(np.random.uniform(0.5, 1.5))
        return self.c(torch.tanh(h))


def noisy_run(model, capsys, calls=3):
    """Outputs, gradients, counters and printed lines of ``calls`` calls with backward."""
    SEEN.clear()
    torch.manual_seed(7)
    np.random.seed(7)
    x = torch.randn(4, 6)
    outs = []
    for _ in range(calls):
        out = model(x)
        out.pow(2).sum().backward()
        outs.append(out.detach().numpy().copy())
    draws = (torch.randn(2).numpy().copy(), np.random.uniform(size=2))  # the streams after
    return (outs, grads_of(model), model.calls, list(SEEN), capsys.readouterr().out, draws)


@STAGES
def test_side_effects_of_the_forward_happen_once_per_call_from_the_first(cluster, capsys,
                                                                          stages):
    torch.manual_seed(0)
    local = Noisy()
    model = cluster.deploy(copy.deepcopy(local), stages=stages)
    try:
        before = forwards(cluster)
        got = noisy_run(model, capsys)
        # each placed part ran once per call on its worker, none more
        assert forwards(cluster) - before == 3 * 3
        want = noisy_run(local, capsys)
    finally:
        model.close()
    assert got[2] == want[2] == 3  # the counter the forward sets
    assert got[3] == want[3] == [1, 2, 3]  # what it appended
    assert got[4] == want[4] == "".join(f"forward {i} on (4, 6)\n" for i in (1, 2, 3))
    for o, w in zip(got[0], want[0]):
        same(o, w)
    assert set(got[1]) == set(want[1])
    for name in want[1]:
        same(got[1][name], want[1][name])
    for g, w in zip(got[5], want[5]):  # both random streams drew what one process drew
        same(g, w)


# ---- a VAE: reparameterisation with randn_like, a tuple out ---------------------------------

VAE_CALLS = []


class VAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(8, 16), nn.ReLU())
        self.mu = nn.Linear(16, 4)
        self.logvar = nn.Linear(16, 4)
        self.decoder = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 8),
                                     nn.Sigmoid())

    def reparameterize(self, mu, logvar):
        std = torch.exp(0.5 * logvar)
        return mu + torch.randn_like(std) * std

    def forward(self, x):
        VAE_CALLS.append(len(x))
        h = self.encoder(x)
        mu, logvar = self.mu(h), self.logvar(h)
        return self.decoder(self.reparameterize(mu, logvar)), mu, logvar


def vae_train(model, steps=4):
    VAE_CALLS.clear()
    torch.manual_seed(3)
    batches = [torch.rand(6, 8) for _ in range(steps)]
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for x in batches:
        opt.zero_grad()
        recon, mu, logvar = model(x)
        kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
        loss = F.binary_cross_entropy(recon, x, reduction="sum") + kld
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, list(VAE_CALLS), weights_of(model)


@STAGES
def test_a_vae_trains_like_one_process_with_one_forward_per_batch(cluster, stages):
    torch.manual_seed(0)
    local = VAE()
    model = cluster.deploy(copy.deepcopy(local), stages=stages)
    try:
        got = vae_train(model)
    finally:
        model.close()
    want = vae_train(local)
    assert got[1] == want[1] == [6] * 4  # four batches, four forwards
    same(got[0], want[0], tol=1e-4)
    for name in want[2]:
        same(got[2][name], want[2][name], tol=1e-4)


# ---- a forward that branches on self.training and on the data -------------------------------

class Branchy(nn.Module):
    """Chains a -> b -> c in training mode on a batch of negative sum (so a first call in
    that state looks like a chain), and does something else otherwise."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(6, 6)
        self.b = nn.Linear(6, 6)
        self.c = nn.Linear(6, 3)

    def forward(self, x):
        h = self.a(x)
        h = self.b(h) if self.training else torch.tanh(h)
        if float(x.sum()) > 0:
            h = h * 2.0
        return self.c(h)


def branchy_run(model):
    torch.manual_seed(2)
    x = torch.randn(5, 6)
    x = x - x.mean() - 0.1  # negative sum
    results = []
    for training, data in ((True, x), (True, -x), (False, x), (False, -x)):
        model.train(training)
        model.zero_grad()
        out = model(data)
        out.sum().backward()
        results.append((out.detach().numpy().copy(), grads_of(model)))
    return results


@STAGES
def test_a_forward_that_branches_gives_one_process_results_in_every_branch(cluster, stages):
    torch.manual_seed(0)
    local = Branchy()
    model = cluster.deploy(copy.deepcopy(local), stages=stages)
    try:
        got = branchy_run(model)
    finally:
        model.close()
    want = branchy_run(local)
    for (out, grads), (out_want, grads_want) in zip(got, want):
        same(out, out_want)
        assert set(grads) == set(grads_want)  # b has a gradient only where it ran
        for name in grads_want:
            same(grads[name], grads_want[name])


# ---- train_step ------------------------------------------------------------------------------

class Chain(nn.Module):
    """A user's own class whose forward chains its children: its forward still runs as
    written (on the client), each child on its worker."""

    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(6, 8)
        self.act = nn.Tanh()
        self.l2 = nn.Linear(8, 8)
        self.out = nn.Linear(8, 3)

    def forward(self, x):
        return self.out(self.l2(self.act(self.l1(x))))


class Mixed(Chain):
    """Functional code between the children (once refused by train_step)."""

    def forward(self, x):
        return self.out(torch.tanh(self.l2(self.act(self.l1(x)))) * 0.5)


class Steps(nn.Sequential):
    """A Sequential subclass that keeps Sequential's forward: the chain path."""


def chain_data():
    torch.manual_seed(1)
    return torch.randn(6, 6), torch.randint(0, 3, (6,))


def one_process_steps(model, loss_fn, steps=3):
    x, y = chain_data()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        losses.append([loss.item()])
    return losses, weights_of(model)


def train_steps(model, loss_fn, steps=3):
    x, y = chain_data()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        losses.append(model.train_step(x, y, loss_fn).numpy().tolist())
        opt.step()
    return losses, weights_of(model)


@STAGES
@pytest.mark.parametrize("cls,loss_fn", [(Chain, nn.CrossEntropyLoss()),
                                         (Mixed, F.cross_entropy)],
                         ids=["chain-loss-module", "mixed-functional-loss"])
def test_train_step_on_a_custom_class_takes_one_process_step(cluster, stages, cls, loss_fn):
    torch.manual_seed(0)
    local = cls()
    model = cluster.deploy(copy.deepcopy(local), stages=stages)
    try:
        got = train_steps(model, loss_fn)
        # the stats say one entry per stage, as a chain's do
        assert len(model.step_stats) == stages
        assert all(s["wall"] > 0 for s in model.step_stats)
    finally:
        model.close()
    want = one_process_steps(local, loss_fn)
    same(got[0], want[0])  # one micro-batch's loss per step, as a chain with chunks=1
    for name in want[1]:
        same(got[1][name], want[1][name])


@STAGES
def test_a_sequential_subclass_keeps_the_chain_path_and_its_micro_batches(cluster, stages):
    torch.manual_seed(0)
    local = Steps(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 3))
    model = cluster.deploy(copy.deepcopy(local), stages=stages, chunks=2)
    try:
        before = forwards(cluster)
        got = train_steps(model, nn.CrossEntropyLoss())
        # each stage ran each of the 2 micro-batches: a pipeline, not one call per child
        assert forwards(cluster) - before == 3 * 2 * stages
        out = model(chain_data()[0])
    finally:
        model.close()
    assert all(len(step) == 2 for step in got[0])  # one loss per micro-batch
    want = one_process_steps(local, nn.CrossEntropyLoss())
    same(out.detach().numpy(), local(chain_data()[0]).detach().numpy())
    for name in want[1]:
        same(got[1][name], want[1][name])


@STAGES
@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_chunks_on_a_custom_class_pipeline_its_micro_batches(cluster, stages, schedule):
    """(Refused at deploy before micro-batches ran for any model.) A class whose forward is
    its own takes chunks: train_step runs each micro-batch's forward and backward in the
    schedule's order, a call joins its micro-batches' outputs; one process's numbers."""
    torch.manual_seed(0)
    local = Chain()
    model = cluster.deploy(copy.deepcopy(local), stages=stages, chunks=3, schedule=schedule)
    try:
        got = train_steps(model, nn.CrossEntropyLoss())
        out = model(chain_data()[0])
    finally:
        model.close()
    assert all(len(step) == 3 for step in got[0])  # one loss per micro-batch
    x, y = chain_data()
    opt = torch.optim.SGD(local.parameters(), lr=0.1, momentum=0.9)
    for step in got[0]:
        opt.zero_grad()
        parts = [nn.CrossEntropyLoss()(local(x[i:i + 2]), y[i:i + 2]) for i in (0, 2, 4)]
        same(step, [p.item() for p in parts])
        (sum(parts) / 3).backward()
        opt.step()
    same(out.detach().numpy(), local(x).detach().numpy())
    for name, value in weights_of(local).items():
        same(got[1][name], value)


# ---- run_until on a forward that runs here ---------------------------------------------------

@STAGES
def test_run_until_stops_a_client_forward_after_the_part(cluster, stages):
    torch.manual_seed(0)
    local = VAE()
    model = cluster.deploy(copy.deepcopy(local), stages=stages)
    try:
        for path in ("encoder", "mu", "decoder"):
            torch.manual_seed(4)
            x = torch.rand(3, 8)
            xl, xr = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
            VAE_CALLS.clear()
            before = forwards(cluster)
            torch.manual_seed(5)  # the same draw of the reparameterisation in both
            got = toolkit.run_until(model, xr, path)
            ran = forwards(cluster) - before
            torch.manual_seed(5)
            want = toolkit.run_until(local, xl, path)
            same(got.detach().numpy(), want.detach().numpy())
            got.sum().backward()
            want.sum().backward()
            same(xr.grad.numpy(), xl.grad.numpy())
            assert VAE_CALLS == [3, 3]  # one forward each, stopped
            # the parts called after it did not run
            assert ran == {"encoder": 1, "mu": 2, "decoder": 4}[path]
        with pytest.raises(NotImplementedError, match=r"'decoder.2' runs inside 'decoder'.* "
                                                      r"run_until\(model, x, 'decoder'\)"):
            toolkit.run_until(model, torch.rand(3, 8), "decoder.2")
        grads = grads_of(model)
    finally:
        model.close()
    want = grads_of(local)
    assert set(grads) == set(want)
    for name in want:
        same(grads[name], want[name])


# ---- a legacy backward hook on a root whose forward runs here ---------------------------------

class Divide(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.full((3,), 4.0))

    def forward(self, x):
        return x / self.scale  # the model's last op: two inputs, both needing a gradient


class Legacy(nn.Module):
    def __init__(self):
        super().__init__()
        self.f0 = nn.Linear(4, 5)
        self.f1 = nn.Linear(5, 3)
        self.f2 = Divide()

    def forward(self, x):
        return self.f2(torch.tanh(self.f1(self.f0(x))))


class LegacyHere(Legacy):
    def forward(self, x):
        return super().forward(x) * 2.0  # the last op runs on the client


def legacy_run(model):
    log = []

    def hook(module, grad_input, grad_output):
        log.append((type(module).__name__, [None if g is None else g.numpy().copy()
                                            for g in grad_input],
                    [g.numpy().copy() for g in grad_output]))
        return tuple(None if g is None else g * 0.5 for g in grad_input)

    model.register_backward_hook(hook)
    torch.manual_seed(1)
    x = torch.randn(2, 4, requires_grad=True)
    for _ in range(2):
        model(x).sum().backward()
    return log, x.grad.numpy().copy(), grads_of(model)


@STAGES
@pytest.mark.parametrize("cls", [Legacy, LegacyHere], ids=["last-op-on-a-worker",
                                                           "last-op-here"])
def test_a_legacy_hook_on_the_root_sees_the_last_op_as_in_one_process(cluster, stages, cls):
    torch.manual_seed(0)
    local = cls()
    model = cluster.deploy(copy.deepcopy(local), stages=stages)
    try:
        with pytest.warns(FutureWarning):
            got = legacy_run(model)
    finally:
        model.close()
    with pytest.warns(FutureWarning):
        want = legacy_run(local)
    assert len(got[0]) == len(want[0]) == 2
    for (name, g_in, g_out), (name_want, g_in_want, g_out_want) in zip(got[0], want[0]):
        assert name == name_want == cls.__name__
        assert [g is None for g in g_in] == [g is None for g in g_in_want]
        for g, w in zip([*g_in, *g_out], [*g_in_want, *g_out_want]):
            if w is not None:
                same(g, w)
    same(got[1], want[1])
    assert set(got[2]) == set(want[2])
    for name in want[2]:
        same(got[2][name], want[2][name])
