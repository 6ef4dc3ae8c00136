"""What a program and a placed module change on the module besides its parameters, as one
process sees it: a plain tensor attribute (not a buffer) that the program changes in place
(``layer.mask[i] = 0``) is what the module's forward reads on its worker, and one the
forward changes in place (``self.seen += 1``) is what the program reads; a flag that a walk
sets after the deploy (``model.apply(fn)``, ``named_modules()``), which the class does not
define, reaches the forward that reads it with ``getattr(self, name, default)``. Each was
silently not seen by the other side before."""
import numpy as np
import pytest

import disthook as torch
from disthook import nn

pytestmark = pytest.mark.timeout(240)


CLUSTER_WORKERS = 2  # (the conftest's cluster fixture)


class Gate(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)
        self.mask = torch.ones(n)  # a plain tensor attribute, not a buffer
        self.seen = torch.zeros(1)  # one the forward changes in place

    def forward(self, x):
        self.seen += 1
        y = self.lin(x) * self.mask
        return y * 0.5 if getattr(self, "halve", False) else y


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.g1, self.g2, self.head = Gate(4), Gate(4), nn.Linear(4, 2)

    def forward(self, x):
        return self.head(self.g2(self.g1(x).relu()))


def outputs(model, change):
    x = torch.randn(8, 4)
    seen = model.g1.seen  # held by the program
    before = model(x).detach().numpy()
    change(model)
    after = model(x).detach().numpy()
    return before, after, seen.numpy().copy(), model.g2.seen.numpy().copy()


def mask(model):
    model.g2.mask[1] = 0.0


def walk(model):
    model.apply(lambda m: setattr(m, "halve", True) if isinstance(m, Gate) else None)


def named(model):
    for name, m in model.named_modules():
        if name == "g2":
            m.halve = True


@pytest.mark.parametrize("change", [mask, walk, named])
def test_changes_beside_the_parameters_reach_the_other_side(cluster, change):
    torch.manual_seed(0)
    want = outputs(Net(), change)
    torch.manual_seed(0)
    model = cluster.deploy(Net(), stages=2)
    try:
        got = outputs(model, change)
    finally:
        model.close()
    assert not np.allclose(want[0], want[1]) and want[2].tolist() == [2.0]
    for w, g in zip(want, got):
        np.testing.assert_allclose(g, w, rtol=1e-6)


def test_a_flag_set_by_an_attached_client_stays_there_and_says_so(cluster):
    # the model is shared: its workers' modules are the deployer's, so a flag another
    # client sets (m.name = ..., for its hooks) stays with that client, with a warning,
    # rather than being refused or changing what the deployer computes
    from disthook.distributed import connect

    torch.manual_seed(0)
    model = cluster.deploy(Net(), stages=2, name="q4-flags")
    x = torch.randn(8, 4)
    try:
        want = model(x).detach().numpy()
        with connect(cluster.address) as other:
            attached = other.attach("q4-flags", trust_code=True)  # (this test's classes)
            seen = []
            attached.g2.register_forward_hook(lambda m, a, o: seen.append(m.tag))
            with pytest.warns(UserWarning, match="'tag' set on modules of .*stays on this"):
                for name, m in attached.named_modules():
                    m.tag = name
            with pytest.warns(UserWarning, match="'halve' set on modules of"):
                attached.g2.halve = True  # (its forward would read it: not on the workers)
            np.testing.assert_allclose(attached(x).detach().numpy(), want, rtol=1e-6)
            assert seen == ["g2"]
        np.testing.assert_allclose(model(x).detach().numpy(), want, rtol=1e-6)
    finally:
        model.close()


class Keeps(nn.Module):
    """A part whose forward appends to a list of its own (attention maps, say)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.maps = []

    def forward(self, x):
        y = self.lin(x)
        self.maps.append(float(y.detach().sum()))
        return y


class TwoKeeps(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = Keeps(), Keeps()

    def forward(self, x):
        return self.b(self.a(x).relu())


def test_a_list_a_shared_models_forward_grows_is_each_clients_own(cluster):
    # each client's calls grow its own list on the workers, as its own model's in one
    # process (before: "the program changed it between the call and its answer", for both
    # clients; then the worker's list was every client's, and an attached client's copy got
    # the deployer's items too: its activations, tests/integration/test_s4_attributes.py)
    from disthook.distributed import connect

    torch.manual_seed(0)
    model = cluster.deploy(TwoKeeps(), stages=2, name="q4-maps")
    x = torch.ones(2, 4)
    try:
        model(x)
        model(x)
        one = model.a.maps[0]
        assert model.a.maps == [one, one]
        with connect(cluster.address) as other:
            attached = other.attach("q4-maps", trust_code=True)
            attached(x)
            assert attached.a.maps == [one] and len(attached.b.maps) == 1
            attached(x)
            assert attached.a.maps == [one] * 2 and len(attached.b.maps) == 2
        held = model.a.maps  # (the program's list, kept: it changes in place)
        model(x)
        assert held is model.a.maps and held == [one] * 3 and len(model.b.maps) == 3
    finally:
        model.close()
