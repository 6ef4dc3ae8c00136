"""Values stay where they are computed: the outputs of a deployed model's parts stay on their
workers (``RemoteValue`` on the client), go worker to worker, and ops of the client's own
forward on them run there; calls whose answer's form is known do not wait. Every case runs
on 2 and 3 workers (the three longest on one of them in the default run, on both with
``-m exhaustive``) against the same program in one process, values to 1e-5."""
import copy

import numpy as np
import pytest
from clusters import wait_until, worker_statuses
from sweeps import EXHAUSTIVE, product

import disthook as torch
import disthook.nn.functional as F
from disthook import nn
from disthook.bench import gpt
from disthook.distributed import deployment_of
from disthook.distributed.remote_values import RemoteValue


def workers(n: int) -> str:
    return f"{n}-workers"


def on_one_size_by_default(kept: int):
    """The cluster sizes for a long test: ``kept`` workers in the default run, the other
    size exhaustive."""
    return pytest.mark.parametrize(
        "cluster", [n if n == kept else pytest.param(n, marks=EXHAUSTIVE) for n in (2, 3)],
        ids=workers, indirect=True)


@pytest.fixture(scope="module", params=[2, 3], ids=workers)
def cluster(request, shared_clusters):
    with shared_clusters.lend(request.param) as c:
        yield c


def GPT(layers=4):
    """nanoGPT's shape (the bench's workload, small): its forward (embeddings added, blocks,
    head, the loss) runs on the client, each part on its worker."""
    return gpt.GPT(vocab=40, context=16, width=32, heads=4, layers=layers)


def batch(seed, n=8, t=16, vocab=40):
    g = torch.Generator().manual_seed(seed)
    return (torch.randint(0, vocab, (n, t), generator=g),
            torch.randint(0, vocab, (n, t), generator=g))


def close(a, b, tol=1e-5):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


def deployed(cluster, model):
    return cluster.deploy(model, stages=len(cluster.workers()))


@on_one_size_by_default(3)
def test_gpt_training_keeps_activations_on_the_workers(cluster):
    torch.manual_seed(0)
    model = GPT()
    local = copy.deepcopy(model)
    deployed(cluster, model)
    try:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        opt_local = torch.optim.AdamW(local.parameters(), lr=1e-2)
        for step in range(4):
            x, y = batch(step)
            model.stats(reset=True)
            logits, loss = model(x, y)
            assert type(logits) is RemoteValue and logits.is_remote
            opt.zero_grad()
            loss.backward()
            opt.step()
            value = loss.item()
            stats = model.stats()
            _, ref_loss = local(x, y)
            opt_local.zero_grad()
            ref_loss.backward()
            opt_local.step()
            assert value == pytest.approx(ref_loss.item(), abs=1e-5)
            if step:  # after the first step the calls do not wait; the loss is read once
                assert stats["waited"] <= 2, stats
            # through the client: the inputs, the targets and the loss, not the activations
            # (logits alone are 8 x 16 x 40 floats = 20 KiB)
            assert stats["bytes_from_workers"] < 12_000, stats
            assert stats["bytes_between_workers"] > 8 * 16 * 32 * 4, stats
        for (name, p), q in zip(model.named_parameters(), local.parameters()):
            close(p.detach().numpy(), q.detach().numpy())
    finally:
        model.close()


def test_a_hook_that_reads_a_kept_value_mid_forward(cluster):
    torch.manual_seed(1)
    model = GPT(layers=2)
    local = copy.deepcopy(model)
    seen, seen_local = [], []
    model.h[0].register_forward_hook(lambda m, i, o: seen.append(o.mean().item()))
    local.h[0].register_forward_hook(lambda m, i, o: seen_local.append(o.mean().item()))
    deployed(cluster, model)
    try:
        x, y = batch(5)
        for _ in range(2):
            _, loss = model(x, y)
            loss.backward()
            _, ref = local(x, y)
            ref.backward()
            close(loss.item(), ref.item())
        close(seen, seen_local)
        close(model.h[1].mlp[0].weight.grad.numpy(), local.h[1].mlp[0].weight.grad.numpy())
    finally:
        model.close()


