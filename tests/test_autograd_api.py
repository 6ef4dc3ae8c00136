"""The autograd API surface: backward / autograd.backward / autograd.grad, double backward,
grad mode, requires_grad rules, detach / clone / .data / .to, is_leaf, grad_fn names and
edges, and Variable.

Every test runs the same program under disthook and (when installed) under torch 2.13 via
the ``T`` fixture, and checks hard-coded expected values, so the torch run validates the
expectations and the disthook run works without torch. Cases where disthook differs from
torch are marked ``xfail(strict=True)`` on the disthook parameter only.
"""
from __future__ import annotations

import importlib
import importlib.util
import re
import threading
import warnings

import numpy as np
import pytest

HAS_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")
LIBS = ["disthook", pytest.param("torch", marks=needs_torch)]


def libs(xfail: str | None = None):
    """Parametrize ``T`` over disthook and torch; ``xfail`` marks only the disthook case."""
    dh = "disthook" if xfail is None else pytest.param(
        "disthook", marks=pytest.mark.xfail(strict=True, reason=xfail))
    return pytest.mark.parametrize("T", [dh, pytest.param("torch", marks=needs_torch)],
                                   indirect=True)


@pytest.fixture(params=LIBS)
def T(request):
    return importlib.import_module(request.param)


def exact(exc, msg: str):
    return pytest.raises(exc, match="^" + re.escape(msg) + "$")


def val(t) -> np.ndarray:
    return np.array(t.tolist(), dtype=np.float64)


def close(t, expected, rtol=1e-6, atol=1e-6):
    np.testing.assert_allclose(val(t), np.asarray(expected, dtype=np.float64), rtol=rtol,
                               atol=atol)


SECOND_BACKWARD = (
    "Trying to backward through the graph a second time (or directly access saved tensors "
    "after they have already been freed). Saved intermediate values of the graph are freed "
    "when you call .backward() or autograd.grad(). Specify retain_graph=True if you need to "
    "backward through the graph a second time or if you need to access saved tensors after "
    "calling backward."
)
NON_LEAF_REQUIRES_GRAD = (
    "you can only change requires_grad flags of leaf variables. If you want to use a computed "
    "variable in a subgraph that doesn't require differentiation use var_no_grad = "
    "var.detach()."
)
UNUSED = ("The differentiated Tensor at index {} appears to not have been used in the graph. "
          "Set allow_unused=True if this is the desired behavior.")


# ---- backward(): seeds, shapes, roots ------------------------------------------------------

def test_backward_gradient_for_non_scalar_root(T):
    x = T.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * x
    y.backward(gradient=T.tensor([1.0, 0.1, 0.01]))
    close(x.grad, [2.0, 0.4, 0.06])
    y2 = x * 3
    y2.backward(T.ones(3))  # positional
    close(x.grad, [5.0, 3.4, 3.06])


