"""In-place changes to what a placed part returned, made on the client by the model's own
forward (Tacotron's ``alignment.data.masked_fill_(mask, -inf)``): a change through ``.data``
or ``detach()`` reaches the output itself, as the shared memory does in one process; one
through a view of a value kept on a worker, which the worker's copy would not see, is a
clear error, never a silently different result. And a class whose code reads an attribute
that shares its name with a function of the program (``torch.nn.init`` beside a program's
``init``) still computes on its worker."""
import numpy as np
import pytest

import disthook as torch
from disthook import nn
from disthook.distributed.placed import changed_here

pytestmark = pytest.mark.timeout(240)

CLUSTER_WORKERS = 2  # (the conftest's cluster fixture)

WAYS = {
    "data": lambda h, m: h.data.masked_fill_(m, -1.0),
    "data_mul": lambda h, m: h.data.mul_(2.0),
    "detach": lambda h, m: h.detach().masked_fill_(m, -1.0),
}


class Net(nn.Module):
    def __init__(self, way):
        super().__init__()
        self.a, self.b, self.way = nn.Linear(4, 3), nn.Linear(3, 2), way

    def forward(self, x, mask):
        h = self.a(x)
        WAYS[self.way](h, mask)
        return self.b(h)


@pytest.mark.parametrize("rows", [2, 64])  # its value with the call's answer, and kept there
@pytest.mark.parametrize("way", sorted(WAYS))
def test_a_change_through_data_or_detach_reaches_the_output(cluster, way, rows):
    torch.manual_seed(1)
    x, mask = torch.randn(rows, 4), torch.rand(rows, 3) > 0.5
    torch.manual_seed(0)
    net = Net(way)
    want = net(x, mask)
    want.sum().backward()
    torch.manual_seed(0)
    remote = cluster.deploy(Net(way), placement={"a": 0, "b": 1})
    try:
        got = remote(x, mask)
        got.sum().backward()
        np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-6)
        np.testing.assert_allclose(remote.a.weight.grad.numpy(), net.a.weight.grad.numpy(),
                                   rtol=1e-5, atol=1e-7)
    finally:
        remote.close()


class ViewWrite(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 3), nn.Linear(3, 2)

    def forward(self, x):
        h = self.a(x)
        h.detach()[0].zero_()  # a view of the output's memory, changed
        return self.b(h)


def test_a_change_through_a_view_of_a_kept_value_is_an_error_not_another_result(cluster):
    torch.manual_seed(0)
    remote = cluster.deploy(ViewWrite(), placement={"a": 0, "b": 1})
    try:
        with pytest.raises(RuntimeError, match="shares its memory with another tensor kept "
                                               "there.*clone"):
            remote(torch.randn(64, 4))
    finally:
        remote.close()


def init(module):  # a function of the program named like torch.nn.init
    return module


class Initialized(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        torch.nn.init.zeros_(self.fc.bias)  # reads the attribute init of torch.nn

    def forward(self, x):
        return self.fc(x)


class Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Initialized()

    def forward(self, x):
        return self.inner(x) * 2


def test_an_attribute_named_like_a_program_function_is_no_patch(cluster):
    """The program rebinds its own ``init`` after the deploy: no code of the placed class
    calls it (``torch.nn.init`` is an attribute), so the part stays on its worker."""
    global init
    remote = cluster.deploy(Outer(), placement={"inner": 0})
    kept = init
    try:
        init = lambda module: module  # noqa: E731
        remote(torch.ones(2, 4))
        assert not changed_here(remote.inner)  # it computes on its worker
    finally:
        init = kept
        remote.close()
