"""A deployed parameter that several calls of one forward use (a placed module called twice,
an embedding tied to the output head, a whole chain called twice): one process sums the
calls' gradients before the parameter's hooks run, so a tensor hook fires once, with the
sum, and ``.grad`` grows once. The workers hold each call's part until the last call that
uses the parameter runs its backward (workers/held_grads.py); each test compares with one
process, hook log and ``.grad``."""
import warnings

import numpy as np
import pytest
from helpers import deployed_run, same_logs

import disthook as torch
from disthook import nn

pytestmark = pytest.mark.timeout(240)
CLUSTER_WORKERS = 2


class Twice(nn.Module):
    """``block`` is called twice in one forward."""

    def __init__(self):
        super().__init__()
        self.block, self.head = nn.Linear(4, 4), nn.Linear(4, 2)

    def forward(self, x):
        return self.head(torch.tanh(self.block(torch.tanh(self.block(x)))))


class Tied(nn.Module):
    """An embedding whose weight is the output head's (two placed calls, one worker)."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 6)
        self.mid = nn.Linear(6, 6)
        self.out = nn.Linear(6, 10, bias=False)
        self.out.weight = self.emb.weight

    def forward(self, t):
        return self.out(torch.tanh(self.mid(self.emb(t))))


class TwoOutputs(nn.Module):
    """Its second output does not depend on its weight."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        return self.lin(x), x * 2


class UsesSecondOutput(nn.Module):
    def __init__(self):
        super().__init__()
        self.pre = nn.Linear(3, 3)
        self.two = TwoOutputs()

    def forward(self, x):
        a, _ = self.two(self.pre(x))  # the first call: its weight's gradient flows
        _, b = self.two(a)  # the second: only the output without the weight is used
        return (a * b).sum(-1)


def _made(cls):
    def make():
        torch.manual_seed(0)
        return cls()
    return make


def _clamping_run(paths, x, clamp=0.05, steps=1):
    """Hooks that clamp and log each gradient they see; the model's ``.grad`` after."""
    def run(model):
        log = []
        for path in paths:
            p = model.get_parameter(path)
            p.register_hook(lambda g, path=path: (log.append((path, g.numpy().copy())),
                                                  g.clamp(-clamp, clamp))[1])
        for _ in range(steps):
            model(x).logsumexp(-1).sum().backward()
        grads = [(n, None if p.grad is None else p.grad.numpy().copy())
                 for n, p in model.named_parameters()]
        return log, grads
    return run


def test_a_module_called_twice_gives_its_weights_hooks_the_sum_once(cluster):
    run = _clamping_run(["block.weight", "block.bias", "head.weight"], torch.ones(3, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got, want = deployed_run(cluster, _made(Twice), run)
    assert len(want[0]) == 3  # each hook once
    same_logs(got, want)


def test_tied_embedding_and_head_clamped_as_in_one_process(cluster):
    t = torch.tensor([[1, 2, 3], [4, 5, 6]])
    run = _clamping_run(["emb.weight"], t, steps=2)  # twice: .grad grows by the sum twice
    got, want = deployed_run(cluster, _made(Tied), run)
    assert len(want[0]) == 2  # once per backward
    same_logs(got, want)


def test_a_chain_called_twice_sums_each_stages_gradients(cluster):
    def make():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 5), nn.Tanh(),
                             nn.Linear(5, 2))

    def run(model):  # a siamese use: the same network on two inputs, one loss
        log = []
        for name, p in model.named_parameters():
            p.register_hook(lambda g, name=name: (log.append((name, g.numpy().copy())),
                                                  g * 0.5)[1])
        a, b = model(torch.ones(3, 4)), model(torch.full((3, 4), -0.5))
        ((a - b) ** 2).sum().backward()
        return sorted(log, key=lambda e: e[0]), [p.grad.numpy().copy()
                                                 for p in model.parameters()]

    got, want = deployed_run(cluster, make, run)
    assert len(want[0]) == 6  # each parameter's hook once
    same_logs(got, want)


def test_a_later_call_whose_gradient_misses_the_weight_leaves_the_first_calls(cluster):
    def run(model):
        log = []
        model.two.lin.weight.register_hook(lambda g: log.append(g.numpy().copy()))
        model(torch.ones(2, 3)).sum().backward()
        return log, model.two.lin.weight.grad.numpy().copy()

    got, want = deployed_run(cluster, _made(UsesSecondOutput), run)
    assert len(want[0]) == 1
    same_logs(got, want)


def test_only_the_calls_the_backward_reaches_are_summed(cluster):
    def run(model):  # two calls, one loss from the first alone, then one from the second
        log = []
        model.block.weight.register_hook(lambda g: log.append(g.numpy().copy()))
        h = torch.tanh(model.block(torch.ones(2, 4)))
        out = model.block(h)
        h.sum().backward(retain_graph=True)
        out.sum().backward()
        return log, model.block.weight.grad.numpy().copy()

    got, want = deployed_run(cluster, _made(Twice), run)
    assert len(want[0]) == 2
    same_logs(got, want)


