"""``BackwardHookFunction.apply`` has a path of its own for what the module machinery asks
(tensors only, grad mode on, one of them needing a gradient): it must build what the
general ``Function.apply`` builds, node and outputs, and leave the rest to it."""
import numpy as np
import pytest

import disthook as torch
from disthook.autograd.function import Function
from disthook.nn.modules._functions import BackwardHookFunction


def general(*args):
    """The same call through Function.apply's general path."""
    return Function.apply.__func__(BackwardHookFunction, *args)


def inputs():
    torch.manual_seed(0)
    leaf = torch.randn(2, 3, requires_grad=True)
    made = torch.randn(3, requires_grad=True) * 2  # has a grad_fn
    plain = torch.randn(4)  # needs no gradient
    return leaf, made, plain


def describe(outs, given):
    """What a caller can see of the outputs (of ``given``) and their node."""
    node = next(o.grad_fn for o in outs if o.grad_fn is not None)
    return {
        "types": [type(o).__name__ for o in outs],
        "requires_grad": [o.requires_grad for o in outs],
        "is_leaf": [o.is_leaf for o in outs],
        "grad_fn": [None if o.grad_fn is None else o.grad_fn.name() for o in outs],
        "output_nr": [o.output_nr for o in outs if o.grad_fn is not None],
        "next": [(None if n is None else n.name(), nr) for n, nr in node.next_functions],
        "needs": node.needs_input_grad,
        "base_is_input": [o._base is a for o, a in zip(outs, given)],
    }


@pytest.mark.parametrize("order", [(0, 1, 2), (2, 0, 1), (1, 2)])
def test_the_own_path_builds_what_the_general_path_builds(order):
    a = inputs()
    node_inputs = [a[i] for i in order]
    fast = BackwardHookFunction.apply(*node_inputs)
    slow = general(*node_inputs)
    assert describe(fast, node_inputs) == describe(slow, node_inputs)
    for f, s in zip(fast, slow):
        np.testing.assert_array_equal(f.detach().numpy(), s.detach().numpy())
        assert np.shares_memory(f.detach().numpy(), s.detach().numpy())
    # the gradients flow through as through the general path's node
    grads_fast = torch.autograd.grad(sum(o.sum() for o in fast if o.requires_grad),
                                     [t for t in node_inputs if t.requires_grad])
    grads_slow = torch.autograd.grad(sum(o.sum() for o in slow if o.requires_grad),
                                     [t for t in node_inputs if t.requires_grad])
    for f, s in zip(grads_fast, grads_slow):
        np.testing.assert_array_equal(f.numpy(), s.numpy())


def test_an_output_that_needs_a_gradient_is_a_view_an_in_place_change_refuses():
    leaf, made, plain = inputs()
    _, out_made, out_plain = BackwardHookFunction.apply(leaf, made, plain)
    with pytest.raises(RuntimeError, match="is a view and is being modified inplace"):
        out_made.add_(1)
    out_plain.add_(1)  # an alias of an input needing no gradient: allowed, shared
    np.testing.assert_array_equal(out_plain.numpy(), plain.numpy())


def test_an_absent_gradient_comes_back_as_zeros_as_on_the_general_path():
    leaf, made, _ = inputs()
    a, _ = BackwardHookFunction.apply(leaf, made)
    (grad,) = torch.autograd.grad(a.sum(), [leaf])  # nothing flows into the second
    np.testing.assert_array_equal(grad.numpy(), np.ones((2, 3), np.float32))
    node = a.grad_fn
    assert [g.numpy().tolist() for g in node._backward([torch.ones(2, 3), None])][1] == \
        [0.0, 0.0, 0.0]


@pytest.mark.parametrize("case", ["no_grad", "none_need_grad"])
def test_other_calls_take_the_general_path(case):
    leaf, _, plain = inputs()
    if case == "no_grad":
        with torch.no_grad():
            outs = BackwardHookFunction.apply(leaf, plain)
    else:
        outs = BackwardHookFunction.apply(plain, plain * 2)
    # as torch: no node, and nothing requires grad (under no_grad not even the leaf's)
    assert all(o.grad_fn is None and not o.requires_grad for o in outs)