class Picky(nn.Module):
    """Fails on its worker when its input's values say so: the answer's form is the same,
    so a call after the first does not wait, and the failure comes later."""

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.tensor(2.0))  # (a parameter: it is placed)

    def forward(self, x):
        if float(x.abs().sum()) > 1e6:
            raise ValueError("the input is too large for Picky")
        return x * self.scale


class Chain(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.picky, self.b = nn.Linear(4, 4), Picky(), nn.Linear(4, 4)

    def forward(self, x):
        return self.b(self.picky(self.a(x)))


def test_an_error_inside_a_call_that_did_not_wait_is_raised_at_the_next_wait(cluster):
    torch.manual_seed(2)
    model = deployed(cluster, Chain())
    try:
        x = torch.ones(3, 4)
        assert deployment_of(model.picky) is not None
        first = model(x).sum().item()  # learns the answers' forms
        out = model(x * 1e7)  # goes on without waiting
        assert out.shape == (3, 4)
        with pytest.raises(ValueError, match="too large for Picky") as info:
            out.sum().item()
        assert any("did not wait" in note for note in getattr(info.value, "__notes__", []))
        assert model(x).sum().item() == first  # the model still works
    finally:
        model.close()


def test_in_place_changes_of_kept_values(cluster):
    torch.manual_seed(3)
    model = deployed(cluster, Chain())
    local = copy.deepcopy(model.to_local())
    try:
        x = torch.randn(3, 4)
        with torch.no_grad():
            h = model.a(x)
            h += 1  # becomes a local tensor, changed here
            close(h.numpy(), (local.a(x) + 1).numpy())
            base = model.a(x)
            view = base.view(12)
            assert type(view) is RemoteValue
            with pytest.raises(RuntimeError, match="clone"):
                base.mul_(2)
            kept = model.a(x)
            alias = kept.detach()  # one value, two tensors: as in one process, they share it
            alias.add_(1)  # both become local over one copy, changed here
            close(alias.numpy(), (local.a(x) + 1).numpy())
            close(kept.numpy(), (local.a(x) + 1).numpy())
            assert type(kept) is not RemoteValue and kept.data_ptr() == alias.data_ptr()
    finally:
        model.close()


def test_dropped_outputs_are_freed_on_the_workers(cluster):
    torch.manual_seed(4)
    model = deployed(cluster, GPT(layers=2))
    try:
        x, _ = batch(7)
        with torch.no_grad():
            outs = [model(x) for _ in range(3)]
        held = sum(s.get("values", 0) for s in worker_statuses(cluster).values())
        assert held >= 3
        del outs
        model.stats()  # any request carries the drops
        assert wait_until(lambda: sum(s.get("values", 0) for s in
                                      worker_statuses(cluster).values()) == 0, 10)
    finally:
        model.close()


@on_one_size_by_default(2)
def test_a_loop_that_never_waits_stays_a_bounded_number_of_calls_ahead(cluster, monkeypatch):
    """Steps whose results the program never reads send calls without waiting; past
    ``MAX_AHEAD`` unanswered calls the program waits for the older half, so neither the
    workers' queues nor the kept values grow with the number of steps. Gradients as one
    process's."""
    from disthook.distributed import channel

    monkeypatch.setattr(channel, "MAX_AHEAD", 8)
    torch.manual_seed(5)
    model = GPT(layers=2)
    local = copy.deepcopy(model)
    deployed(cluster, model)
    hub = deployment_of(model)._hub
    try:
        most = 0
        for step in range(12):
            x, y = batch(step)
            for m in (model, local):
                _, loss = m(x, y)
                loss.backward()
            most = max(most, len(hub.in_flight))
        assert 0 < most <= 8
        for (name, p), q in zip(model.named_parameters(), local.parameters()):
            close(p.grad, q.grad)  # every step's gradient accumulated, as here
    finally:
        model.close()


class Shapeshifter(nn.Module):
    """Its output's shape depends on its input's values: a prediction from the previous
    call's answer is wrong, and the program hears so."""

    def __init__(self):
        super().__init__()
        self.one = nn.Parameter(torch.tensor(1.0))  # (a parameter: it is placed)

    def forward(self, x):
        return x[: max(1, int(float(x[0, 0])))] * self.one


class Holder(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.s = nn.Linear(4, 4), Shapeshifter()

    def forward(self, x):
        return self.s(self.a(x))


def test_an_answer_that_differs_from_its_prediction_is_refused_loudly(cluster):
    model = cluster.deploy(Holder(), stages=2)
    try:
        with torch.no_grad():
            model.a.weight.copy_(torch.eye(4))
            model.a.bias.zero_()
            x = torch.full((5, 4), 2.0)
            assert model(x).sum().item() == 16.0
            out = model(torch.full((5, 4), 3.0))  # predicted: 2 rows; it has 3
            with pytest.raises(RuntimeError, match="differs"):
                out.sum().item()
    finally:
        model.close()


def _lm_loss(logits, target):
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), target.reshape(-1))


