"""Custom ``autograd.Function``: ctx API, saved tensors, non-tensor args, several outputs,
mark_non_differentiable / mark_dirty, set_materialize_grads, wrong gradient counts, node
names, setup_context style and once_differentiable.

Each test defines its Functions on ``T.autograd.Function`` for T in (disthook, torch) and
checks hard-coded values; the torch run validates the expectations.
"""
from __future__ import annotations

import importlib
import importlib.util
import re

import numpy as np
import pytest

HAS_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")


def libs(xfail: str | None = None):
    dh = "disthook" if xfail is None else pytest.param(
        "disthook", marks=pytest.mark.xfail(strict=True, reason=xfail))
    return pytest.mark.parametrize("T", [dh, pytest.param("torch", marks=needs_torch)],
                                   indirect=True)


@pytest.fixture(params=["disthook", pytest.param("torch", marks=needs_torch)])
def T(request):
    return importlib.import_module(request.param)


def exact(exc, msg: str):
    return pytest.raises(exc, match="^" + re.escape(msg) + "$")


def close(t, expected, rtol=1e-6, atol=1e-6):
    np.testing.assert_allclose(np.array(t.tolist(), dtype=np.float64),
                               np.asarray(expected, dtype=np.float64), rtol=rtol, atol=atol)


SECOND_BACKWARD = (
    "Trying to backward through the graph a second time (or directly access saved tensors "
    "after they have already been freed). Saved intermediate values of the graph are freed "
    "when you call .backward() or autograd.grad(). Specify retain_graph=True if you need to "
    "backward through the graph a second time or if you need to access saved tensors after "
    "calling backward."
)

VIEW_INPLACE_MSG = (
    "Output 0 of {} is a view and is being modified inplace. This view was created inside a "
    "custom Function (or because an input was returned as-is) and the autograd logic to handle "
    "view+inplace would override the custom backward associated with the custom Function, "
    "leading to incorrect gradients. This behavior is forbidden. You can fix this by cloning "
    "the output of the custom Function.")
VIEW_BASE_INPLACE_MSG = (
    "Output 0 of {} is a view and its base or another view of its base has been modified "
    "inplace. This view was created inside a custom Function (or because an input was "
    "returned as-is) and the autograd logic to handle view+inplace would override the custom "
    "backward associated with the custom Function, leading to incorrect gradients. This "
    "behavior is forbidden. You can fix this by cloning the output of the custom Function.")