def test_micro_batches_sum_each_micro_batchs_calls(cluster):
    def run(model):
        log = []
        model.block.weight.register_hook(lambda g: log.append(g.numpy().copy()))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            model(torch.arange(16.0).reshape(4, 4) / 10).sum().backward()
        return log, model.block.weight.grad.numpy().copy()

    got, want = deployed_run(cluster, _made(Twice), run, chunks=2)
    # once per micro-batch, each the sum of that micro-batch's two calls; the backward
    # reaches the second micro-batch's calls first (the newer nodes run first)
    x = torch.arange(16.0).reshape(4, 4) / 10
    per_micro_batch = []
    for rows in (x[2:], x[:2]):
        one = _made(Twice)()
        one.block.weight.register_hook(lambda g: per_micro_batch.append(g.numpy().copy()))
        one(rows).sum().backward()
    assert len(want[0]) == 1
    same_logs(got[0], per_micro_batch)
    same_logs(got[1], want[1])


def test_a_backward_that_fails_halfway_leaves_nothing_for_the_next(cluster):
    def run(model):
        calls = []

        def fail_once(module, grad_input, grad_output):
            calls.append(1)
            if len(calls) == 1:
                raise ValueError("stop here")

        handle = model.head.register_full_backward_hook(fail_once)
        x = torch.ones(3, 4)
        with pytest.raises(Exception, match="stop here"):
            model(x).sum().backward()  # block's two calls never run their backward
        for p in model.parameters():
            p.grad = None
        handle.remove()
        model(x).sum().backward()
        return [p.grad.numpy().copy() for p in model.parameters()]

    got, want = deployed_run(cluster, _made(Twice), run)
    same_logs(got, want)


def test_where_the_parts_still_come_apart_the_client_says_so(cluster):
    torch.manual_seed(0)
    remote = cluster.deploy(Twice(), stages=2)
    try:
        fired = []
        remote.block.weight.register_hook(lambda g: fired.append(g.numpy().copy()))
        x = torch.ones(3, 4)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a plain backward: once, no warning
            remote(x).sum().backward()
        assert len(fired) == 1
        with pytest.warns(RuntimeWarning, match=r"tensor hook on 'block.weight' of a deployed "
                                                r"model fires once for each call of the "
                                                r"model in this backward"):
            torch.autograd.grad(remote(x).sum(), [remote.block.weight])
        assert np.isfinite(fired[-1]).all()
    finally:
        remote.close()


def test_a_worker_hook_sees_the_sum_once(cluster):
    from disthook.distributed import hooks

    def run(model, clamp):
        model.block.bias.register_hook(clamp)
        model(torch.ones(3, 4)).sum().backward()
        return model.block.bias.grad.numpy().copy()

    want = run(_made(Twice)(), lambda g: g.clamp(-0.05, 0.05))
    remote = cluster.deploy(_made(Twice)(), stages=2)
    try:
        same_logs(run(remote, hooks.clamp_grad(-0.05, 0.05)), want)
    finally:
        remote.close()


class HalvesItsGrad(Twice):
    def __init__(self):
        super().__init__()
        self.block.weight.register_post_accumulate_grad_hook(_halve)


def _halve(p):
    p.grad.mul_(0.5)


def test_a_post_accumulate_hook_registered_before_the_deploy_sees_the_sum_once(cluster):
    """The constructor's post-accumulate hook goes with its parameter to the worker (it
    was refused), fires once with the sum of the two calls' gradients and halves it."""
    def run(model):
        model(torch.ones(3, 4)).sum().backward()
        return model.block.weight.grad.numpy().copy()

    want = run(_made(HalvesItsGrad)())
    remote = cluster.deploy(_made(HalvesItsGrad)(), stages=2)
    try:
        same_logs(run(remote), want)
    finally:
        remote.close()


class Recurrent(nn.Module):
    """A cell called once per step, a start state of the root's own (kept here)."""

    def __init__(self):
        super().__init__()
        self.cell = nn.GRUCell(3, 5)
        self.head = nn.Linear(5, 2)
        self.h0 = nn.Parameter(torch.zeros(5))

    def forward(self, xs):
        h = self.h0.expand(xs.shape[1], 5)
        for t in range(xs.shape[0]):
            h = self.cell(xs[t], h)
        return self.head(h)


def test_a_cell_called_every_step_gives_each_hook_the_sum_once_per_backward(cluster):
    xs = torch.randn(7, 4, 3, generator=torch.Generator().manual_seed(1))

    def run(model):
        log = []
        for name, p in model.named_parameters():
            p.register_hook(lambda g, name=name: (log.append((name, g.numpy().copy())),
                                                  g.clamp(-0.1, 0.1))[1])
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        for _ in range(2):
            opt.zero_grad()
            model(xs).pow(2).sum().backward()
            opt.step()
        return sorted(log, key=lambda e: e[0]), [p.detach().numpy().copy()
                                                 for p in model.parameters()]

    got, want = deployed_run(cluster, _made(Recurrent), run,
                             placement={"cell": 0, "head": 1})
    assert len(want[0]) == 2 * 7  # each of the 7 parameters' hooks once per backward
    same_logs(got, want)
