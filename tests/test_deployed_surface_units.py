"""Pieces of a deployed model's client surface that need no processes: a parameter placed
in place (the same object, its value elsewhere), a copy of a placed module, factories that
need no value, and a write into read-only memory (a fetched copy of a remote value) that
says so instead of passing silently."""
import numpy as np
import pytest

import disthook as torch
from disthook import nn
from disthook.distributed.adopting import adopt, release
from disthook.tensor import Tensor


class FakeDeployment:
    """Stands for a deployment: answers get_state from a dict, records writes."""

    def __init__(self, values):
        self.values, self.asked, self._canonical = values, [], {}

    def _states(self, names):
        self.asked.append(list(names))
        return {"state": {n: self.values[n] for n in names}, "grads": {}}


def test_adopt_keeps_the_object_and_its_class_and_frees_its_array():
    layer = nn.Linear(3, 2)
    weight = layer.weight
    dep = FakeDeployment({"fc.weight": np.full((2, 3), 7.0, np.float32)})
    adopt(weight, dep, "fc.weight")
    assert layer.weight is weight and isinstance(weight, nn.Parameter)
    assert weight.shape == (2, 3) and weight.dtype == torch.float32 and not dep.asked
    assert torch.zeros_like(weight).shape == (2, 3) and not dep.asked  # no value needed
    assert Tensor.__dict__["_data"].__get__(weight).strides == (0, 0)  # one element here
    assert float(weight.detach().sum()) == 42.0 and dep.asked == [["fc.weight"]]
    release(weight, np.ones((2, 3), np.float32))
    assert type(weight) is nn.Parameter and float(weight.sum()) == 6.0


def test_a_copy_of_a_placed_module_is_a_plain_module_with_the_values():
    import copy

    from disthook.distributed.placed import PartPlacement

    layer = nn.Linear(3, 2)
    dep = FakeDeployment({"fc.weight": np.full((2, 3), 7.0, np.float32),
                          "fc.bias": np.zeros(2, np.float32)})
    adopt(layer.weight, dep, "fc.weight")
    adopt(layer.bias, dep, "fc.bias")
    layer.__dict__["_placement"] = PartPlacement(dep, "fc")
    copied = copy.deepcopy(layer)
    assert "_placement" not in copied.__dict__ and type(copied.weight) is nn.Parameter
    assert float(copied.weight.sum()) == 42.0 and copied.weight.requires_grad
    assert copied(torch.ones(1, 3)).sum().item() == 42.0  # runs here, as any module


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
