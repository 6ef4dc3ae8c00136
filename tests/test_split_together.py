"""Several micro-batches' weight parts run as one (disthook.autograd.split.run_together, the
zb-batched schedule's W): each weight gets the sum of their gradients once, Linear's taken as
one product over the micro-batches' rows stacked, where nothing can tell the difference; where
something watches (hooks of any kind on the weights' way) or the graphs differ, each part
runs in turn, exactly as ``run()`` runs it."""
import numpy as np
import pytest

import disthook as torch
import disthook.nn.functional as F
from disthook import nn
from disthook.autograd.split import backward_split, run_together
from disthook.ops import linalg


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 8), nn.Tanh(),
                         nn.Linear(8, 3)).double()


def data(rows=12):
    torch.manual_seed(1)
    return torch.randn(rows, 6, dtype=torch.float64)


@pytest.fixture
def stacked(monkeypatch):
    """How many times a product took several micro-batches' rows at once."""
    calls = []

    def counting(node, rows, grads, edges):
        calls.append(sum(len(r) for r in rows))
        return linalg.stack_rows(node, rows, grads, edges)

    for op in (linalg.Addmm, linalg.Mm):
        monkeypatch.setattr(op, "stack_rows", staticmethod(counting))
    return calls


def grads(net):
    return {n: p.grad.numpy().copy() for n, p in net.named_parameters()}


def split_parts(net, x, sizes, shallow=True, **kwargs):
    parts, start = [], 0
    for rows in sizes:
        out = net(x[start:start + rows])
        parts.append(backward_split([out.sum()], None, list(net.parameters()),
                                    shallow=shallow, **kwargs))
        start += rows
    return parts


@pytest.mark.parametrize("sizes", [(3, 3, 3, 3), (5, 4, 3)])
def test_linear_weights_get_one_product_over_the_stacked_rows(stacked, sizes):
    """The sum is the whole batch's: the same bits as one backward of all the rows (the
    product over them is the same product), and within rounding of micro-batch by
    micro-batch."""
    net, x = mlp(), data()
    net(x).sum().backward()
    whole = grads(net)
    net.zero_grad(set_to_none=True)
    for start, rows in zip(np.cumsum((0,) + sizes[:-1]), sizes):
        net(x[start:start + rows]).sum().backward()
    one_by_one = grads(net)
    net.zero_grad(set_to_none=True)
    run_together(split_parts(net, x, sizes))
    got = grads(net)
    assert stacked == [12, 12, 12]  # each Linear's weight and bias: one product of 12 rows
    for name in whole:
        np.testing.assert_array_equal(got[name], whole[name], err_msg=name)
        np.testing.assert_allclose(got[name], one_by_one[name], rtol=1e-13, err_msg=name)


def test_gradients_grow_into_what_is_there():
    net, x = mlp(), data()
    net(x).sum().backward()
    before = grads(net)
    run_together(split_parts(net, x, (6, 6)))
    for name, g in grads(net).items():
        np.testing.assert_allclose(g, 2 * before[name], rtol=1e-13)


def watch_tensor(p, log):
    return p.register_hook(lambda g: log.append(g.numpy().copy()))


def watch_after(p, log):
    return p.register_post_accumulate_grad_hook(lambda t: log.append(t.grad.numpy().copy()))


def watch_node(p, log):
    """A pre-hook on the weight's AccumulateGrad node (returned: kept alive by the test, as
    a program must keep it for its hooks to stay)."""
    acc = p.view_as(p).grad_fn.next_functions[0][0]
    acc.register_prehook(lambda go: log.append(go[0].numpy().copy()))
    return acc


@pytest.mark.parametrize("watch", [watch_tensor, watch_after, watch_node])
def test_a_watched_weight_gets_its_gradients_one_micro_batch_at_a_time(stacked, watch):
    """A hook on a weight's way sees each micro-batch's gradient, as under zb-h1, and every
    weight's .grad is then the sums micro-batch by micro-batch, bit for bit."""
    net, x = mlp(), data()
    want_log = []
    kept = watch(net[2].weight, want_log)
    for part in split_parts(net, x, (4, 4, 4)):
        part.run()
    want = grads(net)
    log = []
    net2 = mlp()
    kept = watch(net2[2].weight, log)
    run_together(split_parts(net2, x, (4, 4, 4)))
    assert kept is not None and stacked == []
    assert len(log) == len(want_log) == 3
    for a, b in zip(log, want_log):
        np.testing.assert_array_equal(a, b)
    for name, g in grads(net2).items():
        np.testing.assert_array_equal(g, want[name], err_msg=name)


