"""Pieces of a deployed model's client surface that need no processes: which container
reads a deployed module gets, factories that need no value, and a write into read-only
memory (a fetched copy of a remote value) that says so instead of passing silently."""
import numpy as np
import pytest

import disthook as torch
from disthook import nn
from disthook.distributed.containers import container_reads
from disthook.tensor import Tensor


class OwnLen(nn.Module):
    def __len__(self):
        return 7


class MySequential(nn.Sequential):
    pass


def test_container_reads_exist_only_where_a_container_class_defines_them():
    assert container_reads(nn.Linear) == {} and container_reads(nn.Module) == {}
    assert container_reads(OwnLen) == {}  # the user's own __len__ stays the class's
    assert set(container_reads(nn.Sequential)) == {"__len__", "__iter__", "__getitem__"}
    assert set(container_reads(MySequential)) == {"__len__", "__iter__", "__getitem__"}
    assert set(container_reads(nn.ModuleDict)) == {"__len__", "__iter__", "__getitem__",
                                                   "__contains__", "keys", "items", "values"}


def test_container_reads_run_on_a_view_of_the_children():
    seq = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 1))
    reads = container_reads(nn.Sequential)
    assert reads["__len__"](seq) == 3 and reads["__getitem__"](seq, -1) is seq[2]
    part = reads["__getitem__"](seq, slice(0, 2))
    assert type(part) is nn.Sequential and list(part) == [seq[0], seq[1]]


class NoValue(Tensor):
    """A tensor whose value is elsewhere: shape and dtype known, _data never set."""

    @property
    def shape(self):
        return torch.Size([2, 3])

    @property
    def dtype(self):
        return torch.float64


@pytest.mark.parametrize("make", [torch.zeros_like, torch.ones_like, torch.empty_like,
                                  lambda t: torch.full_like(t, 3.0), torch.rand_like,
                                  torch.randn_like, lambda t: t.new_zeros(4),
                                  lambda t: t.new_full((1,), 2.0), lambda t: t.new_empty(2)])
def test_factories_read_shape_and_dtype_not_the_value(make):
    t = object.__new__(NoValue)
    out = make(t)
    assert out.dtype == torch.float64


def test_writing_read_only_memory_says_so():
    arr = np.ones(3, np.float32)
    arr.flags.writeable = False
    t = torch.from_numpy(arr)
    with pytest.raises(RuntimeError, match="read-only memory"):
        t.zero_()
    with pytest.raises(RuntimeError, match="more than one element"):
        torch.zeros(1).expand(3).add_(1)
