"""A list or dict that a placed module's code changes in place on its worker
(``self.maps.append(attn)``, ``self.stats["n"] += 1``, ``self.cache[k] = v``, a tensor hook's
``self.grads.append(g)``) is changed in place on the client too, so a reference the program
holds sees it; and one the program changes in place (``layer.maps.clear()``) goes to the
worker before the next call, whose forward reads it. Before, the client saw none of the
worker's changes (its lists stayed empty) and the worker none of the program's."""
import numpy as np
import pytest

import disthook as torch
from disthook import nn

pytestmark = pytest.mark.timeout(240)


CLUSTER_WORKERS = 2  # (the conftest's cluster fixture)


class Attn(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.maps, self.grads, self.cache = [], [], {}
        self.stats = {"n": 0, "hist": []}

    def save(self, g):
        self.grads.append(g)

    def forward(self, x):
        y = self.lin(x).softmax(-1)
        self.maps.append(y.detach())
        self.stats["n"] += 1
        self.stats["hist"].append(len(self.maps))
        self.cache[f"k{self.stats['n']}"] = round(y.sum().item(), 4)
        if y.requires_grad:
            y.register_hook(self.save)
        return y * len(self.maps)  # what the program's clear() changes


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = Attn(), Attn()

    def forward(self, x):
        return self.b(self.a(x))


def session(model):
    x = torch.ones(2, 4)
    first, second = (model[0], model[1]) if isinstance(model, nn.Sequential) else (model.a,
                                                                                   model.b)
    maps, hist = first.maps, second.stats["hist"]
    seen = []
    for i in range(3):
        model(x * (i + 1)).sum().backward()
        seen.append((len(maps), list(hist), dict(second.cache), first.stats["n"],
                     [g.numpy().tolist() for g in first.grads]))
    first.maps.clear()  # in place, by the program
    hist.append(-1)
    out = model(x)
    seen.append((out.detach().numpy().tolist(), len(maps), list(hist),
                 [m.numpy().tolist() for m in first.maps]))
    return seen


@pytest.mark.parametrize("make", [Net, lambda: nn.Sequential(Attn(), Attn())],
                         ids=["tree", "chain"])
def test_lists_and_dicts_changed_in_place_on_either_side(cluster, make):
    torch.manual_seed(0)
    want = session(make())
    torch.manual_seed(0)
    model = cluster.deploy(make(), stages=2)
    try:
        got = session(model)
    finally:
        model.close()
    assert want[2][0] == 3 and want[3][1] == 1
    for w, g in zip(want, got):
        np.testing.assert_equal(g, w)


class Counted(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin, self.feats = nn.Linear(16, 16), []

    def forward(self, x):
        return self.lin(x) * (1 + len(self.feats))


class Two(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = Counted(), Counted()

    def forward(self, x):
        return self.b(self.a(x))


def hooked(model, stats=None):
    model.a.register_forward_hook(lambda m, i, o: m.feats.append(o.detach()))
    x = torch.randn(8, 16)
    outs, sent = [], []
    for _ in range(4):
        outs.append(model(x).detach().numpy())
        if stats is not None:
            sent.append(stats()["bytes_to_workers"])
    return outs, len(model.a.feats), sent


def test_a_list_a_client_hook_grows_goes_to_the_worker_by_its_new_items(cluster):
    """A client hook appends the part's output to a list the part was deployed with, which
    its forward reads: the worker's list grows by the items appended, no more (the bytes
    sent per call stay the same as the list grows)."""
    torch.manual_seed(0)
    want = hooked(Two())
    torch.manual_seed(0)
    model = cluster.deploy(Two(), stages=2)
    try:
        got = hooked(model, model.stats)
    finally:
        model.close()
    np.testing.assert_allclose(np.array(got[0]), np.array(want[0]), rtol=1e-5)
    assert got[1] == want[1] == 4
    per_call = np.diff(got[2])
    assert per_call.max() - per_call.min() < 200, per_call
