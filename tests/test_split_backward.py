"""A backward split in two (disthook.autograd.split, for zero-bubble schedules): the input
gradients first, the weights' later. Gradients equal one backward's bit for bit, and every
hook fires as often, with the same arguments, as in one backward; only the weights' hooks
come later (after every hook of the first part)."""
from collections import defaultdict

import numpy as np
import pytest

import disthook as torch
import disthook.nn.functional as F
from disthook import nn
from disthook.autograd.split import backward_split


def arrays(value):
    if value is None:
        return None
    if isinstance(value, (tuple, list)):
        return [arrays(v) for v in value]
    return value.numpy().copy()


def same(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, list):
        return len(a) == len(b) and all(same(u, v) for u, v in zip(a, b))
    return a.dtype == b.dtype and np.array_equal(a, b)


def hooked_mlp(log):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 8), nn.Tanh(),
                        nn.Linear(8, 3))
    for name, p in net.named_parameters():
        p.register_hook(lambda g, name=name: log.append(("tensor", name, arrays(g))))
        p.register_post_accumulate_grad_hook(
            lambda t, name=name: log.append(("post-accumulate", name, arrays(t.grad))))
    for i in (0, 2, 4):
        net[i].register_full_backward_hook(
            lambda m, gi, go, i=i: log.append(("full backward", i, arrays(gi + go))))
    return net


def micro_batches(split: bool, make, loss_of, mbs: int = 3):
    """Backward per micro-batch (split: every B first, then every W in order)."""
    log = []
    net, params, x = make(log)
    later = []
    rows = len(x) // mbs
    for mb in range(mbs):
        out = net(x[mb * rows:(mb + 1) * rows])
        out.register_hook(lambda g: log.append(("activation", None, arrays(g))))
        loss = loss_of(out, log)
        if split:
            later.append(backward_split([loss], None, params))
        else:
            loss.backward()
    for weights in later:
        weights.run()
    return log, [arrays(p.grad) for p in params], arrays(x.grad)


def by_hook(log) -> dict:
    """Each hook's firings in order (the order across hooks may differ)."""
    out = defaultdict(list)
    for kind, name, value in log:
        out[(kind, name)].append(value)
    return out


def assert_same_as_one_backward(make, loss_of):
    one_log, one_grads, one_x = micro_batches(False, make, loss_of)
    log, grads, x = micro_batches(True, make, loss_of)
    assert all(same(a, b) for a, b in zip(one_grads, grads))
    assert same(one_x, x)
    one, two = by_hook(one_log), by_hook(log)
    assert one.keys() == two.keys()
    for key in one:
        assert len(one[key]) == len(two[key]) and same(one[key], two[key]), key
    return [k for k, _, _ in one_log], [k for k, _, _ in log]


def test_mlp_gradients_and_every_hook_equal_one_backward_weights_last():
    def make(log):
        net = hooked_mlp(log)
        return net, list(net.parameters()), torch.randn(6, 4, requires_grad=True)

    one, split = assert_same_as_one_backward(make, lambda out, log: out.pow(2).sum())
    # one backward interleaves the weights' hooks with the modules'; split, each micro-batch's
    # input side fires first, and the weights' hooks of the three come after
    assert one[:3] == ["activation", "tensor", "post-accumulate"]
    assert split[:4] == ["activation", "full backward", "full backward", "full backward"]
    assert set(split[12:]) == {"tensor", "post-accumulate"}


def test_a_weight_used_twice_and_node_hooks_stay_exact():
    def make(log):
        torch.manual_seed(0)
        lin, head = nn.Linear(5, 5), nn.Linear(5, 2)
        lin.weight.register_hook(lambda g: log.append(("tensor", "lin.weight", arrays(g))))

        def net(x):
            h2 = lin(F.relu(lin(x)))  # the same weight twice: its two gradients summed
            out = head(h2)
            out.grad_fn.register_hook(
                lambda gi, go: log.append(("node post", "head", arrays(gi))))
            h2.grad_fn.register_prehook(lambda go: log.append(("node pre", "lin", arrays(go))))
            return out

        params = [lin.weight, lin.bias, head.weight, head.bias]
        return net, params, torch.randn(6, 5, requires_grad=True)

    one, split = assert_same_as_one_backward(make, lambda out, log: out.sum())
    assert one.count("tensor") == split.count("tensor") == 3
    assert split[-3:] == ["tensor"] * 3


def test_the_weights_part_runs_once_and_keeps_the_graph_only_when_asked():
    lin = nn.Linear(3, 3)
    x = torch.randn(2, 3, requires_grad=True)
    weights = backward_split([lin(x).sum()], None, list(lin.parameters()))
    assert lin.weight.grad is None and x.grad is not None  # B done, W not yet
    weights.run()
    assert lin.weight.grad is not None
    with pytest.raises(RuntimeError, match="already computed"):
        weights.run()
    out = lin(x).sum()
    backward_split([out], None, list(lin.parameters()), retain_graph=True).run()
    out.backward()  # the graph was kept
    with pytest.raises(RuntimeError, match="does not require grad"):
        backward_split([torch.ones(2)], None, [])


def test_the_weight_gradient_is_computed_once_and_in_the_second_part(monkeypatch):
    from disthook.ops import linalg

    calls = []
    right_grad = linalg._right_grad
    monkeypatch.setattr(linalg, "_right_grad",
                        lambda *args: calls.append(1) or right_grad(*args))
    net = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4))
    x = torch.randn(3, 4, requires_grad=True)
    weights = backward_split([net(x).sum()], None, list(net.parameters()))
    assert calls == [] and x.grad is not None  # B: the input's gradient only
    weights.run()
    assert calls == [1, 1]  # W: each Linear's weight gradient, once
