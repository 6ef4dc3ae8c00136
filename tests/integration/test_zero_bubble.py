"""ZB-H1 on the chain path (deploy(..., schedule="zb-h1")): each stage's backward is split
into B (the gradient its previous stage waits for) and W (its weights' gradients, run later
to fill the pipeline's drain). Gradients and the hook log equal one process's, micro-batch
by micro-batch, on 2 and 3 workers: tensor hooks on parameters and activations and full
backward hooks fire as often, with the same arguments; a
weight used twice in a stage stays exact. Only the order across micro-batches differs (see
docs/hooks.md)."""
from collections import defaultdict

import numpy as np
import pytest
from test_microbatch import train_three_steps  # three SGD steps here and on the workers

import disthook as torch
from disthook import nn

pytestmark = pytest.mark.timeout(240)

ROWS, CHUNKS = 8, 4


class Twice(nn.Module):
    """One Linear applied twice: its weight gets the sum of two gradients."""

    def __init__(self, width):
        super().__init__()
        self.lin = nn.Linear(width, width)

    def forward(self, x):
        return self.lin(torch.tanh(self.lin(x)))


def make_net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), Twice(16), nn.Linear(16, 16),
                         nn.Tanh(), nn.Linear(16, 3))


def data():
    torch.manual_seed(1)
    return torch.randn(ROWS, 8), torch.randint(0, 3, (ROWS,))


def hook_everything(model, log):
    """Hooks of every kind a deployed model takes from the client, each logging its
    arguments (post-accumulate hooks run only where the gradient accumulates: their
    exactness under the split is tested in tests/test_split_backward.py)."""
    for name in ("0.weight", "2.lin.weight", "5.bias"):
        p = model.get_parameter(name)
        p.register_hook(lambda g, name=name: log.append(("tensor", name, g.numpy().copy())))
    for i in ("2", "3", "5"):
        model.get_submodule(i).register_full_backward_hook(
            lambda m, gi, go, i=i: log.append(("full backward", i, go[0].numpy().copy())))

    def activation(m, args, out):  # a hook on the activation the forward made
        out.register_hook(lambda g: log.append(("activation", "3", g.numpy().copy())))

    model[3].register_forward_hook(activation)


def one_process(log):
    """train_step's arithmetic in one process: each micro-batch's loss scaled by its rows."""
    net = make_net()
    hook_everything(net, log)
    x, y = data()
    rows = ROWS // CHUNKS
    for mb in range(CHUNKS):
        piece = slice(mb * rows, (mb + 1) * rows)
        loss = nn.functional.cross_entropy(net(x[piece]), y[piece]) * (rows / ROWS)
        loss.backward()
    return {n: p.grad.numpy() for n, p in net.named_parameters()}


def on_workers(cluster, stages, schedule, log):
    remote = cluster.deploy(make_net(), stages=stages, chunks=CHUNKS, schedule=schedule)
    try:
        hook_everything(remote, log)
        x, y = data()
        losses = remote.train_step(x, y, nn.functional.cross_entropy)
        assert losses.shape == (CHUNKS,)
        return {n: p.grad.numpy() for n, p in remote.named_parameters()}
    finally:
        remote.close()


def by_hook(log):
    out = defaultdict(list)
    for kind, name, value in log:
        out[(kind, name)].append(value)
    return out


@pytest.mark.parametrize("stages", [2, 3])
def test_zb_h1_gradients_and_hooks_equal_one_process(cluster, stages):
    local_log, zb_log, plain_log = [], [], []
    want = one_process(local_log)
    got = on_workers(cluster, stages, "zb-h1", zb_log)
    plain = on_workers(cluster, stages, "1f1b", plain_log)
    assert got.keys() == want.keys()
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-7)
        # the split changes no sum: the same bits as the whole backward on the same workers
        np.testing.assert_array_equal(got[name], plain[name])
    local, zb = by_hook(local_log), by_hook(zb_log)
    assert local.keys() == zb.keys() and len(local) == 7
    for key in local:
        assert len(zb[key]) == len(local[key]) == CHUNKS, key
        for a, b in zip(zb[key], local[key]):  # micro-batch by micro-batch
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7, err_msg=str(key))
    # on the last stage (module 5), 1F1B fires the bias's hook inside each micro-batch's
    # backward; zb-h1 in its W, after the B's of the next p - 1 micro-batches
    def last_stage(log):
        return [(kind, name) for kind, name, _ in log if name in ("5", "5.bias")]

    assert last_stage(plain_log)[:3] == [("tensor", "5.bias"), ("full backward", "5"),
                                         ("tensor", "5.bias")]
    assert last_stage(zb_log)[:stages + 1] == [("full backward", "5")] * stages + [
        ("tensor", "5.bias")]


