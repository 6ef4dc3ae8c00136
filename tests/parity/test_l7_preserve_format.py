"""``clone()`` and the ``*_like`` factories lay their new tensor out as torch does
(``memory_format=torch.preserve_format``, the default): a dense, non-overlapping source keeps
its strides (a transpose, a permute, a channels_last tensor), any other (expanded, sliced with
steps) gets dense strides in its dimensions' memory order; ``contiguous()`` and
``memory_format=torch.contiguous_format`` give C order. Here every one came back in C order,
so ``stride()`` and ``is_contiguous(memory_format=torch.channels_last)`` differed from
torch's, and ``x.contiguous(memory_format=torch.channels_last)`` changed nothing."""
from __future__ import annotations

import numpy as np
import pytest

import disthook

torch = pytest.importorskip("torch")

SOURCES = {
    "transpose": lambda lib: lib.arange(12.).reshape(3, 4).t(),
    "permute": lambda lib: lib.arange(120.).reshape(2, 3, 4, 5).permute(2, 0, 3, 1),
    "channels_last": lambda lib: lib.arange(120.).reshape(2, 3, 4, 5).contiguous(
        memory_format=lib.channels_last),
    "channels_last_3d": lambda lib: lib.arange(240.).reshape(2, 3, 4, 5, 2).contiguous(
        memory_format=lib.channels_last_3d),
    "expanded": lambda lib: lib.arange(3.).reshape(3, 1).expand(3, 4),
    "expanded_permuted": lambda lib: lib.arange(15.).reshape(3, 1, 5).expand(3, 4, 5).permute(
        2, 0, 1),
    "stepped": lambda lib: lib.arange(120.).reshape(2, 3, 4, 5)[:, ::2],
    "stepped_permuted": lambda lib: lib.arange(120.).reshape(2, 3, 4, 5).permute(3, 2, 1, 0)[
        ::2],
    "unsqueezed_transpose": lambda lib: lib.arange(12.).reshape(3, 4).t().unsqueeze(1),
    "scalar": lambda lib: lib.tensor(2.5),
    "empty_transpose": lambda lib: lib.ones(0, 3).t(),
    "contiguous": lambda lib: lib.arange(6.).reshape(2, 3),
    "size_one_spatial": lambda lib: lib.arange(6.).reshape(2, 3, 1, 1),
    "channels_last_size_one": lambda lib: lib.arange(6.).reshape(2, 1, 3, 1).contiguous(
        memory_format=lib.channels_last),
}

MAKERS = {
    "clone": lambda lib, x: x.clone(),
    "clone_preserve": lambda lib, x: x.clone(memory_format=lib.preserve_format),
    "clone_contiguous": lambda lib, x: x.clone(memory_format=lib.contiguous_format),
    "contiguous": lambda lib, x: x.contiguous(),
    "empty_like": lambda lib, x: lib.empty_like(x).fill_(1.0),
    "zeros_like": lambda lib, x: lib.zeros_like(x),
    "ones_like": lambda lib, x: lib.ones_like(x),
    "full_like": lambda lib, x: lib.full_like(x, 7.0),
    "zeros_like_contiguous": lambda lib, x: lib.zeros_like(x, memory_format=lib.contiguous_format),
    "rand_like": lambda lib, x: lib.rand_like(x).fill_(0.5),
    "randn_like": lambda lib, x: lib.randn_like(x).fill_(0.5),
}


def layout(t):
    out = (tuple(t.shape), t.stride(), t.is_contiguous())
    if t.dim() == 4:
        out += (t.is_contiguous(memory_format=_lib(t).channels_last),)
    if t.dim() == 5:
        out += (t.is_contiguous(memory_format=_lib(t).channels_last_3d),)
    return out


def _lib(t):
    return torch if isinstance(t, torch.Tensor) else disthook


@pytest.mark.parametrize("source", sorted(SOURCES))
@pytest.mark.parametrize("maker", sorted(MAKERS))
def test_layout_and_values_as_torch(source, maker):
    ours = MAKERS[maker](disthook, SOURCES[source](disthook))
    theirs = MAKERS[maker](torch, SOURCES[source](torch))
    assert layout(ours) == layout(theirs)
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


@pytest.mark.parametrize("source", sorted(SOURCES))
def test_source_layout_as_torch(source):
    assert layout(SOURCES[source](disthook)) == layout(SOURCES[source](torch))


