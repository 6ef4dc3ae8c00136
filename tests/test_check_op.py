"""check_op itself: each of its checks fails on the mistake it is there to catch.

The second-order check compares the double backward with central differences of the first
gradient along ``v`` (two gradient evaluations); these tests keep it honest: a double
backward that is wrong in any one component, or missing, fails it.
"""
import pytest
from helpers import check_op, lib

import disthook


def _cube(wrong_second_order: str):
    """x ** 3 with a hand-written backward whose own graph is right or wrong."""
    class Cube(disthook.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x * x

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            if wrong_second_order == "detached":  # right values, no second order at all
                return grad * 3 * x.detach() * x.detach()
            if wrong_second_order == "one element":  # second order off in element 0 only
                bump = disthook.zeros(x.shape)
                bump[0] = 1.0
                return grad * 3 * x * x + grad * (x - x.detach()) * bump
            return grad * 3 * x * x
    return Cube.apply


def _torch_cube(x):
    return x * x * x


def test_a_right_double_backward_passes():
    check_op(lambda x: _cube("")(x) if isinstance(x, disthook.Tensor) else _torch_cube(x),
             (2, 3), double=True, name=False)


@pytest.mark.parametrize("mistake", ["detached", "one element"])
def test_a_wrong_double_backward_fails_against_finite_differences(mistake):
    with pytest.raises(AssertionError, match="finite differences of the gradient"):
        check_op(lambda x: _cube(mistake)(x) if isinstance(x, disthook.Tensor)
                 else _torch_cube(x), (2, 3), double=True, name=False)


def test_a_wrong_first_gradient_fails_against_finite_differences():
    class Twice(disthook.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            return grad * 2.001
    with pytest.raises(AssertionError, match="vs finite differences"):
        check_op(lambda x: Twice.apply(x) if isinstance(x, disthook.Tensor) else x * 2, (4,),
                 name=False)


def test_the_second_order_check_covers_two_inputs_together():
    """x * sin(y): the Hessian couples x and y; both components come right."""
    check_op(lambda x, y: x * lib(x).sin(y), (3,), (3,), double=True)
    check_op(lambda x, y: (x * y).exp().sum(), (2, 2), (2, 2), double=True)