@pytest.mark.parametrize("stages", [2, 3])
def test_zb_h1_trains_as_the_whole_batch_does(cluster, stages):
    train_three_steps(cluster, stages, CHUNKS, "zb-h1",
                      lambda r, x, y: r.train_step(x, y, nn.functional.cross_entropy))


def no_hooks(model, log):
    pass


@pytest.mark.parametrize("stages", [2, 3])
@pytest.mark.parametrize("hooks", [no_hooks, hook_everything])
def test_zb_batched_gradients_and_hooks_equal_one_process(cluster, stages, hooks):
    """zb-batched: every W at the end of the step, taken together. With no hook on the
    weights each weight's gradient is one product over the step's rows (within rounding of
    one process's micro-batch by micro-batch); with hooks each micro-batch's W runs in turn
    and every hook fires once per micro-batch with one process's arguments."""
    local_log, log = [], []
    want = one_process(local_log)
    if hooks is no_hooks:
        local_log = []
    remote = cluster.deploy(make_net(), stages=stages, chunks=CHUNKS, schedule="zb-batched")
    try:
        hooks(remote, log)
        x, y = data()
        remote.train_step(x, y, nn.functional.cross_entropy)
        got = {n: p.grad.numpy() for n, p in remote.named_parameters()}
        timelines = [s["timeline"] for s in remote.step_stats]
    finally:
        remote.close()
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-7, err_msg=name)
    for timeline in timelines:  # each stage's W's: the last actions of its step
        kinds = [kind for kind, *_ in timeline]
        assert kinds[-CHUNKS:] == ["weight_batch"] * CHUNKS
        assert "weight" not in kinds
    local, got_log = by_hook(local_log), by_hook(log)
    assert local.keys() == got_log.keys()
    for key in local:
        assert len(got_log[key]) == len(local[key]) == CHUNKS, key
        for a, b in zip(got_log[key], local[key]):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7, err_msg=str(key))


@pytest.mark.parametrize("stages", [2, 3])
def test_zb_batched_trains_as_the_whole_batch_does(cluster, stages):
    train_three_steps(cluster, stages, CHUNKS, "zb-batched",
                      lambda r, x, y: r.train_step(x, y, nn.functional.cross_entropy))


class Block(nn.Module):
    """A pre-norm transformer block: its Linear layers see 3-D input (rows flattened), and
    its weights' gradients come from products, layer norms and a bare parameter."""

    def __init__(self, width, heads=2):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.mlp = nn.Sequential(nn.Linear(width, 2 * width), nn.GELU(),
                                 nn.Linear(2 * width, width))
        self.gate = nn.Parameter(torch.full((width,), 0.5))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(c, dim=2)
        q, k, v = (z.reshape(b, t, self.heads, c // self.heads).transpose(1, 2)
                   for z in (q, k, v))
        att = (q @ k.transpose(-2, -1) / (c // self.heads) ** 0.5).softmax(-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, c))
        return x + self.gate * self.mlp(self.norm2(x))


class Head(nn.Module):
    def __init__(self, width, classes):
        super().__init__()
        self.out = nn.Linear(width, classes)

    def forward(self, x):
        return self.out(x.mean(1))


def small_gpt():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), Block(8), Block(8), Block(8), Head(8, 3))


@pytest.mark.parametrize("stages", [2, 3])
def test_zb_batched_transformer_blocks_train_as_one_process(cluster, stages):
    """Blocks of a small transformer over 3 steps of SGD: the weights after each step as one
    process's micro-batch by micro-batch (within rounding)."""
    torch.manual_seed(2)
    x, y = torch.randn(ROWS, 5, 6), torch.randint(0, 3, (ROWS,))
    net = small_gpt()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    rows = ROWS // CHUNKS
    remote = cluster.deploy(small_gpt(), stages=stages, chunks=CHUNKS, schedule="zb-batched")
    try:
        from disthook.distributed import DistributedOptimizer

        ropt = DistributedOptimizer(torch.optim.SGD, remote.parameters(), lr=0.1)
        for _ in range(3):
            opt.zero_grad()
            for mb in range(CHUNKS):
                piece = slice(mb * rows, (mb + 1) * rows)
                (nn.functional.cross_entropy(net(x[piece]), y[piece]) * (rows / ROWS)) \
                    .backward()
            opt.step()
            ropt.zero_grad()
            remote.train_step(x, y, nn.functional.cross_entropy)
            ropt.step()
        want = dict(net.named_parameters())
        for name, p in remote.named_parameters():
            np.testing.assert_allclose(p.detach().numpy(), want[name].detach().numpy(),
                                       rtol=1e-4, atol=1e-6, err_msg=name)
    finally:
        remote.close()