@pytest.mark.parametrize("cluster, schedule", product([2, 3], ["gpipe", "1f1b"], ids=[
    f"{workers(n)}-{name}" for n in (2, 3) for name in ("gpipe", "1f1b")]), indirect=["cluster"])
def test_gpt_micro_batches_under_each_schedule(cluster, schedule):
    torch.manual_seed(6)
    local = GPT(layers=2)
    model = cluster.deploy(copy.deepcopy(local), stages=len(cluster.workers()), chunks=4,
                           schedule=schedule)
    try:
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        opt_local = torch.optim.SGD(local.parameters(), lr=0.1)
        rows = []  # a hook fires once per micro-batch, with its rows (as in torch's pipelining)
        handle = model.h[0].register_forward_hook(lambda m, a, out: rows.append(out.shape[0]))
        for step in range(2):
            x, y = batch(10 + step)
            opt.zero_grad()
            losses = model.train_step(x, y, _lm_loss)
            opt.step()
            if step == 0:
                assert rows == [2, 2, 2, 2]
                handle.remove()
            opt_local.zero_grad()
            parts = [_lm_loss(local(x[i:i + 2]), y[i:i + 2]) for i in range(0, 8, 2)]
            (sum(parts) / 4).backward()
            opt_local.step()
            close(losses.numpy(), [p.item() for p in parts])
        with torch.no_grad():
            close(model(x).numpy(), local(x).numpy())  # a call joins its micro-batches
        for (name, p), q in zip(model.named_parameters(), local.parameters()):
            close(p.detach().numpy(), q.detach().numpy())
    finally:
        model.close()


class Critic(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 8), nn.Linear(8, 1)

    def forward(self, x):
        return self.b(torch.tanh(self.a(x)))


def _penalised_step(model, x):
    x = x.detach().clone().requires_grad_(True)
    out = model(x)
    (g,) = torch.autograd.grad(out.sum(), x, create_graph=True)
    loss = out.mean() + ((g.norm(dim=1) - 1) ** 2).mean()  # a WGAN-GP gradient penalty
    loss.backward()
    return loss.item(), x.grad.numpy()


def test_a_gradient_penalty_with_create_graph(cluster):
    torch.manual_seed(8)
    local = Critic()
    model = cluster.deploy(copy.deepcopy(local), stages=2)
    try:
        x = torch.randn(6, 4)
        for _ in range(2):
            model.zero_grad()
            local.zero_grad()
            got, want = _penalised_step(model, x), _penalised_step(local, x)
            close(got[0], want[0])
            close(got[1], want[1])  # the input's gradient, through the penalty too
            for (name, p), q in zip(model.named_parameters(), local.parameters()):
                close(p.grad.numpy(), q.grad.numpy())
    finally:
        model.close()


class Scaled(nn.Module):
    """A part whose output is large enough to stay on its worker, and a parameter of the
    model's own (so its forward runs here and calls the part)."""

    def __init__(self, width=40):
        super().__init__()
        self.lin = nn.Linear(width, width)
        self.gain = nn.Parameter(torch.ones(1))

    def forward(self, x):
        return self.lin(x * self.gain)


