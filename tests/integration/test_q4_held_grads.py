"""A kept ``g = p.grad`` of a deployed parameter behaves as one process's: it reads what a
later backward added to the gradient, what ``zero_grad(set_to_none=False)`` zeroed and what
``clip_grad_norm_`` scaled in place; once the gradient is set to None (``zero_grad()``) or
replaced (``p.grad = t``) it keeps the value it had then (the logging pattern: keep the
gradients, step, zero them, read what was kept), and writing into it no longer changes the
parameter's gradient. Before, a kept gradient kept the value of the moment it was read,
and wrote into whatever gradient the parameter had later."""
import numpy as np
import pytest

import disthook as torch
from disthook import nn

pytestmark = pytest.mark.timeout(240)


CLUSTER_WORKERS = 2  # (the conftest's cluster fixture)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 2)

    def forward(self, x):
        return self.b(self.a(x).relu())


def session(model):
    torch.manual_seed(1)
    x = torch.randn(8, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    seen = []
    model(x).sum().backward()
    g = model.a.weight.grad
    seen.append(g.numpy().copy())
    model(x).sum().backward()  # adds into the same gradient
    seen.append(g.numpy().copy())
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # scales it in place
    seen.append(g.numpy().copy())
    opt.zero_grad(set_to_none=False)  # zeroes it in place
    seen.append(g.numpy().copy())
    model(x).sum().backward()
    kept = [p.grad for p in model.parameters()]  # the logging pattern
    opt.step()
    opt.zero_grad()  # set to None: what was kept keeps its value
    model(x * 2).sum().backward()
    seen += [k.numpy().copy() for k in kept]
    kept[0].zero_()  # a write into a tensor that is no longer the gradient
    seen.append(model.a.weight.grad.numpy().copy())
    seen.append(kept[0].numpy().copy())
    return seen


def test_a_kept_gradient_follows_the_gradient_until_it_is_replaced(cluster):
    torch.manual_seed(0)
    want = session(Net())
    torch.manual_seed(0)
    model = cluster.deploy(Net(), stages=2)
    try:
        got = session(model)
    finally:
        model.close()
    assert not np.allclose(want[0], want[1]) and not want[3].any()
    for w, g in zip(want, got, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-7)


def closing(model, close):
    """The model closed after a backward: its parameters keep their gradients, and a kept
    ``g = p.grad`` is that gradient (the same tensor), as one process's model keeps them."""
    x = torch.ones(3, 4)
    model(x).pow(2).sum().backward()
    g = model.a.weight.grad
    close()
    out = [g.numpy().copy(), model.b.bias.grad.numpy().copy(), model.a.weight.grad is g]
    g.mul_(2)  # (its own tensor now: the parameter's gradient)
    return out + [model.a.weight.grad.numpy().copy()]


def test_gradients_come_back_with_the_closed_model(cluster):
    torch.manual_seed(0)
    want = closing(Net(), lambda: None)
    torch.manual_seed(0)
    model = cluster.deploy(Net(), stages=2)
    close = model.close  # (the model closed is the program's own again: no close())
    try:
        got = closing(model, close)
    finally:
        close()
    assert want[2] is True and got[2] is True
    for w, g in zip(want, got):
        np.testing.assert_allclose(g, w, rtol=1e-6)
