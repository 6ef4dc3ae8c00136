"""A module's full backward hook nodes tell the engine "no change" (None) when they hand
back its own gradients (utils.hooks._replacement); any real change still replaces them."""
import numpy as np
import pytest

import disthook

torch = pytest.importorskip("torch")


def _grads(lib, hook=None, pre_hook=None):
    lib.manual_seed(0)
    layer = lib.nn.Linear(3, 2)
    layer.weight.data = lib.tensor(np.arange(6.0).reshape(2, 3), dtype=lib.float32)
    if hook is not None:
        layer.register_full_backward_hook(hook)
    if pre_hook is not None:
        layer.register_full_backward_pre_hook(pre_hook)
    x = lib.tensor(np.linspace(-1, 1, 12).reshape(4, 3), dtype=lib.float32, requires_grad=True)
    (layer(x) * lib.tensor([1.0, -2.0])).sum().backward()
    return x.grad.numpy(), layer.weight.grad.numpy()


@pytest.mark.parametrize("name, hook, pre_hook", [
    ("none", None, None),
    ("returns its own grad_input", lambda m, gi, go: gi, None),
    ("returns a copy", lambda m, gi, go: tuple(g.clone() for g in gi), None),
    ("doubles grad_input", lambda m, gi, go: tuple(g * 2 for g in gi), None),
    ("pre-hook returns grad_output", None, lambda m, go: go),
    ("pre-hook halves grad_output", None, lambda m, go: tuple(g / 2 for g in go)),
])
def test_full_backward_hook_results_as_torch(name, hook, pre_hook):
    mine = _grads(disthook, hook, pre_hook)
    theirs = _grads(torch, hook, pre_hook)
    for a, b in zip(mine, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-6)