def test_a_weight_only_op_of_its_own_per_micro_batch_stays_exact(stacked):
    """DropConnect: each micro-batch's weight is masked by its own random mask, a node
    between the weight and the product. The mask's node runs per micro-batch (in B under a
    shallow split); the sums reaching the weight are exact."""
    torch.manual_seed(0)
    w = torch.randn(5, 6, dtype=torch.float64, requires_grad=True)
    x = data()
    masks = [torch.rand(5, 6, dtype=torch.float64) > 0.5 for _ in range(3)]
    for i in range(3):
        F.linear(x[4 * i:4 * i + 4], w * masks[i]).sum().backward()
    want = w.grad.numpy().copy()
    w.grad = None
    parts = [backward_split([F.linear(x[4 * i:4 * i + 4], w * masks[i]).sum()], None, [w],
                            shallow=True) for i in range(3)]
    run_together(parts)
    np.testing.assert_allclose(w.grad.numpy(), want, rtol=1e-13)
    assert stacked == []  # the mask's node is not a product over rows


def test_a_weight_used_twice_in_a_part_stays_exact(stacked):
    torch.manual_seed(0)
    lin = nn.Linear(6, 6).double()
    x = data()

    def loss(rows):
        return lin(torch.tanh(lin(rows))).sum()

    for i in range(3):
        loss(x[4 * i:4 * i + 4]).backward()
    want = grads(lin)
    lin.zero_grad(set_to_none=True)
    run_together([backward_split([loss(x[4 * i:4 * i + 4])], None, list(lin.parameters()),
                                 shallow=True) for i in range(3)])
    for name, g in grads(lin).items():
        np.testing.assert_allclose(g, want[name], rtol=1e-13, err_msg=name)
    assert stacked == [12, 12]  # each call of the Linear: its weight's and bias's share


def test_parts_of_different_graphs_run_one_by_one(stacked):
    net, x = mlp(), data()
    a = backward_split([net(x[:6]).sum()], None, list(net.parameters()), shallow=True)
    b = backward_split([net[0](x[6:]).sum()], None, list(net.parameters()), shallow=True)
    run_together([a, b])
    assert stacked == []
    assert net[4].weight.grad is not None and net[0].weight.grad is not None


def test_each_part_runs_once_and_the_graph_is_kept_only_when_asked():
    net, x = mlp(), data()
    parts = split_parts(net, x, (6, 6))
    run_together(parts)
    with pytest.raises(RuntimeError, match="already computed"):
        run_together(parts)
    with pytest.raises(RuntimeError, match="already computed"):
        parts[0].run()
    kept = split_parts(net, x, (6, 6), retain_graph=True)
    run_together(kept)
    node = net(x).grad_fn  # the parts' own nodes keep what they saved
    assert node is not None


class Mixed(nn.Module):
    """Weights of other ops than Linear's product: an embedding, a convolution, a layer
    norm's scale and shift, a Linear on 3-D input (its rows flattened), a bare parameter
    multiplied in."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 6)
        self.conv = nn.Conv1d(6, 6, 3, padding=1)
        self.norm = nn.LayerNorm(6)
        self.proj = nn.Linear(6, 4)
        self.scale = nn.Parameter(torch.ones(4))

    def forward(self, tokens):
        h = self.embed(tokens)                       # (b, t, 6)
        h = self.conv(h.transpose(1, 2)).transpose(1, 2)
        return self.proj(torch.tanh(self.norm(h))) * self.scale


def test_other_ops_weights_are_summed_before_they_reach_the_weight(stacked):
    torch.manual_seed(0)
    net = Mixed().double()
    tokens = torch.randint(0, 10, (6, 5))
    for i in range(3):
        net(tokens[2 * i:2 * i + 2]).pow(2).sum().backward()
    want = grads(net)
    net.zero_grad(set_to_none=True)
    run_together([backward_split([net(tokens[2 * i:2 * i + 2]).pow(2).sum()], None,
                                 list(net.parameters()), shallow=True) for i in range(3)])
    got = grads(net)
    assert got.keys() == want.keys()
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-12, atol=1e-14,
                                   err_msg=name)
    assert stacked == [30]  # the Linear's rows: 3 micro-batches of 2 x 5
