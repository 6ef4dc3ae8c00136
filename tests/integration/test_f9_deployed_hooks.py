"""What the hook fuzzer's seventh round (test_f1_hook_fuzz_deployed.py, F9) found on
deployed models, each as the small program it came down to.

A hook of a deployed module called under ``no_grad`` with the program's tensor that
requires grad (seed 69: an ``nn.Identity`` block, a forward hook calling ``retain_grad()``
on its output and keeping it): in one process the hook's tensor is the program's own, so
what it kept has the ``.grad`` a later backward gives the program's tensor, and a tensor
hook put on it fires there. Deployed, the hook got a leaf standing for the worker's copy:
its ``.grad`` stayed None (silently) and ``register_hook`` on it was refused. The worker
now says which tensors of an event are the call's arguments, unchanged, and the client
gives its hooks the program's own tensor there.
"""
from __future__ import annotations

import numpy as np
import pytest
from helpers import deployed_run

import disthook as torch
from disthook import nn

CLUSTER_WORKERS = 2


def _kept_under_no_grad(model, hook_on_it=True):
    """A forward hook of an identity keeps what it got under no_grad (retain_grad on it, a
    tensor hook on it); then a backward from the program's tensor."""
    kept, fired = [], []

    def keep(module, args, out):
        out.retain_grad()
        if hook_on_it:
            out.register_hook(lambda g: fired.append(g.numpy().copy()))
        kept.append((out, args[0]))

    model[0].register_forward_hook(keep)
    x = torch.tensor([[1.0, -2.0, 3.0], [0.5, 0.0, -1.0]], requires_grad=True)
    with torch.no_grad():
        model(x)
    (x * torch.arange(6.0).reshape(2, 3)).sum().backward()
    (kept_out, kept_arg), = kept
    return [kept_out is x, kept_arg is x, kept_out.grad, x.grad.numpy().copy(),
            len(fired), fired[0] if fired else None]


@pytest.mark.parametrize("stages", [1, 2])
def test_what_a_hook_keeps_of_the_argument_under_no_grad_is_the_programs_tensor(
        cluster, stages):
    def make():
        torch.manual_seed(0)
        return nn.Sequential(nn.Identity(), nn.Linear(3, 3), nn.Linear(3, 3))

    got, want = deployed_run(cluster, make, _kept_under_no_grad, stages=stages)
    assert want[:2] == [True, True]
    assert got[:2] == want[:2]
    assert got[4] == want[4] == 1
    for a, b in zip(got[2:], want[2:]):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b))


def test_the_grad_it_retained_is_the_programs_tensors(cluster):
    """Seed 69 itself: retain_grad() only; the kept tensor's .grad was None deployed."""
    def make():
        return nn.Sequential(nn.Identity(), nn.Linear(3, 3))

    got, want = deployed_run(cluster, make, lambda m: _kept_under_no_grad(m, False),
                             stages=1)
    assert got[2] is not None
    np.testing.assert_allclose(got[2].numpy(), want[2].numpy())
    np.testing.assert_allclose(got[2].numpy(), got[3])


def test_a_pre_hook_of_a_placed_part_gets_the_programs_tensor_under_no_grad(cluster):
    """A part the model's forward calls here (placement=): its forward pre-hook's args[0]
    under no_grad is the program's tensor, and a tensor hook on it fires in a later
    backward, as in one process."""
    def make():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(3, 3), nn.Tanh())

    def run(model):
        fired, seen = [], []
        x = torch.tensor([[1.0, -2.0, 3.0]], requires_grad=True)

        def pre(module, args):
            seen.append(args[0] is x)
            args[0].register_hook(lambda g: fired.append(g.numpy().copy()))

        model[0].register_forward_pre_hook(pre)
        with torch.no_grad():
            model(x)
        (x * 3).sum().backward()
        return seen, len(fired), x.grad.numpy().copy()

    got, want = deployed_run(cluster, make, run, stages=2, placement={"0": 0, "1": 1})
    assert want[:2] == ([True], 1)
    assert got[:2] == want[:2]
    np.testing.assert_allclose(got[2], want[2])


def _view_changed_in_a_hook(model, catch: bool):
    """Seed 1305: a full backward pre-hook on the first layer makes its output that hook's
    view; the next layer's forward pre-hook changes what it got in place. In one process
    the change raises there, inside the hook (which may catch it and go on)."""
    log = []
    model[0].register_full_backward_pre_hook(lambda m, g: None)

    def change(module, args):
        try:
            args[0].mul_(-1)
        except RuntimeError as e:
            log.append(("raised in the hook", "is a view" in str(e)))
            if not catch:
                raise
            return (args[0] * -1,)
        log.append("the hook went on")
        return None

    model[1].register_forward_pre_hook(change)
    torch.manual_seed(1)
    x = torch.randn(2, 3, requires_grad=True)
    try:
        out = model(x)
    except RuntimeError as e:
        log.append(("raised", type(e).__name__))
        return log, None
    out.sum().backward()
    return log, [x.grad.numpy().copy()] + [p.grad.numpy().copy() for p in model.parameters()]


@pytest.mark.parametrize("layers", [3, 2], ids=["one_stage", "next_stage"])
@pytest.mark.parametrize("catch", [False, True])
def test_a_hooks_view_changed_in_place_in_a_later_hook_raises_inside_that_hook(
        cluster, catch, layers):
    """(With two layers on two stages the view is the first stage's output, passed on.)"""
    def make():
        torch.manual_seed(0)
        return nn.Sequential(*[nn.Linear(3, 3) for _ in range(layers)])

    got, want = deployed_run(cluster, make, lambda m: _view_changed_in_a_hook(m, catch))
    assert want[0][0] == ("raised in the hook", True)
    assert got[0] == want[0]
    if catch:
        for a, b in zip(got[1], want[1]):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


class _Calls(nn.Module):
    """A model whose forward runs here and calls its two parts."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(3, 3), nn.Linear(3, 3)

    def forward(self, x):
        return self.b(self.a(x))


def _given_an_inference_tensor(model, frozen: bool):
    """Seed 1792: the model's input is a tensor made in inference_mode (a forward hook's
    result, in the seed); in one process a layer that saves it for backward refuses it,
    where a frozen model records nothing and takes it."""
    for p in model.parameters():
        p.requires_grad_(not frozen)
    with torch.inference_mode():
        x = torch.ones(2, 3) * 0.5
    try:
        out = model(x)
    except RuntimeError as e:
        return "raised", "Inference tensors cannot be saved for backward" in str(e)
    return "ran", out.requires_grad, out.detach().numpy().round(5).tolist()


@pytest.mark.parametrize("frozen", [False, True])
@pytest.mark.parametrize("make", [lambda: nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 3)),
                                  _Calls], ids=["chain", "parts"])
def test_an_argument_made_in_inference_mode_is_refused_where_a_layer_saves_it(
        cluster, make, frozen):
    def made():
        torch.manual_seed(0)
        return make()

    got, want = deployed_run(cluster, made, lambda m: _given_an_inference_tensor(m, frozen))
    assert want[0] == ("ran" if frozen else "raised")
    assert got == want
