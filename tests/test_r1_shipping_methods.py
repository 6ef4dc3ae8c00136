"""A bound method a deployed module reaches (TabNet's ``sparsemax = SparsemaxFunction.apply``,
``self.act = self.gelu``) travels as its object and its name, as plain pickle sends it: the
function behind it is not copied, so a classmethod of disthook's (``Function.apply``) does not
drag the client's ``sys.modules`` along (which failed outright once the client had imported
something that cannot be pickled, such as torch)."""
import sys
import types

import numpy as np
import pytest

import disthook as torch
from disthook import nn
from disthook.distributed import shipping


class Sparsemax(torch.autograd.Function):
    """Sparsemax over the last dim, written as TabNet writes it."""

    @staticmethod
    def forward(ctx, x):
        srt, _ = torch.sort(x, descending=True, dim=-1)
        rho = torch.arange(1, x.shape[-1] + 1, dtype=x.dtype)
        cum = srt.cumsum(-1) - 1
        support = (rho * srt > cum).sum(-1, keepdim=True)
        tau = cum.gather(-1, support - 1) / support.to(x.dtype)
        out = torch.clamp(x - tau, min=0)
        ctx.save_for_backward(support, out)
        return out

    @staticmethod
    def backward(ctx, grad):
        support, out = ctx.saved_tensors
        grad = torch.where(out != 0, grad, torch.zeros_like(grad))
        v = grad.sum(-1, keepdim=True) / support.to(grad.dtype)
        return torch.where(out != 0, grad - v, grad)


sparsemax = Sparsemax.apply


class Masked(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.act = self.shifted  # a bound method of its own, kept in an attribute

    def shifted(self, x):
        return x + 0.5

    def forward(self, x):
        return sparsemax(self.act(self.fc(x)))


def through_pickle(module):
    blob, arrays = shipping.dumps(module)
    return shipping.loads(blob.tobytes(), arrays)


class _Unpicklable(types.ModuleType):
    """A loaded module that cannot be pickled (as torch's ``torch._VF`` is)."""

    def __reduce_ex__(self, protocol):
        raise TypeError("cannot pickle this module")


def test_a_custom_functions_apply_travels_without_the_clients_modules(monkeypatch):
    monkeypatch.setitem(sys.modules, "r1_unpicklable", _Unpicklable("r1_unpicklable"))
    torch.manual_seed(0)
    model = Masked()
    x = torch.randn(3, 4, requires_grad=True)
    twin = through_pickle(model)
    assert twin.act.__self__ is twin and twin.act.__func__ is Masked.shifted
    for m in (model, twin):
        m.zero_grad()
        out = m(x)
        out.pow(2).sum().backward()
        assert type(out.grad_fn).__name__ == "SparsemaxBackward"
    np.testing.assert_allclose(twin(x).detach().numpy(), model(x).detach().numpy())
    np.testing.assert_allclose(twin.fc.weight.grad.numpy(), model.fc.weight.grad.numpy())


def test_a_bound_method_that_its_name_does_not_give_back_still_travels():
    """A method bound by hand (not what getattr gives) goes as cloudpickle sends it."""
    model = nn.Linear(2, 2)
    model.hook_like = types.MethodType(lambda self, x: x * 3, model)
    twin = through_pickle(model)
    assert twin.hook_like(2) == 6


if __name__ == "__main__":
    pytest.main([__file__])
