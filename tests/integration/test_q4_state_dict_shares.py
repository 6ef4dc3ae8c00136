"""A deployed model's ``state_dict()`` entries share the deployed tensors' storage, as in one
process: a program holding ``sd = model.state_dict()`` sees later training in it (and
``load_state_dict`` of an earlier copy), and after ``close()`` the entries share the memory
of the tensors brought back. Around it, what programs do with state dicts gives one
process's values: early stopping's ``best = copy.deepcopy(model.state_dict())``, an EMA
teacher updated from the student's state dict, BatchNorm's running stats and
``num_batches_tracked``, partial loading through ``own[name].copy_()``, ``torch.save``.
Before, a held state dict kept the values of the moment it was taken."""
import copy
import io

import numpy as np
import pytest

import disthook as torch
from disthook import nn

pytestmark = pytest.mark.timeout(240)


CLUSTER_WORKERS = 2  # (the conftest's cluster fixture)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.bn, self.b = nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 2)

    def forward(self, x):
        return self.b(self.bn(self.a(x)).relu())


def r(t):
    return np.round(np.asarray(t.detach().numpy() if isinstance(t, torch.Tensor) else t,
                               dtype=np.float64), 5).tolist()


def run(model, close=None):
    out = []
    teacher = Net()
    teacher.load_state_dict(copy.deepcopy(model.state_dict()))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x, y = torch.randn(16, 4), torch.randn(16, 2)
    sd = model.state_dict()
    w0 = r(sd["a.weight"])
    best, best_loss = None, 1e9
    for i in range(3):
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        if loss.item() < best_loss:
            best_loss, best = loss.item(), copy.deepcopy(model.state_dict())
        with torch.no_grad():  # EMA teacher
            for k, v in model.state_dict().items():
                tv = teacher.state_dict()[k]
                if tv.dtype.is_floating_point:
                    tv.mul_(0.5).add_(v, alpha=0.5)
                else:
                    tv.copy_(v)
    out.append(("held sd moved", w0 != r(sd["a.weight"]), r(sd["a.weight"]),
                r(sd["bn.running_mean"]), r(sd["bn.num_batches_tracked"])))
    out.append(("bn", r(model.bn.running_var), r(model.bn.num_batches_tracked)))
    out.append(("teacher", [r(v) for v in teacher.state_dict().values()]))
    out.append(("best", r(best["b.bias"])))
    own = model.state_dict()
    own["b.bias"].copy_(torch.tensor([1.0, 2.0]))
    out.append(("partial load", r(model.b.bias)))
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    buf.seek(0)
    out.append(("saved", r(torch.load(buf)["b.bias"])))
    model.load_state_dict(best)
    out.append(("restored best", r(model.b.bias), r(sd["b.bias"])))
    if close is not None:
        close()
    with torch.no_grad():
        model.b.bias.add_(1)
    out.append(("after close", r(sd["b.bias"])))
    return out



def test_a_held_state_dict_sees_training_and_the_model_closed(cluster):
    torch.manual_seed(0)
    want = run(Net())
    torch.manual_seed(0)
    model = cluster.deploy(Net(), stages=2)
    close = model.close
    try:
        got = run(model, close=close)
    finally:
        close()  # (again: closing twice does nothing)
    assert want[0][1] is True
    for w, g in zip(want, got):
        assert g == w


def steps(model):
    """A held state dict read right after an optimizer step that rides with the model's
    next call (each step after the first): it shows the step."""
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    sd, seen = model.state_dict(), []
    for _ in range(3):
        model(torch.ones(2, 4)).sum().backward()
        seen.append(r(sd["b.bias"]))
        opt.step()
        seen.append(r(sd["b.bias"]))
    return seen


def test_a_held_state_dict_shows_a_step_not_sent_yet(cluster):
    torch.manual_seed(0)
    want = steps(Net())
    torch.manual_seed(0)
    model = cluster.deploy(Net(), stages=2)
    try:
        got = steps(model)
    finally:
        model.close()
    assert got == want


def swapped(model):
    """State dicts held across a value swap (``p.data = t``, ``load_state_dict(...,
    assign=True)``): in one process the parameter takes new memory and the entries taken
    before keep the old values; those taken after follow the new."""
    before = model.state_dict()
    model.a.weight.data = torch.zeros(8, 4)
    seen = [r(before["a.weight"]), r(model.state_dict()["a.weight"])]
    middle = model.state_dict()
    ones = {k: torch.ones_like(v) if v.dtype.is_floating_point else v.clone()
            for k, v in model.state_dict().items()}
    model.load_state_dict(ones, assign=True)
    seen += [r(middle["a.weight"]), r(middle["b.bias"]), r(model.state_dict()["b.bias"])]
    return seen


def test_a_held_state_dict_keeps_its_values_across_a_value_swap(cluster):
    torch.manual_seed(0)
    want = swapped(Net())
    torch.manual_seed(0)
    model = cluster.deploy(Net(), stages=2)
    try:
        got = swapped(model)
    finally:
        model.close()
    assert want[0] != want[1]  # (the swap changed the weight)
    assert got == want
