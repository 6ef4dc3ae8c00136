"""An empty tensor's strides are torch's: ``empty(0, 3)`` has ``(3, 1)`` (each stride the
product of the later sizes, a size 0 counting as 1), where numpy gives a new empty array all
zeros; views of it (permute, transpose, select, narrow, reshape, unsqueeze, indexing with
``None``) carry the strides torch's views carry, and torch.save writes them, so torch.load
in real torch gives them too. Indexing with ``None`` gives the new dim torch's stride (the
size times the stride of the dim it goes before) for any tensor, empty or not."""
import io

import numpy as np
import pytest

import disthook

torch = pytest.importorskip("torch")

SHAPES = [(0,), (0, 3), (2, 0, 4), (3, 0), (0, 0), (2, 3, 0), (0, 1, 2)]


def _views(lib, shape):
    t = lib.empty(*shape)
    back = tuple(reversed(range(len(shape))))
    return {"empty": t, "zeros": lib.zeros(shape), "permute": t.permute(*back),
            "contiguous": t.permute(*back).contiguous(), "flatten": t.flatten(),
            "none first": t[None], "none last": t[..., None],
            **{f"unsqueeze({d})": t.unsqueeze(d) for d in range(len(shape) + 1)},
            **{f"permute, unsqueeze({d})": t.permute(*back).unsqueeze(d)
               for d in range(len(shape) + 1)}}


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_empty_and_its_views_as_torch(shape):
    got, want = _views(disthook, shape), _views(torch, shape)
    assert {k: v.stride() for k, v in got.items()} == {k: v.stride() for k, v in want.items()}


def _more_views(lib):
    t = lib.empty(2, 0, 4)
    p = t.permute(2, 0, 1)
    return [t.reshape(0, 8), t.transpose(0, 2), t[:, :, 1], t.view(-1, 4), t[1], t.select(2, 0),
            t.narrow(2, 1, 2), p[None], p[:, None], p[:, None, 1], lib.empty(2, 3, 4)[:, 1:1],
            lib.ones(2, 0).t(), lib.empty(0, 3) * 2]


def test_views_of_an_empty_tensor_as_torch():
    assert [v.stride() for v in _more_views(disthook)] == [
        v.stride() for v in _more_views(torch)]


INDEXES = [None, (None, slice(1, 3)), (None, None), (Ellipsis, None, None),
           (slice(None), None, slice(None, None, 2)), (1, None), (None, 1),
           (None, Ellipsis, None), (slice(0, 2), None), (None, 2, None), (slice(1, 1), None)]


@pytest.mark.parametrize("index", INDEXES, ids=str)
def test_indexing_with_none_as_torch(index):
    t = disthook.arange(12.0).reshape(4, 3)
    want = torch.arange(12.0).reshape(4, 3)[index]
    got = t[index]
    assert got.stride() == want.stride()
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_an_inplace_write_through_a_none_view_reaches_the_base():
    x = disthook.zeros(2, 3, requires_grad=True)
    y = x * 1
    v = y[None, :, None]
    v.mul_(0).add_(disthook.arange(6.0).reshape(1, 2, 1, 3))
    np.testing.assert_array_equal(y.detach().numpy(), np.arange(6.0).reshape(2, 3))
    (y * y).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.zeros((2, 3)))


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_saved_empty_tensors_load_in_torch_with_torchs_strides(shape):
    buf = io.BytesIO()
    views = _views(disthook, shape)
    disthook.save(views, buf)
    buf.seek(0)
    loaded = torch.load(buf)
    assert {k: v.stride() for k, v in loaded.items()} == {
        k: v.stride() for k, v in _views(torch, shape).items()}
