"""Client hooks that change their tensors in place, as hooks in the wild do (gradient
clippers, ablations, activation patching): the worker's tensors change the same way, and
outputs, gradients and hook logs equal one process's, whether the hook returns the tensor
or not."""
import numpy as np
import pytest

import disthook as torch
from disthook import nn

pytestmark = pytest.mark.timeout(180)


def make_net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 8), nn.Tanh(),
                         nn.Linear(8, 3))


def run(model, hook_on, x):
    """Register the hooks (``hook_on(model)``), then forward and backward; the output, the
    input's gradient and every parameter's gradient."""
    handles = hook_on(model)
    x = x.clone().requires_grad_(True)
    out = model(x)
    (out * torch.arange(1.0, 4.0)).sum().backward()
    grads = ({n: p.grad for n, p in model.named_parameters()} if isinstance(model, nn.Module)
             and not hasattr(model, "named_gradients") else model.named_gradients())
    for h in handles:
        h.remove()
    return out.detach().numpy(), x.grad.numpy(), {n: g.numpy() for n, g in grads.items()}


def same_as_one_process(cluster, hook_on, stages=2, split_points=None):
    x = torch.randn(4, 6)
    expected = run(make_net(), hook_on, x)
    remote = cluster.deploy(make_net(), stages=stages if split_points is None
                            else len(split_points) + 1, split_points=split_points)
    try:
        got = run(remote, hook_on, x)
    finally:
        remote.close()
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got[1], expected[1], rtol=1e-6, atol=1e-6)
    assert got[2].keys() == expected[2].keys()
    for name in expected[2]:
        np.testing.assert_allclose(got[2][name], expected[2][name], rtol=1e-6, atol=1e-6,
                                   err_msg=name)
    return expected


def clamp_returned(g):
    return g.clamp_(-0.05, 0.05)  # seed 004's clipper, exactly


def clamp_in_place(g):
    g.clamp_(-0.05, 0.05)


def zero_in_place(g):
    g.mul_(0)


@pytest.mark.parametrize("hook", [clamp_returned, clamp_in_place, zero_in_place],
                         ids=lambda f: f.__name__)
def test_a_parameter_hook_changing_the_gradient_in_place(cluster, hook):
    expected = same_as_one_process(
        cluster, lambda m: [m[2].weight.register_hook(hook), m[4].bias.register_hook(hook)])
    assert np.abs(expected[2]["2.weight"]).max() <= 0.05  # the hook did clip


def ablate_returned(module, args, out):
    out[:, :4] = 0
    return out


def ablate_in_place(module, args, out):
    out[:, :4] = 0


def scale_in_place(module, args, out):
    out.mul_(2.0)


@pytest.mark.parametrize("hook", [ablate_returned, ablate_in_place, scale_in_place],
                         ids=lambda f: f.__name__)
@pytest.mark.parametrize("stages", [1, 2, 3])
def test_a_forward_hook_changing_the_output_in_place(cluster, hook, stages):
    expected = same_as_one_process(cluster, lambda m: [m[2].register_forward_hook(hook)],
                                   stages=stages)
    assert (expected[0] != 0).any()


@pytest.mark.parametrize("split", [2, 3, 4])
def test_a_forward_pre_hook_changing_the_input_in_place(cluster, split):
    """Also when the module is the first of its stage: its input is no leaf there either."""
    def halve(module, args):
        assert not args[0].is_leaf
        args[0].mul_(0.5)

    same_as_one_process(cluster, lambda m: [m[3].register_forward_pre_hook(halve)],
                        split_points=[split])


def test_a_tensor_hook_put_on_an_activation_changes_its_gradient_in_place(cluster):
    """The Grad-CAM pattern with a twist: the hook on the activation doubles the gradient
    in place and returns nothing."""
    def hook_output(module, args, out):
        out.register_hook(lambda g: g.mul_(2.0))

    same_as_one_process(cluster, lambda m: [m[2].register_forward_hook(hook_output)])