def _path_length_step(model, x, noise):
    """StyleGAN2's path-length regularizer: the output times a constant, its gradient to
    the input with create_graph, and the gradient's norm trained."""
    x = x.detach().clone().requires_grad_(True)
    (g,) = torch.autograd.grad((model(x) * noise).sum(), x, create_graph=True)
    model.zero_grad()
    g.pow(2).sum(1).sqrt().mean().backward()
    return {name: None if p.grad is None else p.grad.numpy().copy()
            for name, p in model.named_parameters()}


def test_a_penalty_on_a_gradient_seeded_by_a_constant_reaches_the_parts_weights(cluster):
    """The product with the constant runs on the worker keeping the output; the backward
    of the penalty reaches the part's weights only through the part's own backward graph,
    while its forward graph gets no gradient: the weight's gradient was held for that
    call, which never ran, and never reached .grad."""
    torch.manual_seed(10)
    local = Scaled().double()
    model = cluster.deploy(copy.deepcopy(local), stages=1)
    try:
        x = torch.randn(3, 40, dtype=torch.float64)
        noise = torch.randn(3, 40, dtype=torch.float64)
        got, want = _path_length_step(model, x, noise), _path_length_step(local, x, noise)
        assert type(model.lin(x)) is RemoteValue  # (the product runs on the worker)
        assert sorted(name for name in want if want[name] is not None) == ["gain",
                                                                             "lin.weight"]
        for name in want:
            assert (got[name] is None) == (want[name] is None), name
            if want[name] is not None:
                close(got[name], want[name], 1e-10)
    finally:
        model.close()


class Blocked(torch.autograd.Function):
    """Passes its input on and no gradient back (a stop-gradient written as a Function)."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return None


class CalledTwice(Scaled):
    def forward(self, x, y):
        return self.lin(x * self.gain).sum() + Blocked.apply(self.lin(y)).sum()


def test_a_part_called_twice_whose_second_call_gets_no_gradient_keeps_the_first_ones(cluster):
    """A plain backward: the second call's node gets no gradient and does not run, and the
    first call's gradient of the weight was held for it on the worker: .grad stayed None."""
    torch.manual_seed(11)
    local = CalledTwice().double()
    model = cluster.deploy(copy.deepcopy(local), stages=1)
    try:
        x, y = torch.randn(2, 40, dtype=torch.float64), torch.randn(2, 40, dtype=torch.float64)
        for m in (model, local):
            m(x, y).backward()
        for (name, p), q in zip(model.named_parameters(), local.parameters()):
            assert p.grad is not None, name
            close(p.grad.numpy(), q.grad.numpy(), 1e-12)
    finally:
        model.close()


def test_a_gradient_penalty_through_a_chain_says_how_to_deploy_it_so_that_it_works(cluster):
    """A chain of stages passes its gradients worker to worker as values: create_graph is
    refused, naming the placement that runs the same model part by part from here, and
    that placement computes the penalty as one process does."""
    torch.manual_seed(9)
    local = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 8), nn.Tanh(),
                          nn.Linear(8, 1))
    x = torch.randn(6, 4)
    chain = cluster.deploy(copy.deepcopy(local), stages=2)
    try:
        with pytest.raises(NotImplementedError) as caught:
            _penalised_step(chain, x)
        placement = {str(i): 0 for i in range(len(deployment_of(chain)._stage_names[0]))}
        placement.update({str(i): 1 for i in range(len(placement), 5)})
        assert f"placement={placement!r}" in str(caught.value)
    finally:
        chain.close()
    placed = cluster.deploy(copy.deepcopy(local), placement=placement)
    try:
        got, want = _penalised_step(placed, x), _penalised_step(local, x)
        close(got[0], want[0])
        close(got[1], want[1])
        for p, q in zip(placed.parameters(), local.parameters()):
            close(p.grad.numpy(), q.grad.numpy())
    finally:
        placed.close()