def test_contiguous_of_contiguous_is_itself():
    for lib in (torch, disthook):
        x = lib.ones(2, 3)
        assert x.contiguous() is x
        c = lib.ones(2, 3, 4, 5).contiguous(memory_format=lib.channels_last)
        assert c.contiguous(memory_format=lib.channels_last) is c
        assert c.contiguous() is not c


def test_channels_last_needs_rank_4():
    for lib in (torch, disthook):
        with pytest.raises(RuntimeError, match="required rank 4 tensor to use channels_last"):
            lib.ones(2, 3).clone(memory_format=lib.channels_last)


def test_gradient_through_a_preserved_clone():
    grads = []
    for lib in (torch, disthook):
        w = lib.arange(24.).reshape(2, 3, 4).requires_grad_()
        y = w.permute(2, 0, 1).clone()
        (y * lib.arange(4.).reshape(4, 1, 1)).sum().backward()
        grads.append((w.grad.stride(), w.grad.numpy().tolist(), y.stride()))
    assert grads[1] == grads[0]


TO_CALLS = {
    "to_channels_last": lambda lib, x: x.to(memory_format=lib.channels_last),
    "to_contiguous_format": lambda lib, x: x.to(memory_format=lib.contiguous_format),
    "to_dtype_channels_last": lambda lib, x: x.to(lib.float64, memory_format=lib.channels_last),
    "to_dtype_preserve": lambda lib, x: x.to(lib.float64),
    "double": lambda lib, x: x.double(),
}


@pytest.mark.parametrize("source", ["permute", "channels_last", "stepped", "contiguous4d",
                                    "size_one_spatial", "channels_last_size_one"])
@pytest.mark.parametrize("call", sorted(TO_CALLS))
def test_to_memory_format_as_torch(source, call):
    make = SOURCES.get(source, lambda lib: lib.arange(120.).reshape(2, 3, 4, 5))
    seen = []
    for lib in (torch, disthook):
        x = make(lib).requires_grad_()
        y = TO_CALLS[call](lib, x)
        (y * lib.arange(float(y.shape[-1]))).sum().backward()
        seen.append((layout(y), y is x, y.grad_fn.name() if y is not x else None,
                     y.detach().numpy().tolist(), x.grad.numpy().tolist(), x.grad.stride()))
    assert seen[1] == seen[0]


COPIES = {  # torch's ``*_copy`` ops, ``narrow_copy`` and repeat_interleave give C order
    "permute_copy": lambda lib, x: lib.permute_copy(x, (2, 0, 1)),
    "transpose_copy": lambda lib, x: lib.transpose_copy(x, 0, 2),
    "t_copy": lambda lib, x: lib.t_copy(x[0]),
    "slice_copy": lambda lib, x: lib.slice_copy(x.transpose(0, 2), 0, 0, 4, 2),
    "select_copy": lambda lib, x: lib.select_copy(x.transpose(0, 2), 0, 1),
    "diagonal_copy": lambda lib, x: lib.diagonal_copy(x),
    "alias_copy": lambda lib, x: lib.alias_copy(x.transpose(0, 2)),
    "detach_copy": lambda lib, x: lib.detach_copy(x.transpose(0, 2)),
    "unbind_copy": lambda lib, x: lib.unbind_copy(x.transpose(0, 2))[1],
    "split_copy": lambda lib, x: lib.split_copy(x.transpose(0, 2), 2)[0],
    "narrow_copy": lambda lib, x: x.transpose(0, 2).narrow_copy(0, 1, 2),
    "repeat_interleave": lambda lib, x: x.transpose(0, 2).repeat_interleave(2, dim=0),
    "as_strided_scatter": lambda lib, x: x.transpose(0, 2).as_strided_scatter(
        lib.zeros(2), (2,), (1,)),
    "slice_scatter": lambda lib, x: x.transpose(0, 2).slice_scatter(lib.zeros(2, 3, 2), 0, 0, 2),
}


@pytest.mark.parametrize("name", sorted(COPIES))
def test_copies_lay_out_as_torch(name):
    seen = []
    for lib in (torch, disthook):
        y = COPIES[name](lib, lib.arange(24.).reshape(2, 3, 4))
        seen.append((layout(y), y.tolist()))
    assert seen[1] == seen[0]
