"""``as_strided`` over a value kept on a worker reads the memory that value views there, as in
one process: Longformer's sliding chunks (``view`` then ``as_strided`` with the strides of a
transposed, reshaped activation) gave other numbers when the part's output was read through
a copy in C order (``storage_offset()`` fetched it). A value read here keeps the strides it
had on its worker (a transpose stays one), so ``stride()`` and ``is_contiguous()`` do not
change when a program prints it."""
import numpy as np
import pytest

import disthook as torch
from disthook import nn

pytestmark = pytest.mark.timeout(180)
CLUSTER_WORKERS = 2


class Net(nn.Module):
    """A forward of its own (run on the client): each Linear's output stays on its worker."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 16), nn.Linear(4, 4)

    def forward(self, x):
        return self.a(x), self.b(x)


def chunks(hidden, window):
    """Longformer's ``_chunk``: overlapping windows of [B*H, L, D] by ``as_strided``."""
    hidden = hidden.view(hidden.size(0), torch.div(hidden.size(1), window * 2,
                                                   rounding_mode="trunc"),
                         window * 2, hidden.size(2))
    size, stride = list(hidden.size()), list(hidden.stride())
    size[1] = size[1] * 2 - 1
    stride[1] = stride[1] // 2
    return hidden.as_strided(size=size, stride=stride)


def program(model, x, read_first):
    torch.manual_seed(0)
    h, _ = model(x)                                        # [L=8, B=2, 16]
    q = h.view(8, 2, 2, 8).transpose(0, 1)                 # [B, L, H, D]
    query = q.transpose(1, 2).reshape(4, 8, 8)             # a view: strides (8, 32, 1)
    if read_first:
        print(query.sum().item(), query[0, 0, 0])          # the value read here
        assert query.stride() == (8, 32, 1) and not query.is_contiguous()
    out = chunks(query, 2)
    same = query.as_strided(query.shape, query.stride())
    loss = out.square().sum() + same.sum()
    loss.backward()
    return out.detach().numpy(), same.detach().numpy(), model.a.weight.grad.numpy().copy()


def make():
    torch.manual_seed(3)
    return Net().double()


@pytest.mark.parametrize("read_first", [False, True], ids=["kept", "read-here"])
def test_as_strided_over_a_kept_value_is_one_process(cluster, read_first):
    x = torch.randn(8, 2, 4, dtype=torch.float64)
    expected = program(make(), x, read_first)
    model = cluster.deploy(make(), stages=2)
    try:
        got = program(model, x, read_first)
    finally:
        model.close()
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-12)


def test_a_value_read_here_keeps_its_strides(cluster):
    model = cluster.deploy(make(), stages=2)
    try:
        h, _ = model(torch.randn(8, 2, 4, dtype=torch.float64))
        t = h.transpose(0, 1)
        before = (t.stride(), t.is_contiguous())
        t.detach().numpy()                                 # read here
        assert (t.stride(), t.is_contiguous()) == before == ((16, 32, 1), False)
        assert t.storage_offset() == 0
    finally:
        model.close()


def test_a_kept_value_takes_its_shape_by_keyword(cluster):
    model = cluster.deploy(make(), stages=2)
    try:
        h, _ = model(torch.randn(8, 2, 4, dtype=torch.float64))
        v, r = h.view(size=(16, 16)), h.transpose(0, 1).reshape(shape=(2, -1))
        assert (v.shape, r.shape) == ((16, 16), (2, 128))
        np.testing.assert_array_equal(v.detach().numpy(), h.detach().numpy().reshape(16, 16))
        np.testing.assert_array_equal(r.detach().numpy(),
                                      h.detach().numpy().transpose(1, 0, 2).reshape(2, -1))
    finally:
        model.close()
