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
NotImplementedError saying why (no backward reaches the worker's copy) and what to do."""
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
    remote = cluster.deploy(nn.Sequential(nn.Identity()), stages=1)
    try:
        with pytest.raises(NotImplementedError, match="Register the hook on the tensor you "
                                                      "passed"):
            _seen_under_no_grad(remote, True)
    finally:
        remote.close()