def test_backward_gradient_for_scalar_root_scales(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    (x * x).sum().backward(T.tensor(0.5))
    close(x.grad, [1.0, 2.0])


def test_backward_gradient_shape_mismatch(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    with exact(RuntimeError, "Mismatch in shape: grad_output[0] has a shape of "
               "torch.Size([3]) and output[0] has a shape of torch.Size([2])."):
        y.backward(T.ones(3))
    with exact(RuntimeError, "Mismatch in shape: grad_output[0] has a shape of "
               "torch.Size([2]) and output[0] has a shape of torch.Size([])."):
        y.sum().backward(T.ones(2))
    assert x.grad is None


def test_backward_non_scalar_without_gradient(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    with exact(RuntimeError, "grad can be implicitly created only for scalar outputs"):
        (x * 2).backward()
    # a one-element non-0-d tensor counts as a scalar
    (x[:1] * 2).backward()
    close(x.grad, [2.0, 0.0])


def test_backward_root_without_grad(T):
    with exact(RuntimeError,
               "element 0 of tensors does not require grad and does not have a grad_fn"):
        T.ones(2).sum().backward()
    x = T.ones(2, requires_grad=True)
    with T.no_grad():
        y = (x * 2).sum()
    with exact(RuntimeError,
               "element 0 of tensors does not require grad and does not have a grad_fn"):
        y.backward()


def test_autograd_backward_second_root_without_grad(T):
    x = T.ones(2, requires_grad=True)
    with exact(RuntimeError,
               "element 1 of tensors does not require grad and does not have a grad_fn"):
        T.autograd.backward([(x * 2).sum(), T.ones(()).sum()])


def test_backward_on_leaf_root(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    x.backward(T.tensor([3.0, 4.0]))
    close(x.grad, [3.0, 4.0])


def test_backward_integer_gradient_is_accepted(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    (x * 2).backward(T.ones(2, dtype=T.int64))
    assert x.grad.dtype == T.float32
    close(x.grad, [2.0, 2.0])


def test_backward_returns_none(T):
    x = T.ones(2, requires_grad=True)
    assert (x * 2).sum().backward() is None


# ---- retain_graph ----------------------------------------------------------------------------

def test_retain_graph_accumulates_and_second_backward_raises(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    y = (x * x).sum()
    y.backward(retain_graph=True)
    close(x.grad, [2.0, 4.0])
    y.backward(retain_graph=True)
    close(x.grad, [4.0, 8.0])
    y.backward()  # frees the graph
    close(x.grad, [6.0, 8.0 + 4.0])
    with exact(RuntimeError, SECOND_BACKWARD):
        y.backward()
    close(x.grad, [6.0, 12.0])


def test_second_backward_without_saved_tensors_is_allowed(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    y = (x + 1).sum()
    y.backward()
    y.backward()
    close(x.grad, [2.0, 2.0])


@pytest.mark.parametrize("op", ["exp", "mul_self", "sigmoid", "mm"])
def test_second_backward_through_saved_tensors_raises(T, op):
    x = T.tensor([[0.5, -1.0], [2.0, 0.25]], requires_grad=True)
    if op == "exp":
        y = x.exp()
    elif op == "mul_self":
        y = x * x
    elif op == "sigmoid":
        y = x.sigmoid()
    else:
        y = x @ x
    s = y.sum()
    s.backward()
    with exact(RuntimeError, SECOND_BACKWARD):
        s.backward()


def test_retain_graph_false_frees_only_the_traversed_part(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    h = x.exp()
    a = (h * 2).sum()
    b = (h * h).sum()
    a.backward()
    # h's ExpBackward0 was freed by the first backward: b's path goes through it
    with exact(RuntimeError, SECOND_BACKWARD):
        b.backward()


SECOND_BACKWARD_TABLE = {
    # program: does a second backward() without retain_graph raise? (measured on torch 2.13)
    "mul_scalar": (lambda x, T: (x * 2).sum(), True),
    "div_scalar": (lambda x, T: (x / 2).sum(), True),
    "mul_const": (lambda x, T: (x * T.ones(2)).sum(), True),
    "pow": (lambda x, T: (x ** 2).sum(), True),
    "relu": (lambda x, T: x.relu().sum(), True),
    "abs": (lambda x, T: x.abs().sum(), True),
    "exp": (lambda x, T: x.exp().sum(), True),
    "max": (lambda x, T: x.max(), True),
    "clamp": (lambda x, T: x.clamp(0, 1).sum(), True),
    "matvec": (lambda x, T: x @ T.ones(2), True),
    "add_scalar": (lambda x, T: (x + 1).sum(), False),
    "sum": (lambda x, T: x.sum(), False),
    "mean": (lambda x, T: x.mean(), False),
    "neg": (lambda x, T: (-x).sum(), False),
    "view": (lambda x, T: x.view(2, 1).sum(), False),
    "t": (lambda x, T: x.view(1, 2).t().sum(), False),
    "select": (lambda x, T: x[0], False),
    "clone": (lambda x, T: x.clone().sum(), False),
    "to64": (lambda x, T: x.to(T.float64).sum(), False),
    "expand": (lambda x, T: x.expand(3, 2).sum(), False),
    "cat": (lambda x, T: T.cat([x, x]).sum(), False),
}


@pytest.mark.parametrize("case", list(SECOND_BACKWARD_TABLE))
def test_second_backward_table(T, case):
    prog, raises = SECOND_BACKWARD_TABLE[case]
    x = T.tensor([1.0, 2.0], requires_grad=True)
    y = prog(x, T)
    y.backward()
    if raises:
        with exact(RuntimeError, SECOND_BACKWARD):
            y.backward()
    else:
        y.backward()


@pytest.mark.filterwarnings("ignore:Using backward\\(\\) with create_graph=True")
def test_create_graph_implies_retain_graph(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    y = (x ** 3).sum()
    y.backward(create_graph=True)
    y.backward(create_graph=True)  # still retained
    close(x.grad, [6.0, 24.0])
    assert x.grad.requires_grad


def test_grad_also_frees_graph(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    y = (x * x).sum()
    (g,) = T.autograd.grad(y, x)
    close(g, [2.0, 4.0])
    with exact(RuntimeError, SECOND_BACKWARD):
        T.autograd.grad(y, x)
    y2 = (x * x).sum()
    T.autograd.grad(y2, x, retain_graph=True)
    (g2,) = T.autograd.grad(y2, x)
    close(g2, [2.0, 4.0])


# ---- backward(inputs=...) --------------------------------------------------------------------

def test_backward_inputs_leaf_subset(T):
    a = T.tensor([1.0, 2.0], requires_grad=True)
    b = T.tensor([3.0, 4.0], requires_grad=True)
    c = T.tensor([5.0, 6.0], requires_grad=True)
    out = (a * b * c).sum()
    out.backward(inputs=[a, c], retain_graph=True)
    close(a.grad, [15.0, 24.0])
    close(c.grad, [3.0, 8.0])
    assert b.grad is None
    out.backward(inputs=b)  # a single tensor
    close(b.grad, [5.0, 12.0])
    close(a.grad, [15.0, 24.0])


def test_backward_inputs_non_leaf_gets_grad(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    w = T.tensor([3.0, 4.0], requires_grad=True)
    h = x * 2
    out = (h * w).sum()
    out.backward(inputs=[h])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "non-leaf .grad" warning: it is populated
        close(h.grad, [3.0, 4.0])
    assert x.grad is None
    assert w.grad is None


def test_backward_inputs_non_leaf_starts_retaining_grad(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    h = x * 2
    out = (h * 3).sum()
    out.backward(inputs=[h], retain_graph=True)
    assert h.retains_grad
    out.backward()
    close(h.grad, [6.0, 6.0])
    close(x.grad, [6.0, 6.0])


def test_backward_inputs_mixed_leaf_and_non_leaf(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    h = x.exp()
    out = (h * x).sum()  # d/dx = h + h*x ; d/dh = x
    out.backward(inputs=[h, x])
    close(h.grad, [1.0, 2.0])
    e = np.exp([1.0, 2.0])
    close(x.grad, e + e * np.array([1.0, 2.0]), rtol=1e-5)


def test_backward_inputs_accumulate_into_non_leaf(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    h = x * 1
    out = (h * 3).sum()
    out.backward(inputs=[h], retain_graph=True)
    out.backward(inputs=[h])
    close(h.grad, [6.0, 6.0])
    assert x.grad is None


def test_backward_inputs_empty(T):
    x = T.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="cannot be empty"):
        (x * 2).sum().backward(inputs=[])


def test_backward_inputs_empty_exact_message(T):
    x = T.ones(2, requires_grad=True)
    with exact(RuntimeError, "`inputs` argument to `backward()` cannot be empty."):
        (x * 2).sum().backward(inputs=[])


def test_backward_inputs_not_requiring_grad(T):
    x = T.ones(2, requires_grad=True)
    with exact(RuntimeError, "can't retain_grad on Tensor that has requires_grad=False"):
        (x * 2).sum().backward(inputs=[T.ones(2)])


# ---- autograd.backward with several roots ---------------------------------------------------

def test_autograd_backward_several_roots(T):
    a = T.tensor([1.0, 2.0], requires_grad=True)
    b = T.tensor([3.0, 4.0], requires_grad=True)
    y1 = a * b
    y2 = (a + b).sum()
    T.autograd.backward([y1, y2], [T.tensor([1.0, 10.0]), T.tensor(2.0)])
    close(a.grad, [3.0 + 2.0, 40.0 + 2.0])
    close(b.grad, [1.0 + 2.0, 20.0 + 2.0])


def test_autograd_backward_dependent_roots(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    y1 = x * 2
    y2 = y1 * 3  # depends on y1
    y1.retain_grad()
    T.autograd.backward([y1, y2], [T.tensor([1.0, 1.0]), T.tensor([10.0, 100.0])])
    close(x.grad, [2 * (1 + 30), 2 * (1 + 300)])
    close(y1.grad, [31.0, 301.0])  # seed + what flows from y2


def test_autograd_backward_same_root_twice(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    y = x * x
    T.autograd.backward([y, y], [T.ones(2), T.tensor([2.0, 3.0])])
    close(x.grad, [2 * 1 * 3, 2 * 2 * 4])


def test_autograd_backward_scalar_roots_without_grads(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    T.autograd.backward([(x * 2).sum(), (x * x).sum()])
    close(x.grad, [4.0, 6.0])
    T.autograd.backward((x * 5).sum())  # a single tensor
    close(x.grad, [9.0, 11.0])


def test_autograd_backward_grad_tensors_none_entries(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    T.autograd.backward([(x * 2).sum(), x * 3], [None, T.tensor([1.0, -1.0])])
    close(x.grad, [5.0, -1.0])


def test_autograd_backward_mismatch_in_second_root(T):
    # (torch 2.13 itself fails here with "Boolean value of Tensor with more than one value is
    # ambiguous" instead of the Mismatch message, so only the type is checked)
    x = T.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError):
        T.autograd.backward([(x * 2).sum(), x * 3], [T.tensor(1.0), T.ones(3)])
    assert x.grad is None


def test_autograd_backward_count_mismatch(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    with exact(RuntimeError, "got 2 tensors and 1 gradients"):
        T.autograd.backward([(x * 2).sum(), (x * 3).sum()], [T.ones(())])


# ---- autograd.grad ---------------------------------------------------------------------------

def test_grad_returns_tuple_and_leaves_dot_grad_alone(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    x.grad = T.tensor([100.0, 100.0])
    before = x.grad
    out = T.autograd.grad((x ** 2).sum(), x)
    assert isinstance(out, tuple) and len(out) == 1
    close(out[0], [2.0, 4.0])
    assert x.grad is before
    close(x.grad, [100.0, 100.0])
    assert not out[0].requires_grad


def test_grad_does_not_populate_grads_of_other_leaves(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    w = T.tensor([3.0, 4.0], requires_grad=True)
    h = x * w
    h.retain_grad()
    T.autograd.grad(h.sum(), [x])
    assert x.grad is None
    assert w.grad is None
    close(h.grad, [1.0, 1.0])  # retain_grad still fires: h's node ran


def test_grad_multiple_inputs_and_outputs(T):
    a = T.tensor([1.0, 2.0], requires_grad=True)
    b = T.tensor([3.0, -1.0], requires_grad=True)
    y1 = a * b
    y2 = (a * a).sum()
    ga, gb = T.autograd.grad([y1, y2], [a, b],
                             grad_outputs=[T.tensor([1.0, 2.0]), T.tensor(3.0)])
    close(ga, [3.0 * 1 + 6 * 1.0, -1.0 * 2 + 6 * 2.0])
    close(gb, [1.0, 4.0])


def test_grad_non_scalar_output_needs_grad_outputs(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    with exact(RuntimeError, "grad can be implicitly created only for scalar outputs"):
        T.autograd.grad(x * 2, x)
    with exact(RuntimeError, "Mismatch in shape: grad_output[0] has a shape of "
               "torch.Size([3]) and output[0] has a shape of torch.Size([2])."):
        T.autograd.grad(x * 2, x, grad_outputs=T.ones(3))


def test_grad_wrt_non_leaf(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    h = x * 3
    out = (h * h).sum()
    (gh,) = T.autograd.grad(out, h)
    close(gh, [6.0, 12.0])
    assert x.grad is None


def test_grad_same_input_twice(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    g1, g2 = T.autograd.grad((x * x).sum(), [x, x])
    close(g1, [2.0, 4.0])
    close(g2, [2.0, 4.0])


def test_grad_unused_input_error(T):
    a = T.ones(2, requires_grad=True)
    b = T.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="appears to not have been used in the graph. "
                       "Set allow_unused=True if this is the desired behavior."):
        T.autograd.grad((a * 2).sum(), [a, b])


def test_grad_unused_input_error_exact(T):
    a = T.ones(2, requires_grad=True)
    b = T.ones(2, requires_grad=True)
    with exact(RuntimeError, UNUSED.format(1)):
        T.autograd.grad((a * 2).sum(), [a, b])
    with exact(RuntimeError, UNUSED.format(0)):
        T.autograd.grad((a * 2).sum(), b)


def test_grad_allow_unused_gives_none(T):
    a = T.tensor([1.0, 2.0], requires_grad=True)
    b = T.ones(2, requires_grad=True)
    ga, gb = T.autograd.grad((a * 2).sum(), [a, b], allow_unused=True)
    close(ga, [2.0, 2.0])
    assert gb is None


def test_grad_materialize_grads(T):
    a = T.tensor([1.0, 2.0], requires_grad=True)
    b = T.ones(3, requires_grad=True)
    ga, gb = T.autograd.grad((a * 2).sum(), [a, b], materialize_grads=True)
    close(ga, [2.0, 2.0])
    assert gb.shape == (3,) and gb.dtype == T.float32
    close(gb, [0.0, 0.0, 0.0])
    ga, gb = T.autograd.grad((a * 2).sum(), [a, b], materialize_grads=True, allow_unused=True)
    close(gb, [0.0, 0.0, 0.0])
    with exact(ValueError, "Expected allow_unused to be True or not passed when "
               "materialize_grads=True, but got: allow_unused=False."):
        T.autograd.grad((a * 2).sum(), [a, b], materialize_grads=True, allow_unused=False)


def test_grad_input_not_requiring_grad(T):
    a = T.ones(2, requires_grad=True)
    with exact(RuntimeError, "One of the differentiated Tensors does not require grad"):
        T.autograd.grad((a * 2).sum(), [a, T.ones(2)])


def test_grad_output_not_requiring_grad(T):
    a = T.ones(2, requires_grad=True)
    with exact(RuntimeError,
               "element 0 of tensors does not require grad and does not have a grad_fn"):
        T.autograd.grad(T.ones(2).sum(), [a])


def test_grad_through_intermediate_input_stops_there(T):
    # grad wrt h where h is also upstream of another used path: only d out / d h
    x = T.tensor([1.0, 2.0], requires_grad=True)
    h = x * x
    out = (h * x).sum()
    gh, gx = T.autograd.grad(out, [h, x])
    close(gh, [1.0, 2.0])
    close(gx, [3.0, 12.0])  # d(x^3)/dx


def test_grad_accepts_generator_inputs(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    w = T.tensor([3.0, 4.0], requires_grad=True)
    gx, gw = T.autograd.grad((x * w).sum(), (p for p in [x, w]))
    close(gx, [3.0, 4.0])
    close(gw, [1.0, 2.0])


def test_backward_accepts_generator_inputs(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    (x * x).sum().backward(inputs=(p for p in [x]))
    close(x.grad, [2.0, 4.0])


def test_grad_empty_inputs_message(T):
    x = T.ones(2, requires_grad=True)
    with exact(RuntimeError, "`inputs` argument to `grad()` cannot be empty."):
        T.autograd.grad((x * 2).sum(), [])


def test_grad_and_backward_accept_dict_inputs(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    w = T.tensor([3.0, 4.0], requires_grad=True)
    out = T.autograd.grad((x * w).sum(), {"x": x, "w": w}, retain_graph=True)
    assert isinstance(out, dict) and list(out) == ["x", "w"]
    close(out["x"], [3.0, 4.0])
    close(out["w"], [1.0, 2.0])
    (x * w).sum().backward(inputs={"w": w})
    close(w.grad, [1.0, 2.0])
    assert x.grad is None


def test_inputs_mapping_that_is_not_a_dict(T):
    import types

    x = T.ones(2, requires_grad=True)
    with exact(TypeError, "`inputs` argument to `grad()` must be a dict, not mappingproxy. "
               "Other Mapping types are not supported."):
        T.autograd.grad((x * 2).sum(), types.MappingProxyType({"x": x}))
    with exact(TypeError, "`inputs` argument to `backward()` must be a dict, not "
               "mappingproxy. Other Mapping types are not supported."):
        (x * 2).sum().backward(inputs=types.MappingProxyType({"x": x}))
    with exact(RuntimeError, "`inputs` argument to `backward()` cannot be empty."):
        (x * 2).sum().backward(inputs={})


def test_inputs_that_are_not_tensors(T):
    x = T.ones(2, requires_grad=True)
    with exact(RuntimeError, "all inputs have to be Tensors or GradientEdges, but got int"):
        T.autograd.grad((x * 2).sum(), [x, 3])
    with exact(RuntimeError, "all inputs have to be Tensors or GradientEdges, but got int"):
        (x * 2).sum().backward(inputs=[3])


def test_roots_and_grad_tensors_may_be_generators(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    T.autograd.backward((t for t in [x * 2]), (g for g in [T.tensor([1.0, 3.0])]))
    close(x.grad, [2.0, 6.0])
    (g,) = T.autograd.grad(iter([(x * x).sum()]), x, iter([None]))
    close(g, [2.0, 4.0])


def test_grad_tensors_must_be_tensors_or_none(T):
    x = T.ones(2, requires_grad=True)
    with exact(TypeError, "gradients can be either Tensors or None, but got float"):
        T.autograd.backward([(x * 2).sum()], [3.0])
    with pytest.raises(TypeError, match="'float' object is not iterable"):
        (x * 2).sum().backward(3.0)


def test_grad_variables_is_deprecated(T):
    x = T.ones(2, requires_grad=True)
    with pytest.warns(FutureWarning, match="^`grad_variables` is deprecated. Use "
                      "`grad_tensors` instead.$"):
        T.autograd.backward([(x * 2).sum()], grad_variables=[None])
    close(x.grad, [2.0, 2.0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        with exact(RuntimeError, "`grad_tensors` and `grad_variables` (deprecated) arguments "
                   "both passed to `backward()`. Please only use `grad_tensors`."):
            T.autograd.backward([(x * 2).sum()], [None], grad_variables=[None])


def test_seed_shape_is_checked_before_requires_grad(T):
    # torch checks the given gradients (in Python) before the roots (in its engine)
    with exact(RuntimeError, "Mismatch in shape: grad_output[0] has a shape of "
               "torch.Size([3]) and output[0] has a shape of torch.Size([2])."):
        T.autograd.backward([T.ones(2)], [T.ones(3)])
    with exact(RuntimeError,
               "element 0 of tensors does not require grad and does not have a grad_fn"):
        T.autograd.backward([T.ones(2)])


def test_grad_with_no_outputs_reports_unused_inputs(T):
    x = T.ones(2, requires_grad=True)
    with exact(RuntimeError, UNUSED.format(0)):
        T.autograd.grad([], [x])
    assert T.autograd.grad([], [x], allow_unused=True) == (None,)
    T.autograd.backward([])  # nothing to do


def test_backward_inputs_unreachable_non_leaf_still_retains_grad(T):
    x = T.ones(2, requires_grad=True)
    h = x * 2
    (x * 3).sum().backward(inputs=[h])
    assert h.retains_grad
    assert h.grad is None and x.grad is None


def test_single_root_tensor_hooks_fire_even_when_no_input_is_reached(T):
    # torch starts from a lone root's node even when it leads to no input: the root's tensor
    # hooks fire, its node does not run; with several roots, unneeded roots are not visited
    x = T.ones(2, requires_grad=True)
    u = T.ones(2, requires_grad=True)
    out = (x * 3).sum()
    log = []
    out.register_hook(lambda g: log.append("tensor"))
    out.grad_fn.register_prehook(lambda go: log.append("pre"))
    out.grad_fn.register_hook(lambda gi, go: log.append("post"))
    assert T.autograd.grad(out, [u], allow_unused=True, retain_graph=True) == (None,)
    assert log == ["tensor"]
    out.backward(inputs=[u], retain_graph=True)
    assert log == ["tensor", "tensor"]
    assert u.grad is None and x.grad is None
    assert T.autograd.grad([out, out * 1], [u], allow_unused=True) == (None,)
    assert log == ["tensor", "tensor"]


def test_grad_with_scalar_grad_output(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    (g,) = T.autograd.grad((x * 2).sum(), x, grad_outputs=T.tensor(3.0))
    close(g, [6.0, 6.0])
    (g,) = T.autograd.grad([(x * 2).sum()], [x], grad_outputs=[None])
    close(g, [2.0, 2.0])


def test_grad_and_backward_work_under_no_grad(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    y = (x * x).sum()
    with T.no_grad():
        (g,) = T.autograd.grad(y, x, create_graph=True, retain_graph=True)
        y.backward()
        assert not T.is_grad_enabled()
    close(g, [2.0, 4.0])
    assert g.requires_grad  # create_graph records the backward graph regardless of grad mode
    close(x.grad, [2.0, 4.0])


def test_float64_seed_for_float32_output(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    (x * 2).backward(T.ones(2, dtype=T.float64))
    assert x.grad.dtype == T.float32
    close(x.grad, [2.0, 2.0])


# ---- create_graph / double backward ---------------------------------------------------------

def test_double_backward_cubic(T):
    x = T.tensor([1.0, -2.0, 0.5], requires_grad=True)
    (g,) = T.autograd.grad((x ** 3).sum(), x, create_graph=True)
    assert g.requires_grad and g.grad_fn is not None
    close(g, [3.0, 12.0, 0.75])
    g.sum().backward()
    close(x.grad, [6.0, -12.0, 3.0])


def test_third_derivative(T):
    x = T.tensor([2.0], requires_grad=True)
    y = x ** 4
    (g1,) = T.autograd.grad(y, x, create_graph=True)
    (g2,) = T.autograd.grad(g1, x, create_graph=True)
    (g3,) = T.autograd.grad(g2, x)
    close(g1, [32.0])
    close(g2, [48.0])
    close(g3, [48.0])


def test_grad_without_create_graph_is_constant(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    (g,) = T.autograd.grad((x ** 3).sum(), x)
    assert not g.requires_grad and g.grad_fn is None


def _penalty_setup(T):
    x = T.tensor([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]], dtype=T.float64, requires_grad=True)
    w = T.tensor([[0.1, -0.2], [0.3, 0.4], [-0.5, 0.6]], dtype=T.float64, requires_grad=True)
    return x, w


def _penalty_numpy(xv, wv):
    """||d/dx sum(tanh(x @ w))||^2 and its gradient w.r.t. w, by hand."""
    t = np.tanh(xv @ wv)
    s = 1 - t ** 2                  # tanh'
    gx = s @ wv.T                   # dL/dx
    p = (gx ** 2).sum()
    # dp/dw: gx = s @ w.T, s depends on w through z = x @ w
    dgx = 2 * gx                    # dp/dgx
    d_wT = s.T @ dgx                # from gx = s @ w.T (w.T part): dp/dw^T = s^T dgx -> (2,3)
    ds = dgx @ wv                   # (2,2)
    dz = ds * (-2 * t * s)          # s = 1 - tanh(z)^2
    dw = d_wT.T + xv.T @ dz
    return p, dw


def test_gradient_penalty(T):
    x, w = _penalty_setup(T)
    loss = (x @ w).tanh().sum()
    (gx,) = T.autograd.grad(loss, x, create_graph=True)
    penalty = (gx ** 2).sum()
    penalty.backward()
    p_ref, dw_ref = _penalty_numpy(np.array(x.tolist()), np.array(w.tolist()))
    np.testing.assert_allclose(penalty.item(), p_ref, rtol=1e-12)
    close(w.grad, dw_ref, rtol=1e-10, atol=1e-12)
    # x also gets a second-order gradient (grad of the penalty wrt x)
    assert x.grad is not None and x.grad.shape == (2, 3)


def test_gradient_penalty_matches_finite_differences(T):
    x, w = _penalty_setup(T)
    loss = (x @ w).tanh().sum()
    (gx,) = T.autograd.grad(loss, x, create_graph=True)
    (gx ** 2).sum().backward()
    xv, wv = np.array(x.tolist()), np.array(w.tolist())
    eps = 1e-6
    num = np.zeros_like(xv)
    for i in np.ndindex(xv.shape):
        d = np.zeros_like(xv)
        d[i] = eps
        num[i] = (_penalty_numpy(xv + d, wv)[0] - _penalty_numpy(xv - d, wv)[0]) / (2 * eps)
    close(x.grad, num, rtol=1e-6, atol=1e-8)


def test_hessian_vector_product_mlp(T):
    W1 = np.array([[0.2, -0.4, 0.1], [0.5, 0.3, -0.2], [-0.1, 0.6, 0.4], [0.3, -0.3, 0.2]])
    b1 = np.array([0.1, -0.2, 0.05, 0.0])
    w2 = np.array([1.0, -2.0, 0.5, 1.5])
    xv = np.array([0.3, -0.7, 1.1])
    vv = np.array([1.0, 0.5, -1.0])
    x = T.tensor(xv.tolist(), dtype=T.float64, requires_grad=True)
    v = T.tensor(vv.tolist(), dtype=T.float64)
    W1t = T.tensor(W1.tolist(), dtype=T.float64, requires_grad=True)
    b1t = T.tensor(b1.tolist(), dtype=T.float64)
    w2t = T.tensor(w2.tolist(), dtype=T.float64)
    f = ((W1t @ x + b1t).tanh() * w2t).sum()
    (g,) = T.autograd.grad(f, x, create_graph=True)
    (hv,) = T.autograd.grad((g * v).sum(), x, retain_graph=True)
    # by hand: grad = W1^T (w2 * (1 - t^2)); Hessian = W1^T diag(w2 * -2 t (1 - t^2)) W1
    t = np.tanh(W1 @ xv + b1)
    close(g, W1.T @ (w2 * (1 - t ** 2)), rtol=1e-12)
    H = W1.T @ np.diag(w2 * -2 * t * (1 - t ** 2)) @ W1
    close(hv, H @ vv, rtol=1e-10, atol=1e-12)
    # the same product via backward(): accumulates into x.grad (and W1's)
    (g * v).sum().backward()
    close(x.grad, H @ vv, rtol=1e-10, atol=1e-12)
    assert W1t.grad is not None and W1t.grad.shape == (4, 3)


def test_double_backward_create_graph_grad_has_graph(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    y = (x.sin() * x).sum()
    (g,) = T.autograd.grad(y, x, create_graph=True)
    xv = np.array([1.0, 2.0])
    close(g, np.cos(xv) * xv + np.sin(xv), rtol=1e-6)
    (h,) = T.autograd.grad(g.sum(), x)
    close(h, -np.sin(xv) * xv + 2 * np.cos(xv), rtol=1e-5)


# ---- grad mode -------------------------------------------------------------------------------

def test_no_grad_context_manager(T):
    x = T.ones(2, requires_grad=True)
    assert T.is_grad_enabled()
    with T.no_grad():
        assert not T.is_grad_enabled()
        y = x * 2
        z = x.exp().sum()
    assert T.is_grad_enabled()
    for t in (y, z):
        assert not t.requires_grad
        assert t.grad_fn is None
        assert t.is_leaf
    assert (x * 2).requires_grad


def test_no_grad_result_cannot_backward(T):
    x = T.ones(2, requires_grad=True)
    with T.no_grad():
        y = (x * 2).sum()
    with exact(RuntimeError,
               "element 0 of tensors does not require grad and does not have a grad_fn"):
        y.backward()


def test_no_grad_enter_returns_none(T):
    with T.no_grad() as ctx:
        assert ctx is None


def test_no_grad_decorator_with_parentheses(T):
    @T.no_grad()
    def f(x):
        return T.is_grad_enabled(), x * 2

    x = T.ones(2, requires_grad=True)
    enabled, y = f(x)
    assert not enabled and not y.requires_grad
    assert T.is_grad_enabled()
    assert f.__name__ == "f"


def test_no_grad_decorator_without_parentheses(T):
    @T.no_grad
    def f(x):
        return T.is_grad_enabled(), x * 2

    enabled, y = f(T.ones(2, requires_grad=True))
    assert not enabled and not y.requires_grad
    assert T.is_grad_enabled()


def test_no_grad_decorates_generator(T):
    @T.no_grad()
    def gen():
        yield T.is_grad_enabled()
        yield T.is_grad_enabled()

    assert list(gen()) == [False, False]
    assert T.is_grad_enabled()


def test_enable_grad_inside_no_grad(T):
    x = T.ones(2, requires_grad=True)
    with T.no_grad():
        with T.enable_grad():
            assert T.is_grad_enabled()
            y = x * 2
        assert not T.is_grad_enabled()
        z = x * 2
    assert y.requires_grad and y.grad_fn is not None
    assert not z.requires_grad


def test_enable_grad_decorator(T):
    @T.enable_grad()
    def f(x):
        return x * 2

    x = T.ones(2, requires_grad=True)
    with T.no_grad():
        y = f(x)
        assert not T.is_grad_enabled()
    assert y.requires_grad


def test_set_grad_enabled_function_form(T):
    T.set_grad_enabled(False)
    try:
        assert not T.is_grad_enabled()
        x = T.ones(2, requires_grad=True)
        assert not (x * 2).requires_grad
    finally:
        T.set_grad_enabled(True)
    assert T.is_grad_enabled()


def test_set_grad_enabled_context_manager(T):
    x = T.ones(2, requires_grad=True)
    with T.set_grad_enabled(False):
        assert not T.is_grad_enabled()
        assert not (x * 2).requires_grad
        with T.set_grad_enabled(True):
            assert (x * 2).requires_grad
        assert not T.is_grad_enabled()
    assert T.is_grad_enabled()
    with T.no_grad():
        with T.set_grad_enabled(True):
            assert T.is_grad_enabled()
        assert not T.is_grad_enabled()


def test_set_grad_enabled_decorator(T):
    @T.set_grad_enabled(False)
    def f():
        return T.is_grad_enabled()

    T.set_grad_enabled(True)  # (see the next test for the mode right after decorating)
    assert f() is False
    assert T.is_grad_enabled()


def test_set_grad_enabled_decorator_restores_mode_at_definition(T):
    @T.set_grad_enabled(False)
    def f():
        return T.is_grad_enabled()

    enabled_after_def = T.is_grad_enabled()
    T.set_grad_enabled(True)
    assert enabled_after_def


def test_grad_mode_nesting_and_exception(T):
    with T.no_grad():
        with T.no_grad():
            assert not T.is_grad_enabled()
        assert not T.is_grad_enabled()
        with T.enable_grad():
            with T.no_grad():
                assert not T.is_grad_enabled()
            assert T.is_grad_enabled()
    assert T.is_grad_enabled()
    with pytest.raises(ValueError), T.no_grad():
        raise ValueError("boom")
    assert T.is_grad_enabled()


def test_no_grad_instance_reusable(T):
    ng = T.no_grad()
    with ng:
        assert not T.is_grad_enabled()
    assert T.is_grad_enabled()
    with ng:
        assert not T.is_grad_enabled()
    assert T.is_grad_enabled()


def test_grad_mode_is_thread_local(T):
    seen = {}

    def worker():
        seen["start"] = T.is_grad_enabled()
        T.set_grad_enabled(False)
        seen["after_set"] = T.is_grad_enabled()
        x = T.ones(2, requires_grad=True)
        seen["records"] = (x * 2).requires_grad

    with T.no_grad():
        th = threading.Thread(target=worker)
        th.start()
        th.join()
        assert not T.is_grad_enabled()
    assert seen == {"start": True, "after_set": False, "records": False}
    assert T.is_grad_enabled()


def test_inference_mode(T):
    x = T.ones(2, requires_grad=True)
    with T.inference_mode():
        assert not T.is_grad_enabled()
        y = x * 2
    assert not y.requires_grad and y.grad_fn is None
    assert T.is_grad_enabled()
    with T.inference_mode(False):
        assert T.is_grad_enabled()

    @T.inference_mode()
    def f():
        return (x * 2).requires_grad

    assert f() is False


def test_is_inference_mode_enabled(T):
    assert T.is_inference_mode_enabled() is False
    with T.inference_mode():
        assert T.is_inference_mode_enabled() is True


def test_inference_mode_nesting_and_bare_decorators(T):
    with T.inference_mode():
        with T.inference_mode(False):
            assert T.is_grad_enabled() and not T.is_inference_mode_enabled()
        with T.enable_grad():
            assert T.is_grad_enabled() and T.is_inference_mode_enabled()
    assert T.is_grad_enabled() and not T.is_inference_mode_enabled()

    @T.inference_mode
    def f():
        return T.is_inference_mode_enabled(), T.is_grad_enabled()

    @T.enable_grad
    def g():
        return T.is_grad_enabled()

    assert f() == (True, False)
    with T.no_grad():
        assert g() is True


def test_decorated_generator_keeps_mode_across_send_and_return(T):
    seen = []

    @T.no_grad()
    def gen():
        got = yield T.is_grad_enabled()
        seen.append((got, T.is_grad_enabled()))
        yield 5
        return 7

    it = gen()
    assert next(it) is False
    assert T.is_grad_enabled()  # the caller's mode between resumptions
    assert it.send(3) == 5
    with pytest.raises(StopIteration) as stop:
        next(it)
    assert stop.value.value == 7
    assert seen == [(3, False)]
    assert T.is_grad_enabled()


def test_grad_mode_aliases(T):
    assert T.autograd.no_grad is T.no_grad
    assert T.autograd.enable_grad is T.enable_grad
    assert T.autograd.set_grad_enabled is T.set_grad_enabled
    assert T.autograd.grad_mode.no_grad is T.no_grad


# ---- requires_grad ---------------------------------------------------------------------------

def test_requires_grad_defaults_and_setter(T):
    x = T.ones(2)
    assert not x.requires_grad
    assert x.requires_grad_() is x
    assert x.requires_grad and x.is_leaf
    x.requires_grad_(False)
    assert not x.requires_grad
    x.requires_grad = True
    assert x.requires_grad
    y = x * 2
    assert y.requires_grad
    assert T.tensor([1.0], requires_grad=True).requires_grad
    assert T.zeros(2, requires_grad=True).requires_grad


def test_requires_grad_on_non_leaf(T):
    x = T.ones(2, requires_grad=True)
    y = x * 2
    with exact(RuntimeError, NON_LEAF_REQUIRES_GRAD):
        y.requires_grad = False
    with exact(RuntimeError, NON_LEAF_REQUIRES_GRAD):
        y.requires_grad_(False)
    y.requires_grad_(True)  # a no-op on a non-leaf that requires grad
    assert y.requires_grad


def test_requires_grad_setter_true_on_non_leaf(T):
    y = T.ones(2, requires_grad=True) * 2
    with exact(RuntimeError, "you can only change requires_grad flags of leaf variables."):
        y.requires_grad = True


def test_requires_grad_setter_on_integer_tensor(T):
    t = T.ones(2, dtype=T.int64)
    with exact(RuntimeError,
               "only Tensors of floating point and complex dtype can require gradients"):
        t.requires_grad = True
    t.requires_grad = False  # allowed
    assert not t.requires_grad


def test_requires_grad_method_on_integer_tensor(T):
    t = T.ones(2, dtype=T.int64)
    with exact(RuntimeError, "only Tensors of floating point dtype can require gradients"):
        t.requires_grad_()


def test_requires_grad_factory_on_integer_dtype(T):
    with exact(RuntimeError,
               "Only Tensors of floating point and complex dtype can require gradients"):
        T.tensor([1, 2], requires_grad=True)
    with exact(RuntimeError,
               "Only Tensors of floating point and complex dtype can require gradients"):
        T.ones(2, dtype=T.int64, requires_grad=True)


def test_requires_grad_errors_are_runtime_errors(T):
    with pytest.raises(RuntimeError, match="floating point"):
        T.ones(2, dtype=T.int64).requires_grad_()
    with pytest.raises(RuntimeError, match="floating point"):
        T.tensor([1, 2], requires_grad=True)
    with pytest.raises(RuntimeError, match="floating point"):
        T.ones(1, dtype=T.bool).requires_grad_()


# ---- detach / clone / .data / .to ------------------------------------------------------------

def test_detach_shares_storage_and_version_counter(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    d = x.detach()
    assert not d.requires_grad and d.is_leaf and d.grad_fn is None
    assert x._version == 0 and d._version == 0
    d.add_(1)
    assert x._version == 1 and d._version == 1
    close(x, [2.0, 3.0])
    with T.no_grad():
        x.mul_(2)
    assert d._version == 2
    close(d, [4.0, 6.0])


def test_detach_of_non_leaf(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    y = x * 3
    d = y.detach()
    assert d.is_leaf and not d.requires_grad
    out = (y * d).sum()  # d is a constant
    out.backward()
    close(x.grad, [9.0, 18.0])


def test_modifying_detached_saved_leaf_breaks_backward(T):
    x = T.tensor([1.0, 2.0, 3.0], requires_grad=True)
    z = x * x
    x.detach().add_(1)
    with pytest.raises(RuntimeError,
                       match="^one of the variables needed for gradient computation has been "
                       r"modified by an inplace operation: \[torch.FloatTensor \[3\]\]"):
        z.sum().backward()


def test_detach_breaks_the_graph(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    y = (x * 2).detach() * x
    y.sum().backward()
    close(x.grad, [2.0, 4.0])


def test_detach_in_place(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    assert y.detach_() is y
    assert y.is_leaf and not y.requires_grad and y.grad_fn is None
    close(y, [2.0, 4.0])


def test_detach_then_requires_grad_is_a_new_leaf(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    y = x.detach().requires_grad_()
    (y * 2).sum().backward()
    close(y.grad, [2.0, 2.0])
    assert x.grad is None


def test_clone_gradient_flows(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    c = x.clone()
    assert c.requires_grad and not c.is_leaf
    assert c.grad_fn.name() == "CloneBackward0"
    c.add_(10)  # the clone is independent storage
    close(x, [1.0, 2.0])
    (c * c).sum().backward()
    close(x.grad, [22.0, 24.0])


def test_clone_without_grad(T):
    x = T.tensor([1.0, 2.0])
    c = x.clone()
    assert not c.requires_grad and c.is_leaf
    c[0] = 5.0
    close(x, [1.0, 2.0])


def test_data_attribute(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    d = x.data
    assert not d.requires_grad and d.is_leaf
    d.add_(1)  # shares storage, but not the version counter
    close(x, [2.0, 3.0])
    assert x._version == 0
    assert d._version == 1


def test_data_modification_is_invisible_to_autograd(T):
    x = T.tensor([1.0, 2.0, 3.0], requires_grad=True)
    z = (x * x).sum()
    x.data.add_(1)
    z.backward()  # no version error; backward sees the new values
    close(x.grad, [4.0, 6.0, 8.0])


def test_data_setter(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    x.data = T.tensor([5.0, 6.0, 7.0])
    assert x.requires_grad and x.is_leaf
    assert x.shape == (3,)
    (x * 2).sum().backward()
    close(x.grad, [2.0, 2.0, 2.0])


def test_to_float64_gradient_comes_back_float32(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    y = x.to(T.float64)
    assert y.dtype == T.float64 and not y.is_leaf
    assert y.grad_fn.name() == "ToCopyBackward0"
    (y * y).sum().backward()
    assert x.grad.dtype == T.float32
    close(x.grad, [2.0, 4.0])


def test_to_same_dtype_returns_self(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    assert x.to(T.float32) is x
    assert x.float() is x
    d = x.double()
    assert d.dtype == T.float64 and d.requires_grad
    assert x.to(T.float32, copy=True) is not x


def test_float_to_int_cast_is_not_differentiable(T):
    x = T.tensor([1.5, 2.5], requires_grad=True)
    i = x.to(T.int64)
    assert i.dtype == T.int64
    assert not i.requires_grad and i.grad_fn is None
    for r in (x.long(), x.int(), x.to(T.bool), x.to(T.int32), x.type(T.int64),
              x.to(T.int64, copy=True), (x * 2).long()):
        assert not r.requires_grad and r.grad_fn is None


def test_max_indices_are_not_differentiable(T):
    x = T.tensor([[1.0, 3.0], [4.0, 2.0]], requires_grad=True)
    values, indices = x.max(1)
    assert values.requires_grad and values.grad_fn.name() == "MaxBackward0"
    assert not indices.requires_grad and indices.grad_fn is None and indices.is_leaf
    values.sum().backward()
    assert x.grad.tolist() == [[0.0, 1.0], [1.0, 0.0]]


def test_non_differentiable_integer_results(T):
    x = T.tensor([1.5, -2.5], requires_grad=True)
    for r in (x.argmax(), x > 0, x == 1.5):
        assert not r.requires_grad and r.grad_fn is None


def test_is_leaf(T):
    a = T.ones(2)
    b = T.ones(2, requires_grad=True)
    c = b * 2
    d = a * 2
    with T.no_grad():
        e = b * 2
    assert a.is_leaf and b.is_leaf and not c.is_leaf and d.is_leaf and e.is_leaf
    assert c.detach().is_leaf
    assert T.tensor(3.0).is_leaf


# ---- grad_fn names and edges ------------------------------------------------------------------

def _edges(node):
    return [(None if n is None else type(n).__name__, nr) for n, nr in node.next_functions]


ACC = "AccumulateGrad"

GRAD_FN_CASES = [
    ("mul", lambda m, T: m * m, "MulBackward0", [(ACC, 0), (ACC, 0)]),
    ("mul_scalar", lambda m, T: m * 2, "MulBackward0", [(ACC, 0), (None, 0)]),
    ("add_scalar", lambda m, T: m + 1, "AddBackward0", [(ACC, 0), (None, 0)]),
    ("add_const", lambda m, T: m + T.ones(2, 3), "AddBackward0", [(ACC, 0), (None, 0)]),
    ("sub", lambda m, T: m - m, "SubBackward0", [(ACC, 0), (ACC, 0)]),
    ("div_scalar", lambda m, T: m / 4, "DivBackward0", [(ACC, 0), (None, 0)]),
    ("neg", lambda m, T: -m, "NegBackward0", [(ACC, 0)]),
    ("pow_scalar", lambda m, T: m ** 2, "PowBackward0", [(ACC, 0)]),
    ("pow_tensor", lambda m, T: m ** m, "PowBackward1", [(ACC, 0), (ACC, 0)]),
    ("rpow", lambda m, T: 2 ** m, "PowBackward2", [(ACC, 0)]),
    ("sum", lambda m, T: m.sum(), "SumBackward0", [(ACC, 0)]),
    ("sum_dim", lambda m, T: m.sum(1), "SumBackward1", [(ACC, 0)]),
    ("mean", lambda m, T: m.mean(), "MeanBackward0", [(ACC, 0)]),
    ("mean_dim", lambda m, T: m.mean(0), "MeanBackward1", [(ACC, 0)]),
    ("exp", lambda m, T: m.exp(), "ExpBackward0", [(ACC, 0)]),
    ("log", lambda m, T: m.log(), "LogBackward0", [(ACC, 0)]),
    ("tanh", lambda m, T: m.tanh(), "TanhBackward0", [(ACC, 0)]),
    ("sigmoid", lambda m, T: m.sigmoid(), "SigmoidBackward0", [(ACC, 0)]),
    ("relu", lambda m, T: m.relu(), "ReluBackward0", [(ACC, 0)]),
    ("mm", lambda m, T: m.mm(m.t()), "MmBackward0", [(ACC, 0), ("TBackward0", 0)]),
    ("matmul2d", lambda m, T: m @ m.t(), "MmBackward0", [(ACC, 0), ("TBackward0", 0)]),
    ("t", lambda m, T: m.t(), "TBackward0", [(ACC, 0)]),
    ("transpose", lambda m, T: m.transpose(0, 1), "TransposeBackward0", [(ACC, 0)]),
    ("permute", lambda m, T: m.permute(1, 0), "PermuteBackward0", [(ACC, 0)]),
    ("view", lambda m, T: m.view(6), "ViewBackward0", [(ACC, 0)]),
    ("reshape", lambda m, T: m.reshape(3, 2), "ViewBackward0", [(ACC, 0)]),
    ("unsqueeze", lambda m, T: m.unsqueeze(0), "UnsqueezeBackward0", [(ACC, 0)]),
    ("expand", lambda m, T: m.expand(2, 2, 3), "ExpandBackward0", [(ACC, 0)]),
    ("select", lambda m, T: m[0], "SelectBackward0", [(ACC, 0)]),
    ("slice", lambda m, T: m[0:1], "SliceBackward0", [(ACC, 0)]),
    ("cat", lambda m, T: T.cat([m, m]), "CatBackward0", [(ACC, 0), (ACC, 0)]),
    ("stack", lambda m, T: T.stack([m, m * 2]), "StackBackward0",
     [(ACC, 0), ("MulBackward0", 0)]),
    ("clone", lambda m, T: m.clone(), "CloneBackward0", [(ACC, 0)]),
    ("to64", lambda m, T: m.to(T.float64), "ToCopyBackward0", [(ACC, 0)]),
    ("max", lambda m, T: m.max(), "MaxBackward1", [(ACC, 0)]),
    ("abs", lambda m, T: m.abs(), "AbsBackward0", [(ACC, 0)]),
    ("sqrt", lambda m, T: m.sqrt(), "SqrtBackward0", [(ACC, 0)]),
    ("chain", lambda m, T: (m.exp() * 3).sum(), "SumBackward0", [("MulBackward0", 0)]),
]


@pytest.mark.parametrize("case", GRAD_FN_CASES, ids=[c[0] for c in GRAD_FN_CASES])
def test_grad_fn_name_and_edges(T, case):
    _, fn, name, edges = case
    m = T.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], requires_grad=True)
    out = fn(m, T)
    assert out.grad_fn.name() == name
    assert type(out.grad_fn).__name__ == name
    if edges is not None:
        assert _edges(out.grad_fn) == edges


def test_rdiv_grad_fn(T):
    m = T.tensor([1.0, 2.0], requires_grad=True)
    out = 2 / m
    assert out.grad_fn.name() == "MulBackward0"
    assert _edges(out.grad_fn) == [("ReciprocalBackward0", 0), (None, 0)]
    out.sum().backward()
    close(m.grad, [-2.0, -0.5])


def test_accumulate_grad_node(T):
    x = T.ones(2, requires_grad=True)
    a = (x * 2).grad_fn.next_functions[0][0]
    b = (x * 3).grad_fn.next_functions[0][0]
    assert type(a).__name__ == "AccumulateGrad"
    assert a is b  # the same sink while it is alive
    assert a.variable is x
    assert a.next_functions == ()
    assert x.grad_fn is None


def test_accumulate_grad_node_name(T):
    x = T.ones(2, requires_grad=True)
    assert (x * 2).grad_fn.next_functions[0][0].name() == "torch::autograd::AccumulateGrad"


def test_next_functions_point_at_upstream_nodes(T):
    x = T.ones(2, requires_grad=True)
    h = x.exp()
    y = h * h
    assert y.grad_fn.next_functions[0][0] is h.grad_fn
    assert y.grad_fn.next_functions[1][0] is h.grad_fn
    a, b = x.split(1)
    z = a * b
    assert _edges(z.grad_fn) == [("SplitBackward0", 0), ("SplitBackward0", 1)]


def test_no_edge_for_input_not_requiring_grad(T):
    x = T.ones(2, requires_grad=True)
    c = T.ones(2)
    y = c * x
    assert _edges(y.grad_fn) == [(None, 0), (ACC, 0)]


def test_grad_fn_of_leaf_and_no_grad_result(T):
    x = T.ones(2, requires_grad=True)
    assert x.grad_fn is None
    assert T.ones(2).grad_fn is None


# ---- Variable ----------------------------------------------------------------------------------

def test_variable_of_plain_tensor(T):
    t = T.tensor([1.0, 2.0])
    v = T.autograd.Variable(t)
    assert isinstance(v, T.Tensor)
    assert not v.requires_grad
    close(v, [1.0, 2.0])
    v2 = T.autograd.Variable(T.tensor([1.0, 2.0]), requires_grad=True)
    assert v2.requires_grad and v2.is_leaf
    (v2 * 2).sum().backward()
    close(v2.grad, [2.0, 2.0])


def test_variable_shares_storage(T):
    t = T.tensor([1.0, 2.0])
    v = T.autograd.Variable(t)
    v.add_(1)
    close(t, [2.0, 3.0])


def test_variable_is_a_detached_alias(T):
    a = T.ones(2, requires_grad=True)
    v = T.autograd.Variable(a)
    assert v is not a
    assert not v.requires_grad and v.is_leaf
    t = T.ones(2)
    v3 = T.autograd.Variable(t, requires_grad=True)
    assert v3.requires_grad and not t.requires_grad


def test_isinstance_variable(T):
    assert isinstance(T.ones(2), T.autograd.Variable)


def test_variable_shares_memory_and_version_and_checks_its_input(T):
    a = T.ones(2, requires_grad=True)
    v = T.autograd.Variable(a)
    v.add_(1)  # not tracked: v does not require grad
    assert a.tolist() == [2.0, 2.0] and a._version == 1 and a.is_leaf
    assert T.autograd.Variable(a * 2).grad_fn is None
    with exact(TypeError, "Variable data has to be a tensor, but got list"):
        T.autograd.Variable([1.0])
    with exact(RuntimeError, "Only Tensors of floating point and complex dtype can require "
               "gradients"):
        T.autograd.Variable(T.ones(2, dtype=T.int64), requires_grad=True)
    with pytest.warns(UserWarning, match="^volatile was removed and now has no effect"):
        T.autograd.Variable(a, volatile=True)
