"""What the differential hook fuzzer's fifth round (test_f1_hook_fuzz_deployed.py) found on
deployed models, each as the small program it came down to.

A forward hook of a deployed module called under ``no_grad`` with an input that requires
grad (seed 980): in one process the hook's ``args[0]`` is the program's tensor, which
requires grad, and a tensor hook put on it (or on an ``nn.Identity``'s output, the same
tensor) fires in a later backward from the program's tensor. Deployed, the hook's tensor
stood for the worker's copy, which required no grad under ``no_grad``, so the hook read
``requires_grad`` False and ``register_hook`` raised torch's "cannot register a hook on a
tensor that doesn't require gradient". Now it requires grad as in one process,
``retain_grad`` is the leaf's no-op, and ``register_hook`` is refused with
NotImplementedError saying why (no backward reaches the worker's copy) and what to do.

Under ``save_on_cpu`` (or checkpoint) an op on two values kept on a worker runs there: in
``a + model(a)`` the add's backward gave its two operands one gradient tensor, kept on the
worker as two copies (and sent to the client inline besides), so a full backward pre-hook
of the second call that negated its ``grad_output`` in place left the first call's
gradient as it was: ``x.grad`` silently differed from one process's (seed 1209 with
F1_FUZZ_DEPLOYED_EXTRAS=1). The worker now keeps such gradients as one array, by
reference, and writes a hook's change back into the kept array where the backward worked
on a copy."""
import numpy as np
import pytest

import disthook as torch
from disthook import nn

CLUSTER_WORKERS = 2


def _seen_under_no_grad(model, hook_on_it: bool) -> list:
    seen = []

    def look(module, args, out):
        seen.append((args[0].requires_grad, args[0].is_leaf, out.requires_grad))
        args[0].retain_grad()
        if hook_on_it:
            out.register_hook(lambda g: None)

    model[0].register_forward_hook(look)
    x = torch.ones(2, 3, requires_grad=True)
    with torch.no_grad():
        out = model(x)
    seen.append((out is x, out.requires_grad))
    return seen


@pytest.mark.parametrize("deployed", [False, True])
def test_a_forward_hook_under_no_grad_sees_its_input_require_grad(cluster, deployed):
    model = nn.Sequential(nn.Identity())
    if deployed:
        model = cluster.deploy(model, stages=1)
    try:
        assert _seen_under_no_grad(model, False) == [(True, True, True), (True, True)]
    finally:
        if deployed:
            model.close()


def test_a_tensor_hook_put_on_it_is_refused_saying_why(cluster):
    """(Where the hook's tensor is a micro-batch's rows; where it is the program's whole
    tensor, the hook gets that tensor itself: test_f9_deployed_hooks.py.)"""
    remote = cluster.deploy(nn.Sequential(nn.Identity()), stages=1, chunks=2)
    try:
        with pytest.raises(NotImplementedError, match="Register the hook on the tensor you "
                                                      "passed"):
            _seen_under_no_grad(remote, True)
    finally:
        remote.close()


class _Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        return self.lin(x).tanh()


class _Root(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = _Block()

    def forward(self, x):
        return self.block(x)


@pytest.mark.parametrize("hooks_ahead", [True, False])
def test_a_hook_s_in_place_change_of_an_add_s_gradient_under_save_on_cpu(cluster,
                                                                        hooks_ahead):
    def run(model):
        seen = []

        def negate(module, grad_output):
            seen.append(grad_output[0].tolist())
            grad_output[0].mul_(-1)

        model.block.register_full_backward_pre_hook(negate)
        x = torch.ones(2, 3, requires_grad=True)
        with torch.autograd.graph.save_on_cpu():
            a = model(x)
            out = a + model(a)
        c = torch.tensor(np.arange(1, 7, dtype=np.float32).reshape(2, 3) / 4)
        (out * c).sum().backward()
        return seen, x.grad.tolist()

    def make():
        torch.manual_seed(0)
        return _Root()

    want = run(make())
    remote = cluster.deploy(make(), stages=1, hooks_ahead=hooks_ahead)
    try:
        got = run(remote)
    finally:
        remote.close()
    assert np.allclose(got[0], want[0], atol=1e-6)
    assert np.allclose(got[1], want[1], atol=1e-6)


def test_a_full_backward_hook_removed_between_two_backwards_of_one_graph(cluster):
    """``backward(retain_graph=True)``, the module's full backward hook removed, then a
    second backward through the same graph: torch took the hook at the module's call, so
    it fires again in one process. Deployed, the worker fired its stub and the client,
    having forgotten the hook, raised "hook 0 was removed on the client" (seed 1120 with
    F1_FUZZ_DEPLOYED_EXTRAS=1)."""
    from helpers import deployed_run

    def make():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(3, 3), nn.Tanh(), nn.Linear(3, 3))

    def run(model):
        log = []
        handle = model[2].register_full_backward_hook(
            lambda module, grad_input, grad_output: log.append(grad_output[0].tolist()))
        x = torch.ones(2, 3, requires_grad=True)
        loss = model(x).sum()
        loss.backward(retain_graph=True)
        handle.remove()
        (g,) = torch.autograd.grad(loss, x)
        return log, g.tolist()

    got, want = deployed_run(cluster, make, run)
    assert got == want
    assert len(want[0]) == 2
