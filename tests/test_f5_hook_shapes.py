"""What the hook fuzzer's fifth round found in one process, each run under disthook and torch
with the same asserts (the ``lib`` fixture).

A hook's gradient made in ``inference_mode`` (an inference tensor) that waits in a node's
input buffer when a second gradient for the same input arrives: torch's engine adds the
second into the first in place where it holds the only reference to it and its memory and
the tensor is dense (grad mode off), and that in-place change of an inference tensor
outside the mode is its RuntimeError. disthook added out of place and went on (fuzzer
seeds 6279, 6303: a full backward hook's result under inference_mode)."""
from __future__ import annotations

import pytest
import test_module_api

lib = test_module_api.lib  # the fixture: disthook, then torch

INPLACE = "Inplace update to inference tensor outside InferenceMode is not allowed"


def _sum_after_hook(torch, made, keep=None, *, first="hooked", create_graph=False):
    """x -> h; the hooked branch ``h + 0`` (its hook returns ``made(g)`` under
    inference_mode) and ``h.sigmoid()`` meet again in h's buffer; ``first`` says which
    branch's gradient gets there first (the newer branch runs first)."""
    x = torch.ones(2, 2, requires_grad=True)
    h = x * 1
    if first == "hooked":
        s, a = h.sigmoid(), h + 0
    else:
        a, s = h + 0, h.sigmoid()

    def hook(g):
        with torch.inference_mode():
            r = made(torch, g)
        if keep is not None:
            keep.append(r)
        return r

    a.register_hook(hook)
    loss = (a + s).sum()
    if create_graph:
        return torch.autograd.grad(loss, x, create_graph=True)[0]
    loss.backward()
    return x.grad


MADE = {"product": lambda torch, g: g * 2, "clone": lambda torch, g: g.clone(),
        "transposed": lambda torch, g: (g * 2).t(),
        "slice of a bigger one": lambda torch, g: torch.ones(4, 2)[:2]}


@pytest.mark.parametrize("made", MADE)
def test_an_inference_gradient_added_to_in_the_buffer_is_refused(lib, made):
    torch = lib.torch
    with pytest.raises(RuntimeError, match=INPLACE):
        _sum_after_hook(torch, MADE[made])


def test_a_leaf_s_buffer_too_and_under_autograd_grad(lib):
    torch = lib.torch
    x = torch.ones(2, requires_grad=True)
    s, a = x.sigmoid(), x + 0

    def hook(g):
        with torch.inference_mode():
            return g * 2

    a.register_hook(hook)
    with pytest.raises(RuntimeError, match=INPLACE):
        torch.autograd.grad((a + s).sum(), x)


def test_a_full_backward_hook_s_inference_grad_input(lib):
    """The seeds' shape: a module's full backward hook returns grad_input made under
    inference_mode, and the module's input has another use whose gradient comes later."""
    torch = lib.torch
    torch.manual_seed(0)
    lin = torch.nn.Linear(2, 2)

    def hook(module, grad_input, grad_output):
        with torch.inference_mode():
            return (grad_input[0] * 2,)

    lin.register_full_backward_hook(hook)
    x = torch.ones(1, 2, requires_grad=True)
    s = x.sigmoid()
    with pytest.raises(RuntimeError, match=INPLACE):
        (lin(x).sum() + s.sum()).backward()
    y = lin(x)  # the other use made after: its gradient comes first, the sum is a new one
    (y.sum() + x.sigmoid().sum()).backward()
    assert x.grad.shape == (1, 2)


@pytest.mark.parametrize("case", ["kept", "arrives second", "expanded", "create_graph",
                                  "kept base of a view", "the gradient itself"])
def test_where_torch_adds_out_of_place_the_sum_goes_on(lib, case):
    """Another reference to the inference tensor (the hook kept it, or the base of the view
    it returned), a gradient that arrives second, one that is not dense (expanded), grad mode
    on (create_graph), or a gradient that is no inference tensor: the sum is a new tensor."""
    torch = lib.torch
    keep = []
    made, first = MADE["product"], "hooked"
    if case == "arrives second":
        first = "sigmoid"
    elif case == "expanded":
        def made(torch, g):
            return torch.ones(1, 2).expand(2, 2)
    elif case == "kept base of a view":
        def made(torch, g):
            r = g * 2
            keep.append(r)
            return r.view(2, 2)
    elif case == "the gradient itself":
        def made(torch, g):
            return g
    grad = _sum_after_hook(torch, made, keep if case == "kept" else None, first=first,
                           create_graph=case == "create_graph")
    s = 1 / (1 + 2.718281828459045 ** -1)
    factor = 1 if case in ("expanded", "the gradient itself") else 2
    assert grad.reshape(-1).tolist() == pytest.approx([factor + s * (1 - s)] * 4, rel=1e-5)


@pytest.mark.parametrize("hooks", ["save_on_cpu", "identity"])
def test_relu_s_backward_reads_its_saved_output_as_a_hook_hands_it_back(lib, hooks):
    """ReLU saves its output; under saved-tensor hooks that hand back the tensor itself
    (``save_on_cpu`` on the CPU) an in-place change after the forward reaches the backward,
    unchecked, and torch's threshold_backward passes the gradient only where that output is
    > 0 (or NaN): a negated output passes none. disthook tested "!= 0" and passed it where
    the output was negative (fuzzer seed 12784: a forward pre-hook negating a ReLU's output
    in place under save_on_cpu)."""
    torch = lib.torch
    x = torch.tensor([1.0, -2.0, 3.0, 0.5], requires_grad=True)
    region = (torch.autograd.graph.save_on_cpu() if hooks == "save_on_cpu" else
              torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t))
    with region:
        y = (x * 1).relu()
    with torch.no_grad():
        y[:2].mul_(-1)
    y.sum().backward()
    assert x.grad.tolist() == [0.0, 0.0, 1.0, 1.0]