def make_square(T):
    class Square(T.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 2 * x * g

    return Square


# ---- basics --------------------------------------------------------------------------------

def test_forward_backward_saved_tensors(T):
    Square = make_square(T)
    x = T.tensor([1.0, -2.0, 3.0], requires_grad=True)
    y = Square.apply(x)
    close(y, [1.0, 4.0, 9.0])
    assert y.requires_grad and not y.is_leaf
    (y * T.tensor([1.0, 2.0, 3.0])).sum().backward()
    close(x.grad, [2.0, -8.0, 18.0])


def test_grad_fn_name_is_class_name_plus_backward(T):
    Square = make_square(T)
    x = T.ones(2, requires_grad=True)
    y = Square.apply(x)
    assert y.grad_fn.name() == "SquareBackward"
    assert type(y.grad_fn).__name__ == "SquareBackward"
    nf = y.grad_fn.next_functions
    assert len(nf) == 1 and type(nf[0][0]).__name__ == "AccumulateGrad" and nf[0][1] == 0
    z = Square.apply(x * 2)
    assert type(z.grad_fn.next_functions[0][0]).__name__ == "MulBackward0"


def test_ctx_is_the_grad_fn(T):
    seen = {}

    class Id(T.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            seen["fwd"] = ctx
            return x * 1

        @staticmethod
        def backward(ctx, g):
            seen["bwd"] = ctx
            return g

    x = T.ones(2, requires_grad=True)
    y = Id.apply(x)
    y.sum().backward()
    assert seen["fwd"] is seen["bwd"] is y.grad_fn


def test_ctx_arbitrary_attributes_and_non_tensor_args(T):
    seen = {}

    class Scale(T.autograd.Function):
        @staticmethod
        def forward(ctx, x, k, tag):
            ctx.k = k
            ctx.tag = tag
            return x * k

        @staticmethod
        def backward(ctx, g):
            seen["needs"] = ctx.needs_input_grad
            seen["tag"] = ctx.tag
            return g * ctx.k, None, None

    x = T.tensor([1.0, 2.0], requires_grad=True)
    y = Scale.apply(x, 3.0, "hello")
    assert len(y.grad_fn.next_functions) == 1  # only the tensor argument has an edge
    y.sum().backward()
    close(x.grad, [3.0, 3.0])
    assert seen == {"needs": (True, False, False), "tag": "hello"}


def test_needs_input_grad(T):
    seen = []

    class Mul(T.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            seen.append(("fwd", ctx.needs_input_grad))
            ctx.save_for_backward(a, b)
            return a * b

        @staticmethod
        def backward(ctx, g):
            a, b = ctx.saved_tensors
            seen.append(("bwd", ctx.needs_input_grad))
            ga = g * b if ctx.needs_input_grad[0] else None
            gb = g * a if ctx.needs_input_grad[1] else None
            return ga, gb

    a = T.tensor([1.0, 2.0], requires_grad=True)
    b = T.tensor([3.0, 4.0])
    Mul.apply(a, b).sum().backward()
    Mul.apply(b, a).sum().backward()
    assert seen == [("fwd", (True, False)), ("bwd", (True, False)),
                    ("fwd", (False, True)), ("bwd", (False, True))]
    close(a.grad, [6.0, 8.0])
    assert b.grad is None


def test_edges_for_inputs_not_requiring_grad(T):
    class Add(T.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            return a + b

        @staticmethod
        def backward(ctx, g):
            return g, g

    a = T.ones(2, requires_grad=True)
    y = Add.apply(T.ones(2), a)
    edges = [(None if n is None else type(n).__name__, nr) for n, nr in y.grad_fn.next_functions]
    assert edges == [(None, 0), ("AccumulateGrad", 0)]
    y.sum().backward()  # the gradient for the constant is dropped
    close(a.grad, [1.0, 1.0])


def test_no_input_requires_grad_gives_plain_output(T):
    Square = make_square(T)
    y = Square.apply(T.tensor([1.0, 2.0]))
    assert not y.requires_grad and y.grad_fn is None
    close(y, [1.0, 4.0])


def test_under_no_grad_no_graph(T):
    Square = make_square(T)
    x = T.tensor([1.0, 2.0], requires_grad=True)
    with T.no_grad():
        y = Square.apply(x)
    assert not y.requires_grad and y.grad_fn is None


def test_forward_runs_without_grad_mode(T):
    seen = []

    class F(T.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            seen.append(T.is_grad_enabled())
            y = x * 2
            seen.append(y.requires_grad)
            return y

        @staticmethod
        def backward(ctx, g):
            seen.append(T.is_grad_enabled())
            return g * 2

    x = T.ones(2, requires_grad=True)
    F.apply(x).sum().backward()
    assert seen == [False, False, False]


def test_custom_function_in_a_larger_graph(T):
    Square = make_square(T)
    x = T.tensor([1.0, 2.0], requires_grad=True)
    w = T.tensor([0.5, -1.0], requires_grad=True)
    y = (Square.apply(x * w).exp() * 2).sum()
    y.backward()
    xv, wv = np.array([1.0, 2.0]), np.array([0.5, -1.0])
    common = 2 * np.exp((xv * wv) ** 2) * 2 * xv * wv
    close(x.grad, common * wv, rtol=1e-5)
    close(w.grad, common * xv, rtol=1e-5)


def test_backward_returning_a_python_number_for_scale_is_not_needed(T):
    # backward may return a 1-tuple or a bare tensor for a single input
    class F(T.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 3

        @staticmethod
        def backward(ctx, g):
            return (g * 3,)

    x = T.ones(2, requires_grad=True)
    F.apply(x).sum().backward()
    close(x.grad, [3.0, 3.0])


def test_broadcast_gradient_is_reduced_to_input_shape(T):
    # torch's validate_outputs sums a gradient back to the input's shape when it is
    # expandable to it
    class F(T.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.sum()

        @staticmethod
        def backward(ctx, g):
            return g.expand(4, 3)

    x = T.ones(3, requires_grad=True)
    F.apply(x).backward()
    close(x.grad, [4.0, 4.0, 4.0])


# ---- saved tensors lifetime ----------------------------------------------------------------

def test_saved_tensors_freed_after_backward(T):
    Square = make_square(T)
    x = T.tensor([1.0, 2.0], requires_grad=True)
    y = Square.apply(x)
    y.sum().backward()
    with exact(RuntimeError, SECOND_BACKWARD):
        _ = y.grad_fn.saved_tensors
    with exact(RuntimeError, SECOND_BACKWARD):
        y.sum().backward()


def test_saved_tensors_kept_with_retain_graph(T):
    Square = make_square(T)
    x = T.tensor([1.0, 2.0], requires_grad=True)
    y = Square.apply(x)
    y.sum().backward(retain_graph=True)
    (sx,) = y.grad_fn.saved_tensors
    close(sx, [1.0, 2.0])
    y.sum().backward()
    close(x.grad, [4.0, 8.0])


def test_saved_input_modified_in_place_raises(T):
    Square = make_square(T)
    x = T.tensor([1.0, 2.0], requires_grad=True)
    h = x * 1
    y = Square.apply(h)
    h.add_(1)
    with pytest.raises(RuntimeError, match="^one of the variables needed for gradient "
                       r"computation has been modified by an inplace operation: "
                       r"\[torch.FloatTensor \[2\]\], which is output 0 of "):
        y.sum().backward()


def test_function_without_saved_tensors_can_backward_twice(T):
    class Double(T.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2

    x = T.ones(2, requires_grad=True)
    y = Double.apply(x).sum()
    y.backward()
    y.backward()
    close(x.grad, [4.0, 4.0])


def test_save_none(T):
    class F(T.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(None, x)
            return x * 2

        @staticmethod
        def backward(ctx, g):
            none, _x = ctx.saved_tensors
            assert none is None
            return g * 2

    x = T.ones(2, requires_grad=True)
    F.apply(x).sum().backward()
    close(x.grad, [2.0, 2.0])


# ---- multiple outputs ------------------------------------------------------------------------

def make_split(T, materialize=True):
    calls = []

    class Split(T.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            if not materialize:
                ctx.set_materialize_grads(False)
            return x * 1, x * 2

        @staticmethod
        def backward(ctx, g1, g2):
            calls.append((None if g1 is None else g1.tolist(),
                          None if g2 is None else g2.tolist()))
            out = None
            if g1 is not None:
                out = g1
            if g2 is not None:
                out = 2 * g2 if out is None else out + 2 * g2
            return out

    return Split, calls


def test_multiple_outputs_both_used(T):
    Split, calls = make_split(T)
    x = T.tensor([1.0, 2.0], requires_grad=True)
    a, b = Split.apply(x)
    assert a.grad_fn is b.grad_fn
    assert a.output_nr == 0 and b.output_nr == 1
    (a * 3 + b * 5).sum().backward()
    assert calls == [([3.0, 3.0], [5.0, 5.0])]
    close(x.grad, [13.0, 13.0])


def test_multiple_outputs_unused_output_gets_zeros(T):
    Split, calls = make_split(T)
    x = T.tensor([1.0, 2.0], requires_grad=True)
    _a, b = Split.apply(x)
    b.sum().backward()
    assert calls == [([0.0, 0.0], [1.0, 1.0])]
    close(x.grad, [2.0, 2.0])


def test_set_materialize_grads_false_gives_none(T):
    Split, calls = make_split(T, materialize=False)
    x = T.tensor([1.0, 2.0], requires_grad=True)
    a, b = Split.apply(x)
    b.sum().backward()
    assert calls == [(None, [1.0, 1.0])]
    close(x.grad, [2.0, 2.0])
    x.grad = None
    a, b = Split.apply(x)
    a.sum().backward()
    assert calls[-1] == ([1.0, 1.0], None)
    close(x.grad, [1.0, 1.0])


def test_mark_non_differentiable(T):
    seen = []

    class SortLike(T.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            idx = x.argmax()
            y = x * 2
            ctx.mark_non_differentiable(idx)
            return y, idx

        @staticmethod
        def backward(ctx, gy, gidx):
            seen.append(gidx)
            return gy * 2

    x = T.tensor([1.0, 5.0, 2.0], requires_grad=True)
    y, idx = SortLike.apply(x)
    assert y.requires_grad
    assert not idx.requires_grad and idx.grad_fn is None
    assert idx.item() == 1
    y.sum().backward()
    close(x.grad, [2.0, 2.0, 2.0])
    assert len(seen) == 1 and seen[0] is not None and float(seen[0].sum()) == 0.0


def test_mark_non_differentiable_float_output(T):
    class F(T.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            a = x * 2
            b = x * 3
            ctx.mark_non_differentiable(b)
            return a, b

        @staticmethod
        def backward(ctx, ga, gb):
            return ga * 2

    x = T.ones(2, requires_grad=True)
    a, b = F.apply(x)
    assert a.requires_grad and not b.requires_grad
    with pytest.raises(RuntimeError,
                       match="element 0 of tensors does not require grad"):
        b.sum().backward()


def test_mark_dirty_in_place_function(T):
    class Double_(T.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            x.mul_(2)
            ctx.mark_dirty(x)
            return x

        @staticmethod
        def backward(ctx, g):
            return g * 2

    x = T.tensor([1.0, 2.0], requires_grad=True)
    h = x * 1
    out = Double_.apply(h)
    assert out is h
    assert h.grad_fn.name() == "Double_Backward"
    assert h._version == 2
    close(h, [2.0, 4.0])
    (h * 3).sum().backward()
    close(x.grad, [6.0, 6.0])


# ---- wrong gradient counts / types ---------------------------------------------------------

def test_too_many_gradients(T):
    class Three(T.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1

        @staticmethod
        def backward(ctx, g):
            return g, g

    x = T.ones(2, requires_grad=True)
    with exact(RuntimeError,
               "function ThreeBackward returned an incorrect number of gradients "
               "(expected 1, got 2)"):
        Three.apply(x).sum().backward()


def test_extra_trailing_none_gradients_are_allowed(T):
    class F(T.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1

        @staticmethod
        def backward(ctx, g):
            return g, None, None

    x = T.ones(2, requires_grad=True)
    F.apply(x).sum().backward()
    close(x.grad, [1.0, 1.0])


def test_too_few_gradients(T):
    class Two(T.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            return a * b

        @staticmethod
        def backward(ctx, g):
            return g

    a = T.ones(2, requires_grad=True)
    with exact(RuntimeError,
               "function TwoBackward returned an incorrect number of gradients "
               "(expected 2, got 1)"):
        Two.apply(a, a).sum().backward()


def test_too_few_gradients_counts_non_tensor_args(T):
    class Scale(T.autograd.Function):
        @staticmethod
        def forward(ctx, x, k):
            return x * k

        @staticmethod
        def backward(ctx, g):
            return g * 2

    x = T.ones(2, requires_grad=True)
    with exact(RuntimeError,
               "function ScaleBackward returned an incorrect number of gradients "
               "(expected 2, got 1)"):
        Scale.apply(x, 2.0).sum().backward()


def test_gradient_for_non_tensor_arg(T):
    class Bad(T.autograd.Function):
        @staticmethod
        def forward(ctx, x, k):
            return x * k

        @staticmethod
        def backward(ctx, g):
            return g, g

    x = T.ones(2, requires_grad=True)
    with exact(RuntimeError,
               "function BadBackward returned a gradient different than None at position 2, "
               "but the corresponding forward input was not a Variable"):
        Bad.apply(x, 2.0).sum().backward()


def test_gradient_of_wrong_shape(T):
    class Bad(T.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1

        @staticmethod
        def backward(ctx, g):
            return T.ones(5)

    x = T.ones(2, requires_grad=True)
    with exact(RuntimeError, "Function BadBackward returned an invalid gradient at index 0 - "
               "got [5] but expected shape compatible with [2]"):
        Bad.apply(x).sum().backward()


def test_returning_none_gives_no_gradient(T):
    class Stop(T.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1

        @staticmethod
        def backward(ctx, g):
            return None

    x = T.ones(2, requires_grad=True)
    w = T.ones(2, requires_grad=True)
    (Stop.apply(x) * w).sum().backward()
    assert x.grad is None
    close(w.grad, [1.0, 1.0])


# ---- setup_context style, once_differentiable, double backward ------------------------------

def test_setup_context_style(T):
    seen = {}

    class Mul(T.autograd.Function):
        @staticmethod
        def forward(x, y, scale=1.0):
            seen["fwd_grad"] = T.is_grad_enabled()
            return x * y * scale

        @staticmethod
        def setup_context(ctx, inputs, output):
            x, y, scale = inputs
            seen["output"] = output.tolist()
            ctx.scale = scale
            ctx.save_for_backward(x, y)

        @staticmethod
        def backward(ctx, g):
            x, y = ctx.saved_tensors
            return g * y * ctx.scale, g * x * ctx.scale, None

    x = T.tensor([1.0, 2.0], requires_grad=True)
    y = T.tensor([3.0, 4.0], requires_grad=True)
    out = Mul.apply(x, y, 2.0)
    assert out.grad_fn.name() == "MulBackward"
    out.sum().backward()
    close(x.grad, [6.0, 8.0])
    close(y.grad, [2.0, 4.0])
    assert seen == {"fwd_grad": False, "output": [6.0, 16.0]}


def test_double_backward_through_custom_function(T):
    class Cube(T.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x ** 3

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 3 * x ** 2 * g  # differentiable ops: create_graph works

    x = T.tensor([1.0, 2.0], requires_grad=True)
    (g,) = T.autograd.grad(Cube.apply(x).sum(), x, create_graph=True)
    assert g.requires_grad
    close(g, [3.0, 12.0])
    g.sum().backward()
    close(x.grad, [6.0, 12.0])


def test_once_differentiable(T):
    seen = []

    class Sq(T.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x ** 2

        @staticmethod
        @T.autograd.function.once_differentiable
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            seen.append((T.is_grad_enabled(), x.requires_grad))
            return 2 * x * g

    x = T.tensor([1.0, 2.0], requires_grad=True)
    (g,) = T.autograd.grad(Sq.apply(x).sum(), x, create_graph=True)
    close(g, [2.0, 4.0])
    assert not g.requires_grad and g.grad_fn is None
    assert seen == [(False, True)]  # grad mode off; saved x unpacks as x
    Sq.apply(x).sum().backward()
    close(x.grad, [2.0, 4.0])


def test_once_differentiable_exported(T):
    assert T.autograd.function.once_differentiable is not None
    assert T.autograd.Function is T.autograd.function.Function


def test_apply_on_output_of_custom_function_twice(T):
    Square = make_square(T)
    x = T.tensor([1.0, 2.0], requires_grad=True)
    y = Square.apply(Square.apply(x))  # x^4
    y.sum().backward()
    close(x.grad, [4.0, 32.0])


def test_function_output_is_a_new_tensor_and_leaf_input_unchanged(T):
    Square = make_square(T)
    x = T.tensor([1.0, 2.0], requires_grad=True)
    y = Square.apply(x)
    assert y is not x
    assert x.is_leaf and x.grad_fn is None and x._version == 0


def test_returning_an_input_as_is(T):
    class Ident(T.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return a

        @staticmethod
        def backward(ctx, g):
            return g * 3

    x = T.tensor([1.0, 2.0], requires_grad=True)
    y = Ident.apply(x)
    assert y is not x
    assert y.grad_fn.name() == "IdentBackward"
    (y * y).sum().backward()
    close(x.grad, [6.0, 12.0])


def test_non_tensor_output_passes_through(T):
    class NT(T.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return a * 2, 5

        @staticmethod
        def backward(ctx, g, g2):
            return g * 2

    x = T.tensor([1.0, 2.0], requires_grad=True)
    y, n = NT.apply(x)
    assert n == 5
    y.sum().backward()
    close(x.grad, [2.0, 2.0])


def test_apply_with_keyword_argument(T):
    class KW(T.autograd.Function):
        @staticmethod
        def forward(ctx, a, k=1.0):
            return a * k

        @staticmethod
        def backward(ctx, g):
            return g, None

    x = T.tensor([1.0, 2.0], requires_grad=True)
    close(KW.apply(x, k=2.0), [2.0, 4.0])


def test_gradient_dtype_cast_to_input_dtype(T):
    class Dt(T.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return a * 1

        @staticmethod
        def backward(ctx, g):
            return g.to(T.float64)

    x = T.tensor([1.0, 2.0], requires_grad=True)
    Dt.apply(x).sum().backward()
    assert x.grad.dtype == T.float32
    close(x.grad, [1.0, 1.0])


def test_nested_function_call_in_forward(T):
    class Inner(T.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return a * 5

        @staticmethod
        def backward(ctx, g):
            return g * 5

    class Outer(T.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return Inner.apply(a) * 2  # runs without recording a graph

        @staticmethod
        def backward(ctx, g):
            return g * 2

    x = T.tensor([1.0, 2.0], requires_grad=True)
    y = Outer.apply(x)
    assert y.grad_fn.name() == "OuterBackward"
    y.sum().backward()
    close(x.grad, [2.0, 2.0])


def test_save_for_backward_non_tensor(T):
    class SaveInt(T.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            ctx.save_for_backward(a, 3)
            return a * 1

        @staticmethod
        def backward(ctx, g):
            return g

    x = T.tensor([1.0, 2.0], requires_grad=True)
    with exact(TypeError,
               "save_for_backward can only save variables, but argument 1 is of type int"):
        SaveInt.apply(x)


def test_mark_dirty_on_leaf_requiring_grad(T):
    class DirtyLeaf(T.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            a.mul_(2)
            ctx.mark_dirty(a)
            return a

        @staticmethod
        def backward(ctx, g):
            return g * 2

    x = T.tensor([1.0, 2.0], requires_grad=True)
    with exact(RuntimeError,
               "a leaf Variable that requires grad has been used in an in-place operation."):
        DirtyLeaf.apply(x)


def test_integer_output_is_not_differentiable(T):
    class IntOut(T.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return a.argmax(), a * 2

        @staticmethod
        def backward(ctx, g1, g2):
            return g2 * 2

    x = T.tensor([1.0, 2.0], requires_grad=True)
    i, y = IntOut.apply(x)
    assert not i.requires_grad and i.grad_fn is None
    assert y.requires_grad
    y.sum().backward()
    close(x.grad, [2.0, 2.0])


def test_backward_returning_non_tensor(T):
    class Bad(T.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return a * 1

        @staticmethod
        def backward(ctx, g):
            return 3.0

    x = T.tensor([1.0, 2.0], requires_grad=True)
    with exact(RuntimeError, "expected Variable or None (got float)"):
        Bad.apply(x).sum().backward()


def test_saved_output_of_custom_function(T):
    class Saved2(T.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            y = a.exp()
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, g):
            (y,) = ctx.saved_tensors
            return g * y

    x = T.tensor([1.0, 2.0], requires_grad=True)
    y = Saved2.apply(x)
    (s,) = y.grad_fn.saved_tensors
    assert s is not y and s.grad_fn is y.grad_fn
    y.mul_(2)
    with pytest.raises(RuntimeError, match=re.escape(
            "[torch.FloatTensor [2]], which is output 0 of Saved2, is at version 1; expected "
            "version 0 instead.")):
        y.sum().backward()


def make_identity(T):
    class Id(T.autograd.Function):
        @staticmethod
        def forward(ctx, *args):
            return args if len(args) > 1 else args[0]

        @staticmethod
        def backward(ctx, *grads):
            return grads if len(grads) > 1 else grads[0]

    return Id


def test_non_differentiable_input_returned_as_is_is_a_new_alias(T):
    Id = make_identity(T)
    a = T.ones(2)
    r = Id.apply(a)
    assert r is not a and r._base is a and not r.requires_grad
    i = T.tensor([1, 2])
    w = T.ones(2, requires_grad=True)
    ri, rw = Id.apply(i, w)  # an integer input: no history even though w records one
    assert ri is not i and ri._base is i and ri.grad_fn is None
    assert rw.grad_fn is not None
    with T.no_grad():
        r2 = Id.apply(w)  # requires grad but nothing recorded: a detached alias
    assert r2 is not w and not r2.requires_grad and r2.grad_fn is None
    r.add_(1)
    assert a.tolist() == [2.0, 2.0] and a._version == 1


def test_marked_non_differentiable_input_comes_back_detached(T):
    class ND(T.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            ctx.mark_non_differentiable(a)
            return a

        @staticmethod
        def backward(ctx, g):
            return g

    x = T.ones(2, requires_grad=True)
    r = ND.apply(x)
    assert r is not x and not r.requires_grad and r.grad_fn is None


def test_input_returned_as_is_cannot_be_used_after_an_in_place_change(T):
    Id = make_identity(T)
    msg = VIEW_BASE_INPLACE_MSG.format("Id")
    base = T.ones(2, requires_grad=True).clone()
    v = Id.apply(base)
    assert v._base is base and v.grad_fn.name() == "IdBackward"
    base.mul_(2)
    assert v.requires_grad  # reading requires_grad does not touch the history
    with exact(RuntimeError, msg):
        v + 1
    with exact(RuntimeError, msg):
        _ = v.grad_fn
    with exact(RuntimeError, msg):
        v.sum().backward()
    with T.no_grad():
        assert (v + 1).tolist() == [3.0, 3.0]  # nothing recorded, nothing checked
    leaf = T.ones(2, requires_grad=True)
    v = Id.apply(leaf)
    with T.no_grad():
        v.mul_(2)  # the view itself, changed where no graph is recorded
    with exact(RuntimeError, msg):
        v * 2


def test_view_made_in_forward_is_a_custom_function_view(T):
    class First(T.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return a[:1]

        @staticmethod
        def backward(ctx, g):
            return T.cat([g, T.zeros(2)])

    x = T.ones(3, requires_grad=True).clone()
    s = First.apply(x)
    assert s._base is x and s.grad_fn.name() == "FirstBackward"
    with exact(RuntimeError, VIEW_INPLACE_MSG.format("First")):
        s.mul_(2)
    s.sum().backward(retain_graph=True)
    x.mul_(2)
    with exact(RuntimeError, VIEW_BASE_INPLACE_MSG.format("First")):
        s + 1


def test_mark_dirty_bumps_the_version_even_without_graph(T):
    class Dirty(T.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            a.mul_(2)
            ctx.mark_dirty(a)
            return a

        @staticmethod
        def backward(ctx, g):
            return g * 2

    b = T.ones(2)
    assert Dirty.apply(b) is b and b._version == 2 and b.grad_fn is None
    x = T.ones(2, requires_grad=True)
    with T.no_grad():
        r = Dirty.apply(x)
    assert r is not x and x._version == 2 and x.is_leaf and not r.requires_grad
    c = T.ones(2, requires_grad=True).clone()
    assert Dirty.apply(c) is c and c._version == 2 and c.grad_fn.name() == "DirtyBackward"


def test_mark_dirty_checks(T):
    class NotATensor(T.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            ctx.mark_dirty(3)
            return a * 1

        @staticmethod
        def backward(ctx, g):
            return g

    class NotAnInput(T.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            out = a * 2
            ctx.mark_dirty(out)
            return out

        @staticmethod
        def backward(ctx, g):
            return g * 2

    for x in (T.ones(2), T.ones(2, requires_grad=True)):
        with exact(RuntimeError, "mark_dirty can only accept variables, but argument "):
            NotATensor.apply(x)
    with pytest.warns(UserWarning, match=re.escape(
            "ctx.mark_dirty() received a tensor that was not an input. Only input Tensors that "
            "have been mutated should be passed to ctx.mark_dirty().")):
        out = NotAnInput.apply(T.ones(2, requires_grad=True))
    assert out.grad_fn.name() == "NotAnInputBackward"


def test_save_for_backward_is_checked_only_when_a_graph_is_recorded(T):
    class SaveInt(T.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            ctx.save_for_backward(a, None, 3)
            return a * 1

        @staticmethod
        def backward(ctx, g):
            return g

    assert SaveInt.apply(T.ones(2)).tolist() == [1.0, 1.0]
    with exact(TypeError,
               "save_for_backward can only save variables, but argument 2 is of type int"):
        SaveInt.apply(T.ones(2, requires_grad=True))


def test_saved_view_output_unpacks_as_a_new_view(T):
    class Save(T.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            y = a[:1]
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, g):
            (y,) = ctx.saved_tensors
            return T.cat([g * y, T.zeros(1)])

    x = T.tensor([3.0, 4.0], requires_grad=True)
    a = x * 1
    y = Save.apply(a)
    (s,) = y.grad_fn.saved_tensors
    assert s is not y and s.grad_fn is y.grad_fn and y._base is a
    y.sum().backward()
    close(x.grad, [3.0, 0.0])


def test_backward_returning_an_array_names_its_type(T):
    class Bad(T.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return a * 1

        @staticmethod
        def backward(ctx, g):
            return np.ones(2)

    with exact(RuntimeError, "expected Variable or None (got numpy.ndarray)"):
        Bad.apply(T.ones(2, requires_grad=True)).sum().backward()


def test_backward_runs_when_no_output_got_a_gradient(T):
    log = []

    def make(materialize):
        class F(T.autograd.Function):
            @staticmethod
            def forward(ctx, a):
                ctx.set_materialize_grads(materialize)
                return a * 1

            @staticmethod
            def backward(ctx, g):
                log.append(None if g is None else g.tolist())
                return g

        return F

    x = T.tensor([1.0], requires_grad=True)
    for materialize, want in ((True, [0.0]), (False, None)):
        e = make(materialize).apply(x) * 2
        e.grad_fn.register_hook(lambda gi, go: (None, None))  # nothing reaches F
        e.sum().backward()
        assert log[-1] == want
    close(x.grad, [0.0])


@pytest.mark.parametrize("name, shown", [("FooBackward3", "FooBackward3"),
                                         ("Backward2Foo", "Backward2Foo"), ("X", "X")])
def test_modified_saved_output_names_the_function(T, name, shown):
    # the node's name without its trailing "Backward" (torch strips "Backward<N>")
    def forward(ctx, a):
        y = a.exp()
        ctx.save_for_backward(y)
        return y

    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return g * y

    fn = type(name, (T.autograd.Function,),
              {"forward": staticmethod(forward), "backward": staticmethod(backward)})
    y = fn.apply(T.tensor([1.0, 2.0], requires_grad=True))
    y.mul_(2)
    with pytest.raises(RuntimeError, match=re.escape(f", which is output 0 of {shown}, is at")):
        y.sum().backward()
