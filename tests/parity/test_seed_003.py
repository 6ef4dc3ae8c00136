"""Seed 003: a 2024 Chinese blog post that reprints the docstrings of
``register_backward_hook`` and ``register_forward_hook`` with a translation. It has no program
and no printed output, so the programs here are built from its statements, each run under
disthook (only the import lines changed) and under torch, and checked against what torch 2.13
prints:

1. ``hook(module, grad_input, grad_output)``; grad_input/grad_output are tuples when the module
   has several inputs; a returned tuple replaces grad_input; ``register_*_hook`` returns a
   ``RemovableHandle`` whose ``remove()`` takes the hook off.
2. The post's warning: for a module of many operations grad_input "will only contain the
   gradients for a subset of the inputs" -- the legacy hook sees the last node's gradients
   only (here ``output + 1`` from the forward hook, so ``(grad, None)``); torch 2.13 adds a
   FutureWarning at the call. ``hook(module, input, output)`` may return a modified output.
3. "It can modify the input inplace but it will not have effect on forward": true for the
   output, but torch 2.13 then refuses the backward, because the input was saved for the
   weight's gradient -- torch wins, and disthook raises the same error.
"""
from __future__ import annotations

import pytest

from parity.test_seed_module_hooks import LEGACY_MANY_NODES_WARNING, run_program


@pytest.fixture(params=["disthook", "torch"])
def lib(request):
    return request.param


SEED_003_BACKWARD_HOOK = """\
import torch
import torch.nn as nn


class Mul(nn.Module):
    def forward(self, x, y):
        return x * y


def backward_hook(module, grad_input, grad_output):
    print("grad_input:", grad_input)
    print("grad_output:", grad_output)
    return tuple(g * 10 for g in grad_input)


x = torch.tensor([1.0, 2.0], requires_grad=True)
y = torch.tensor([3.0, 4.0], requires_grad=True)
module = Mul()
handle = module.register_backward_hook(backward_hook)
print(type(handle).__name__)
module(x, y).sum().backward()
print("x.grad:", x.grad, "y.grad:", y.grad)
handle.remove()
x.grad = None
y.grad = None
module(x, y).sum().backward()
print("after remove:", x.grad, y.grad)
"""

SEED_003_BACKWARD_HOOK_EXPECTED = """\
RemovableHandle
grad_input: (tensor([3., 4.]), tensor([1., 2.]))
grad_output: (tensor([1., 1.]),)
x.grad: tensor([30., 40.]) y.grad: tensor([10., 20.])
after remove: tensor([3., 4.]) tensor([1., 2.])
"""

SEED_003_MANY_OPS = """\
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(2, 2)
        self.linear.weight.data.fill_(0.5)
        self.linear.bias.data.fill_(-1.0)

    def forward(self, x):
        return torch.relu(self.linear(x)) * 3


def backward_hook(module, grad_input, grad_output):
    print("grad_input:", grad_input)
    print("grad_output:", grad_output)


def forward_hook(module, input, output):
    print("output:", output)
    return output + 1


model = Model()
model.register_backward_hook(backward_hook)
model.register_forward_hook(forward_hook)
x = torch.tensor([[1.0, 2.0], [3.0, -4.0]], requires_grad=True)
out = model(x)
print("out:", out)
(out * out).sum().backward()
print("x.grad:", x.grad)
print("weight.grad:", model.linear.weight.grad)
"""

SEED_003_MANY_OPS_EXPECTED = """\
output: tensor([[1.5000, 1.5000],
        [0.0000, 0.0000]], grad_fn=<MulBackward0>)
out: tensor([[2.5000, 2.5000],
        [1.0000, 1.0000]], grad_fn=<AddBackward0>)
grad_input: (tensor([[5., 5.],
        [2., 2.]]), None)
grad_output: (tensor([[5., 5.],
        [2., 2.]]),)
x.grad: tensor([[15., 15.],
        [ 0.,  0.]])
weight.grad: tensor([[15., 30.],
        [15., 30.]])
"""

SEED_003_INPUT_IN_PLACE = """\
import torch
import torch.nn as nn


def forward_hook(module, input, output):
    input[0].mul_(0)


linear = nn.Linear(2, 1)
linear.weight.data.fill_(1.0)
linear.bias.data.fill_(0.0)
linear.register_forward_hook(forward_hook)
x = torch.tensor([[1.0, 2.0]])
out = linear(x)
print("out:", out)
print("x:", x)
out.backward()
"""

SEED_003_INPUT_IN_PLACE_EXPECTED = """\
out: tensor([[3.]], grad_fn=<AddmmBackward0>)
x: tensor([[0., 0.]])
"""

INPLACE_ERROR = (
    "one of the variables needed for gradient computation has been modified by an inplace "
    "operation: [torch.FloatTensor [1, 2]] is at version 1; expected version 0 instead. Hint: "
    "enable anomaly detection to find the operation that failed to compute its gradient, with "
    "torch.autograd.set_detect_anomaly(True, check_nan=False).")


def test_seed_003_backward_hook_replaces_grad_input_until_removed(lib):
    out, _, caught = run_program(SEED_003_BACKWARD_HOOK, lib)
    assert out == SEED_003_BACKWARD_HOOK_EXPECTED
    # x * y is one node, yet torch 2.13 warns: the node's inputs are the leaves'
    # AccumulateGrad nodes, which it cannot match to the module's inputs
    assert caught == [LEGACY_MANY_NODES_WARNING]


def test_seed_003_many_ops_give_a_subset_and_forward_hook_changes_output(lib):
    out, _, caught = run_program(SEED_003_MANY_OPS, lib)
    assert out == SEED_003_MANY_OPS_EXPECTED
    assert caught == [LEGACY_MANY_NODES_WARNING]


def test_seed_003_forward_hook_changing_input_in_place_breaks_backward(lib):
    source = SEED_003_INPUT_IN_PLACE.removesuffix("out.backward()\n")
    out, namespace, _ = run_program(source, lib)
    assert out == SEED_003_INPUT_IN_PLACE_EXPECTED
    with pytest.raises(RuntimeError) as info:
        namespace["out"].backward()
    assert str(info.value) == INPLACE_ERROR
