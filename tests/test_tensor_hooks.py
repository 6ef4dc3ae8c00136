"""Tensor.register_hook: hook_semantics.md §1 and the matching rows of §14.

Order-logging tests in the style of PyTorch's test_autograd.py: hooks append to ``log`` and
the exact list is asserted. Each test runs under disthook and torch (``T`` fixture, see
hook_conformance.py); expected values are hard-coded and were checked against torch 2.13.
"""
from __future__ import annotations

import functools
import gc
import warnings
from collections import OrderedDict

import pytest
from hook_conformance import (
    IGNORE_CREATE_GRAPH_WARNING,
    NO_GRAD_HOOK,
    SECOND_BACKWARD,
    exact,
    grad_of,
    load,
    vals,
)


@pytest.fixture(params=["disthook", "torch"])
def T(request):
    """The library under test (hook_conformance.load skips torch when it is missing)."""
    return load(request.param)


# ---- 1.1 registration preconditions ---------------------------------------------------------


def test_register_hook_requires_grad(T):
    with exact(RuntimeError, NO_GRAD_HOOK):
        T.ones(2).register_hook(lambda g: g)
    with exact(RuntimeError, NO_GRAD_HOOK):
        T.tensor([1.0]).register_hook(lambda g: g)
    # computed from tensors that do not require grad: no grad_fn, still refused
    with exact(RuntimeError, NO_GRAD_HOOK):
        (T.ones(2) * 2).register_hook(lambda g: g)


def test_register_hook_under_no_grad_result_refused(T):
    x = T.tensor([1.0], requires_grad=True)
    with T.no_grad():
        y = x * 2
    with exact(RuntimeError, NO_GRAD_HOOK):
        y.register_hook(lambda g: g)


def test_register_hook_works_on_leaf_and_non_leaf(T):
    x = T.tensor([1.0], requires_grad=True)
    y = x * 2
    hx = x.register_hook(lambda g: None)
    hy = y.register_hook(lambda g: None)
    assert type(hx).__name__ == "RemovableHandle"
    assert type(hy).__name__ == "RemovableHandle"
    assert isinstance(hx, T.utils.hooks.RemovableHandle)
    assert hy.id == hx.id + 1


def test_backward_hooks_dict_is_none_until_first_registration(T):
    x = T.tensor([1.0], requires_grad=True)
    y = x * 1
    assert x._backward_hooks is None
    assert y._backward_hooks is None

    def f(g):
        return None

    h = x.register_hook(f)
    assert isinstance(x._backward_hooks, OrderedDict)
    assert list(x._backward_hooks.items()) == [(h.id, f)]
    h2 = y.register_hook(f)
    assert isinstance(y._backward_hooks, OrderedDict)
    assert list(y._backward_hooks.keys()) == [h2.id]
    h.remove()
    assert len(x._backward_hooks) == 0


def test_register_after_graph_freed_is_allowed_backward_then_errors(T):
    # [extra x4]: registering is fine after the graph was freed; the second backward raises
    x = T.ones(1, requires_grad=True)
    y = x * x
    s = y.sum()
    s.backward()
    log = []
    y.register_hook(lambda g: log.append("y"))
    with exact(RuntimeError, SECOND_BACKWARD):
        s.backward()


# ---- 1.2 when it fires ------------------------------------------------------------------------


def test_fires_once_with_grad_summed_over_uses(T):
    # [e1 1j]
    x = T.tensor([1.0], requires_grad=True)
    y = x * 1
    log = []
    y.register_hook(lambda g: log.append(g.item()))
    x.register_hook(lambda g: log.append(("x", g.item())))
    (y * 2 + y * 3).backward()
    assert log == [5.0, ("x", 5.0)]


def test_leaf_used_twice_fires_once(T):
    x = T.tensor([1.0], requires_grad=True)
    log = []
    x.register_hook(lambda g: log.append(g.tolist()))
    (x * 2 + x * 3).sum().backward()
    assert log == [[5.0]]
    assert vals(x.grad) == [5.0]


def test_fires_every_backward_and_not_off_path(T):
    # [e1 1k]
    x = T.tensor([1.0], requires_grad=True)
    y = x * 2
    w = x * 3
    log = []
    w.register_hook(lambda g: log.append("w"))
    y.register_hook(lambda g: log.append("y"))
    y.backward(retain_graph=True)
    y.backward()
    assert log == ["y", "y"]


def test_not_fired_when_excluded_by_backward_inputs(T):
    # [extra x9]
    x = T.ones(1, requires_grad=True)
    w = T.ones(1, requires_grad=True)
    log = []
    x.register_hook(lambda g: log.append("x"))
    w.register_hook(lambda g: log.append("w"))
    (x * w).sum().backward(inputs=[w])
    assert log == ["w"]
    assert x.grad is None
    assert vals(w.grad) == [1.0]


def test_root_hook_gets_scalar_seed_and_can_replace_it(T):
    # [e1 1n]
    x = T.tensor([1.0, 2.0], requires_grad=True)
    y = (x * 2).sum()
    log = []
    y.register_hook(lambda g: (log.append((g.item(), list(g.shape))), g * 5)[1])
    y.backward()
    assert log == [(1.0, [])]
    assert vals(x.grad) == [10.0, 10.0]


def test_root_hook_gets_gradient_argument(T):
    # [extra x8]
    x = T.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    log = []
    y.register_hook(lambda g: log.append(g.tolist()))
    y.backward(T.tensor([0.5, 3.0]))
    assert log == [[0.5, 3.0]]
    assert vals(x.grad) == [1.0, 6.0]


def test_hook_on_leaf_root(T):
    x = T.tensor(2.0, requires_grad=True)
    log = []
    x.register_hook(lambda g: (log.append(g.item()), g * 3)[1])
    x.backward()
    assert log == [1.0]
    assert x.grad.item() == 3.0


def test_hooks_under_autograd_grad_change_the_result(T):
    # [e1 1o]
    x = T.tensor([1.0], requires_grad=True)
    y = x * 2
    z = y * 3
    log = []
    x.register_hook(lambda g: log.append(("x", g.item())))
    y.register_hook(lambda g: (log.append(("y", g.item())), g * 10)[1])
    (gy,) = T.autograd.grad(z, y, retain_graph=True)
    assert vals(gy) == [30.0]
    assert log == [("y", 3.0)]
    log.clear()
    (gx,) = T.autograd.grad(z, x)
    assert vals(gx) == [60.0]
    assert log == [("y", 3.0), ("x", 60.0)]
    assert x.grad is None


def test_autograd_grad_capture_before_hooks_when_node_runs(T):
    x = T.tensor([1.0], requires_grad=True)
    y = x * 2
    z = y * 3
    y.register_hook(lambda g: g * 10)
    # y alone: y's node does not run, the result includes the hook
    assert vals(T.autograd.grad(z, [y], retain_graph=True)[0]) == [30.0]
    # y and x: y's node runs for x; y's result is captured before the hook, x sees it
    gy, gx = T.autograd.grad(z, [y, x], retain_graph=True)
    assert (vals(gy), vals(gx)) == ([3.0], [60.0])
    gx, gy = T.autograd.grad(z, [x, y])
    assert (vals(gx), vals(gy)) == ([60.0], [3.0])


def test_leaf_hook_changes_autograd_grad_result(T):
    # [extra x1]
    x = T.tensor([1.0], requires_grad=True)
    x.register_hook(lambda g: g * 7)
    (g,) = T.autograd.grad((x * 2).sum(), x)
    assert vals(g) == [14.0]
    assert x.grad is None


def test_root_hook_under_autograd_grad(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    out = (x * 2).sum()
    log = []
    out.register_hook(lambda g: (log.append(g.item()), g * 5)[1])
    (g,) = T.autograd.grad(out, x)
    assert log == [1.0]
    assert vals(g) == [10.0, 10.0]


def test_autograd_grad_runs_retain_grad_of_input_but_writes_no_leaf_grad(T):
    # retain_grad is a tensor-level hook: it runs under autograd.grad too; leaves stay None
    x = T.tensor([1.0], requires_grad=True)
    y = x * 2
    y.retain_grad()
    z = y * 3
    log = []
    y.register_hook(lambda g: (log.append(g.item()), g * 2)[1])
    (g,) = T.autograd.grad(z, y)
    assert vals(g) == [6.0]
    assert log == [3.0]
    assert vals(y.grad) == [6.0]
    assert x.grad is None


def test_autograd_grad_without_retain_grad_leaves_non_leaf_grad_none(T):
    x = T.tensor([1.0], requires_grad=True)
    y = x * 2
    z = y * 3
    T.autograd.grad(z, [y, x])
    assert grad_of(y) is None
    assert x.grad is None


def test_hook_called_with_none_when_custom_function_returns_none(T):
    # [extra x2]
    class NoneGrad(T.autograd.Function):
        @staticmethod
        def forward(ctx, x, y):
            return x.clone(), y.clone()

        @staticmethod
        def backward(ctx, gx, gy):
            return gx, None

    a = T.ones(1, requires_grad=True)
    b = T.ones(1, requires_grad=True)
    ra, rb = NoneGrad.apply(a, b)
    log = []
    b.register_hook(lambda g: log.append(("b", g)))
    ra.register_hook(lambda g: log.append(("ra", g.item())))
    (ra + rb).sum().backward()
    assert log == [("ra", 1.0), ("b", None)]
    assert b.grad is None
    assert vals(a.grad) == [1.0]


def test_hook_none_function_output_gets_a_tensor(T):
    # PyTorch's test_hook_none: an output whose grad is defined gets a Tensor
    class NoneGradientFunction(T.autograd.Function):
        @staticmethod
        def forward(ctx, x, y):
            return x, y

        @staticmethod
        def backward(ctx, grad_x, grad_y):
            return grad_x, None

    x = T.ones(2, requires_grad=True)
    y = T.ones(2)
    rx, ry = NoneGradientFunction.apply(x, y)
    log = []
    rx.register_hook(lambda g: log.append(g.tolist()))
    (rx + ry).sum().backward()
    assert log == [[1.0, 1.0]]


# ---- 1.3 return value: replacement, chaining, validation -------------------------------------


def test_leaf_hook_replacement_is_accumulated(T):
    # [e1 1a]
    x = T.tensor([1.0, 2.0], requires_grad=True)
    seen = []
    h = x.register_hook(lambda g: (seen.append(g.tolist()), g * 10)[1])
    (x * 3).sum().backward()
    assert seen == [[3.0, 3.0]]
    assert vals(x.grad) == [30.0, 30.0]
    assert type(h).__name__ == "RemovableHandle"


def test_non_leaf_replacement_propagates_upstream(T):
    # [e1 1b]
    x = T.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    y.register_hook(lambda g: g + 100)
    (y * 3).sum().backward()
    assert vals(x.grad) == [206.0, 206.0]


def test_hooks_chain_in_registration_order(T):
    # [e1 1c]: g*2 -> (None, sees 2) -> g+1 ends with 3
    x = T.tensor([1.0], requires_grad=True)
    y = x * 1
    log = []
    y.register_hook(lambda g: (log.append(("h1", g.item())), g * 2)[1])
    y.register_hook(lambda g: (log.append(("h2", g.item())), None)[1])
    y.register_hook(lambda g: (log.append(("h3", g.item())), g + 1)[1])
    y.backward()
    assert log == [("h1", 1.0), ("h2", 2.0), ("h3", 2.0)]
    assert vals(x.grad) == [3.0]


def test_leaf_hooks_chain(T):
    x = T.tensor([1.0], requires_grad=True)
    log = []
    x.register_hook(lambda g: (log.append(g.item()), g + 1)[1])
    x.register_hook(lambda g: (log.append(g.item()), g * 10)[1])
    (x * 2).sum().backward()
    assert log == [2.0, 3.0]
    assert vals(x.grad) == [30.0]


def test_same_function_registered_twice_runs_twice(T):
    x = T.tensor([1.0], requires_grad=True)
    y = x * 1
    log = []

    def f(g):
        log.append(g.item())
        return g * 2

    y.register_hook(f)
    y.register_hook(f)
    y.backward()
    assert log == [1.0, 2.0]
    assert vals(x.grad) == [4.0]


def test_none_return_keeps_gradient(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    y = x * 3
    y.register_hook(lambda g: None)
    x.register_hook(lambda g: None)
    y.sum().backward()
    assert vals(x.grad) == [3.0, 3.0]


def test_replaced_leaf_grad_value_is_stored_not_the_object(T):
    # [e1 1q]: the returned tensor's value lands in .grad; .grad is not that object and
    # does not alias it
    x = T.tensor([1.0], requires_grad=True)
    newg = T.tensor([42.0])
    x.register_hook(lambda g: newg)
    (x * 1).sum().backward()
    assert x.grad is not newg
    assert vals(x.grad) == [42.0]
    newg.add_(1)
    assert vals(x.grad) == [42.0]


def test_hook_result_requiring_grad_is_detached_in_leaf_grad(T):
    w = T.tensor([3.0], requires_grad=True)
    x = T.tensor([1.0], requires_grad=True)
    y = x * 1
    y.register_hook(lambda g: g * w)
    y.backward()
    assert vals(x.grad) == [3.0]
    assert x.grad.requires_grad is False
    assert w.grad is None


SIZE_MSG = "hook '<lambda>' has changed the size of value"
DTYPE_MSG = ("hook '<lambda>' has changed the type of value "
             "(was torch.FloatTensor got torch.DoubleTensor)")


@pytest.mark.parametrize("where", ["non_leaf", "leaf"])
def test_hook_changes_size_error(T, where):
    # [e1 1i]
    x = T.tensor([1.0, 2.0], requires_grad=True)
    y = x * 1
    (y if where == "non_leaf" else x).register_hook(lambda g: T.ones(3))
    with exact(RuntimeError, SIZE_MSG):
        y.sum().backward()


@pytest.mark.parametrize("where", ["non_leaf", "leaf"])
def test_hook_changes_dtype_error(T, where):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    y = x * 1
    (y if where == "non_leaf" else x).register_hook(lambda g: g.to(T.float64))
    with exact(RuntimeError, DTYPE_MSG):
        y.sum().backward()


@pytest.mark.parametrize("src, conv, was, got", [
    ("float64", "float", "torch.DoubleTensor", "torch.FloatTensor"),
    ("float32", "long", "torch.FloatTensor", "torch.LongTensor"),
    ("float32", "half", "torch.FloatTensor", "torch.HalfTensor"),
])
def test_hook_changes_dtype_legacy_type_names(T, src, conv, was, got):
    x = T.tensor([1.0], dtype=getattr(T, src), requires_grad=True)
    y = x * 1
    y.register_hook(lambda g: getattr(g, conv)())
    with exact(RuntimeError, f"hook '<lambda>' has changed the type of value (was {was} got {got})"):
        y.sum().backward()


@pytest.mark.parametrize("shape, ret", [((1,), "scalar"), ((), "one"), ((1, 2), "flat")])
def test_hook_changes_shape_same_numel_error(T, shape, ret):
    x = T.ones(*shape, requires_grad=True) if shape else T.tensor(1.0, requires_grad=True)
    y = x * 1
    make = {"scalar": lambda g: T.tensor(5.0), "one": lambda g: T.tensor([5.0]),
            "flat": lambda g: g.reshape(2)}[ret]
    y.register_hook(make)
    with exact(RuntimeError, SIZE_MSG):
        y.sum().backward()


def test_non_callable_hook_fails_at_backward(T):
    x = T.tensor([1.0], requires_grad=True)
    x.register_hook(5)  # no check at registration
    with exact(TypeError, "'int' object is not callable"):
        (x * 1).sum().backward()


def test_hook_changes_dtype_error_names_the_function(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    y = x * 1

    def to_double(g):
        return g.double()

    y.register_hook(to_double)
    with exact(RuntimeError, "hook 'to_double' has changed the type of value "
                             "(was torch.FloatTensor got torch.DoubleTensor)"):
        y.sum().backward()


def test_hook_changes_size_error_names_the_function(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)

    def grow(g):
        return T.ones(3)

    x.register_hook(grow)
    with exact(RuntimeError, "hook 'grow' has changed the size of value"):
        (x * 1).sum().backward()


@pytest.mark.parametrize("ret, tname", [(5, "int"), ("s", "str"), (2.5, "float")])
def test_hook_returns_non_tensor_error(T, ret, tname):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    y = x * 1
    y.register_hook(lambda g: ret)
    with exact(TypeError, f"expected Variable, but hook returned '{tname}'"):
        y.sum().backward()


@pytest.mark.parametrize("where", ["non_leaf", "leaf"])
def test_hook_returns_list_error(T, where):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    y = x * 1
    (y if where == "non_leaf" else x).register_hook(lambda g: [g])
    with exact(TypeError, "expected Variable, but hook returned 'list'"):
        y.sum().backward()


def test_hook_returns_tuple_error(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    x.register_hook(lambda g: (g,))
    with exact(TypeError, "expected Variable, but hook returned 'tuple'"):
        (x * 1).sum().backward()


def test_hook_with_no_name_runs(T):
    # PyTorch's test_hook_with_no_name
    class MyHookClass:
        def __call__(self, grad):
            return grad.clone()

    x = T.tensor([1.0, 2.0], requires_grad=True)
    y = x.clone()
    y.register_hook(MyHookClass())
    y.sum().backward()
    assert vals(x.grad) == [1.0, 1.0]


def test_hook_with_no_name_error_says_unknown(T):
    class Grow:
        def __call__(self, grad):
            return T.ones(3)

    x = T.tensor([1.0, 2.0], requires_grad=True)
    y = x * 1
    y.register_hook(Grow())
    with exact(RuntimeError, "hook '<unknown>' has changed the size of value"):
        y.sum().backward()


def test_partial_hook_error_says_unknown(T):
    def f(g, k):
        return T.ones(3)

    x = T.tensor([1.0, 2.0], requires_grad=True)
    y = x * 1
    y.register_hook(functools.partial(f, k=1))
    with exact(RuntimeError, "hook '<unknown>' has changed the size of value"):
        y.sum().backward()


def test_hook_type_is_checked_before_size(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    y = x * 1
    y.register_hook(lambda g: T.ones(3, dtype=T.float64))
    with exact(RuntimeError, DTYPE_MSG):
        y.sum().backward()


def test_hook_returning_its_argument_changes_nothing(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    y = x * 3
    log = []
    y.register_hook(lambda g: g)
    y.register_hook(lambda g: log.append(vals(g)))
    y.sum().backward()
    assert log == [[1.0, 1.0]] and vals(x.grad) == [3.0, 3.0]


def test_hook_cannot_replace_a_missing_gradient(T):
    class Stop(T.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return a * 1

        @staticmethod
        def backward(ctx, g):
            return None

    x = T.tensor([1.0], requires_grad=True)
    y = x * 1
    y.register_hook(lambda g: T.ones(1))
    with exact(RuntimeError, "can't replace a None gradient with a non-None value"):
        Stop.apply(y).sum().backward()


# ---- 1.4 in-place edits in a hook ------------------------------------------------------------


def test_in_place_edit_with_none_return_is_visible(T):
    # [e1 1m]
    x = T.tensor([1.0], requires_grad=True)
    y = x * 1
    y.register_hook(lambda g: g.mul_(7))
    y.backward()
    assert vals(x.grad) == [7.0]


def test_in_place_edit_seen_by_later_hooks(T):
    x = T.tensor([1.0], requires_grad=True)
    y = x * 2
    log = []
    y.register_hook(lambda g: (g.add_(1), None)[1])
    y.register_hook(lambda g: log.append(g.item()))
    y.sum().backward()
    assert log == [2.0]
    assert vals(x.grad) == [4.0]


def test_in_place_edit_in_leaf_hook(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    x.register_hook(lambda g: (g.mul_(3), None)[1])
    (x * 2).sum().backward()
    assert vals(x.grad) == [6.0, 6.0]


# ---- 1.5 leaf hooks run before accumulation ------------------------------------------------


def test_leaf_hook_runs_before_accumulation(T):
    # [e1 1e]
    x = T.tensor([1.0], requires_grad=True)
    log = []

    def leafhook(g):
        log.append((vals(x.grad), g.tolist()))
        return g * 2

    x.register_hook(leafhook)
    (x * 5).sum().backward()
    assert vals(x.grad) == [10.0]
    (x * 5).sum().backward()
    assert vals(x.grad) == [20.0]
    assert log == [(None, [5.0]), ([10.0], [5.0])]


def test_leaf_hook_sees_preassigned_grad(T):
    x = T.tensor([1.0], requires_grad=True)
    x.grad = T.tensor([5.0])
    log = []
    x.register_hook(lambda g: log.append((vals(x.grad), g.item())))
    (x * 1).sum().backward()
    assert log == [([5.0], 1.0)]
    assert vals(x.grad) == [6.0]


# ---- 1.6 grad mode inside the hook -------------------------------------------------------------


def test_grad_mode_off_inside_hook(T):
    # [e1 1l]
    x = T.tensor([1.0], requires_grad=True)
    y = x * 2
    log = []
    x.register_hook(lambda g: log.append(("x", T.is_grad_enabled(), g.requires_grad)))
    y.register_hook(lambda g: log.append(("y", T.is_grad_enabled(), g.requires_grad)))
    (y * 2).sum().backward()
    assert log == [("y", False, False), ("x", False, False)]
    assert T.is_grad_enabled()


@IGNORE_CREATE_GRAPH_WARNING
def test_grad_mode_on_inside_hook_with_create_graph(T):
    x = T.tensor([1.0], requires_grad=True)
    log = []
    x.register_hook(lambda g: log.append((T.is_grad_enabled(), g.requires_grad)))
    (x * x).sum().backward(create_graph=True)
    assert log == [(True, True)]
    assert T.is_grad_enabled()


def test_grad_mode_off_inside_hook_under_autograd_grad(T):
    x = T.tensor([1.0], requires_grad=True)
    log = []
    x.register_hook(lambda g: log.append((T.is_grad_enabled(), g.requires_grad)))
    T.autograd.grad((x * x).sum(), x)
    T.autograd.grad((x * x).sum(), x, create_graph=True)
    assert log == [(False, False), (True, True)]


def test_grad_mode_restored_after_hook_raises(T):
    x = T.tensor([1.0], requires_grad=True)

    def boom(g):
        raise ValueError("boom")

    x.register_hook(boom)
    with exact(ValueError, "boom"):
        (x * 2).sum().backward()
    assert T.is_grad_enabled()


def test_exception_in_hook_propagates_unchanged(T):
    x = T.tensor([1.0], requires_grad=True)
    y = x * 2

    class MyError(Exception):
        pass

    def boom(g):
        raise MyError("inside hook")

    y.register_hook(boom)
    with pytest.raises(MyError, match="^inside hook$"):
        y.sum().backward()


# ---- 1.7 removal ------------------------------------------------------------------------------


def test_remove_is_idempotent(T):
    # [e1 1g]
    x = T.tensor([1.0], requires_grad=True)
    cnt = [0]
    h = x.register_hook(lambda g: cnt.__setitem__(0, cnt[0] + 1))
    (x * 1).sum().backward()
    h.remove()
    h.remove()
    (x * 1).sum().backward()
    assert cnt == [1]


def test_handle_as_context_manager(T):
    x = T.tensor([1.0], requires_grad=True)
    with x.register_hook(lambda g: g * 0) as hh:
        x.grad = None
        (x * 1).sum().backward()
        assert vals(x.grad) == [0.0]
        assert type(hh).__name__ == "RemovableHandle"
    x.grad = None
    (x * 1).sum().backward()
    assert vals(x.grad) == [1.0]


def test_removed_before_backward_never_fires(T):
    # [e13 13e]: the hook dict is live
    x = T.zeros(1, requires_grad=True)
    y = x * 1
    log = []
    h = y.register_hook(lambda g: log.append("t"))
    h.remove()
    y.sum().backward()
    assert log == []


def test_remove_one_of_several(T):
    # PyTorch's test_hooks: counter 1 -> 4 -> 5
    x = T.ones(2, requires_grad=True)
    y = T.ones(2) * 4
    y.requires_grad_(True)
    counter = [0]

    def bw_hook(inc, grad):
        assert isinstance(grad, T.Tensor)
        counter[0] += inc

    z = x ** 2 + x * 2 + x * y + y
    x.register_hook(lambda *args: bw_hook(0, *args))
    test = z.register_hook(lambda *args: bw_hook(1, *args))
    z.backward(T.ones(2), retain_graph=True)
    assert counter == [1]
    test2 = z.register_hook(lambda *args: bw_hook(2, *args))
    z.backward(T.ones(2), retain_graph=True)
    assert counter == [4]
    test2.remove()
    z.backward(T.ones(2), retain_graph=True)
    assert counter == [5]

    test.remove()
    z.register_hook(lambda grad: grad.mul(2))
    with T.no_grad():
        y.grad.zero_()
    z.backward(T.ones(2), retain_graph=True)
    assert vals(y.grad) == [4.0, 4.0]  # (x + 1) * 2
    y.register_hook(lambda grad: grad.mul(2))
    with T.no_grad():
        y.grad.zero_()
    z.backward(T.ones(2))
    assert vals(y.grad) == [8.0, 8.0]  # (x + 1) * 4


def test_removing_later_hook_on_same_tensor_during_backward_is_snapshotted(T):
    # [e1 1h]
    x = T.tensor([1.0], requires_grad=True)
    y = x * 1
    log = []

    def r1(g):
        log.append("r1")
        h2.remove()

    def r2(g):
        log.append("r2")
        return g * 100

    y.register_hook(r1)
    h2 = y.register_hook(r2)
    y.backward(retain_graph=True)
    assert log == ["r1", "r2"]
    assert vals(x.grad) == [100.0]
    log.clear()
    x.grad = None
    y.backward()
    assert log == ["r1"]
    assert vals(x.grad) == [1.0]


def test_removing_later_leaf_hook_during_backward_is_snapshotted(T):
    x = T.tensor([1.0], requires_grad=True)
    log = []

    def r1(g):
        log.append("r1")
        h2.remove()

    x.register_hook(r1)
    h2 = x.register_hook(lambda g: (log.append("r2"), g * 100)[1])
    (x * 1).sum().backward()
    assert log == ["r1", "r2"]
    assert vals(x.grad) == [100.0]
    log.clear()
    (x * 1).sum().backward()
    assert log == ["r1"]
    assert vals(x.grad) == [101.0]


def test_removing_hook_on_another_tensor_not_yet_reached_is_immediate(T):
    # [e1 1h']
    x = T.tensor([1.0], requires_grad=True)
    y = x * 1
    z = y * 1
    log = []

    def zh(g):
        log.append("z")
        hy.remove()

    hy = y.register_hook(lambda g: log.append("y"))
    z.register_hook(zh)
    z.backward()
    assert log == ["z"]


def test_removing_leaf_hook_from_upstream_hook_is_immediate(T):
    x = T.tensor([1.0], requires_grad=True)
    y = x * 2
    log = []

    def yh(g):
        log.append("y")
        hx.remove()

    hx = x.register_hook(lambda g: (log.append("x"), g * 100)[1])
    y.register_hook(yh)
    y.sum().backward()
    assert log == ["y"]
    assert vals(x.grad) == [2.0]


def test_hook_registered_during_backward_on_tensor_not_yet_reached_fires(T):
    x = T.tensor([1.0], requires_grad=True)
    y = x * 1
    z = y * 1
    log = []

    def zh(g):
        log.append("z")
        y.register_hook(lambda g: log.append("y_late"))

    z.register_hook(zh)
    z.backward()
    assert log == ["z", "y_late"]


def test_hook_added_to_existing_dict_during_backward_fires(T):
    x = T.tensor([1.0], requires_grad=True)
    y = x * 1
    z = y * 1
    log = []
    y.register_hook(lambda g: log.append("y0"))

    def zh(g):
        log.append("z")
        y.register_hook(lambda g: log.append("y_late"))

    z.register_hook(zh)
    z.backward()
    assert log == ["z", "y0", "y_late"]


def test_hook_added_to_same_tensor_during_its_hooks_waits_for_next_pass(T):
    x = T.tensor([1.0], requires_grad=True)
    y = x * 1
    log = []

    def yh(g):
        log.append("y1")
        y.register_hook(lambda g: log.append("y_new"))

    y.register_hook(yh)
    y.backward(retain_graph=True)
    assert log == ["y1"]
    log.clear()
    y.backward()
    assert log == ["y1", "y_new"]


# ---- 1.8 in-place ops: hooks are bound to the grad_fn at registration ----------------------


def test_hook_bound_to_grad_fn_at_registration(T):
    # [extra x6]
    a = T.tensor([1.0], requires_grad=True)
    b = a.clone()
    log = []
    b.register_hook(lambda g: (log.append(("before_inplace", g.item())), g * 2)[1])
    b.mul_(2)
    b.register_hook(lambda g: (log.append(("after_inplace", g.item())), g * 2)[1])
    b.sum().backward()
    assert log == [("after_inplace", 1.0), ("before_inplace", 4.0)]
    assert vals(a.grad) == [8.0]


def test_hook_before_two_inplace_ops(T):
    # PyTorch's test_tensor_hooks_inplace, second half
    a = T.tensor([1.0], requires_grad=True)
    b = a.clone()
    log = []
    b.register_hook(lambda g: (log.append(g.item()), g * 2)[1])
    b.mul_(2)
    b.mul_(2)
    b.sum().backward()
    assert log == [4.0]
    assert vals(a.grad) == [8.0]


def test_backward_hooks_dict_reset_by_inplace(T):
    a = T.tensor([1.0], requires_grad=True)
    b = a.clone()
    b.register_hook(lambda g: None)
    assert len(b._backward_hooks) == 1
    b.mul_(2)
    assert b._backward_hooks is None


# ---- multiple outputs of one node; several leaves -----------------------------------------


def test_hooks_on_outputs_of_one_node_fire_in_first_registration_order(T):
    x = T.tensor([1.0, 2.0, 3.0], requires_grad=True)
    a, b, c = x.unbind()
    assert a.grad_fn is b.grad_fn
    log = []
    c.register_hook(lambda g: log.append("c"))
    a.register_hook(lambda g: log.append("a"))
    b.register_hook(lambda g: log.append("b"))
    a.register_hook(lambda g: log.append("a2"))
    (a + b + c).backward()
    assert log == ["c", "a", "a2", "b"]


def test_hooks_on_split_outputs(T):
    x = T.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    a, b = x.split(2)
    log = []
    b.register_hook(lambda g: (log.append(("b", g.tolist())), g * 10)[1])
    a.register_hook(lambda g: log.append(("a", g.tolist())))
    (a * b).sum().backward()
    assert log == [("b", [1.0, 2.0]), ("a", [3.0, 4.0])]
    assert vals(x.grad) == [3.0, 4.0, 10.0, 20.0]


def _three_leaves(T):
    return (T.tensor([1.0], requires_grad=True), T.tensor([2.0], requires_grad=True),
            T.tensor([3.0], requires_grad=True))


@pytest.mark.parametrize("expr, expected", [
    ("x*y + z", [("z", 1.0), ("x", 2.0), ("y", 1.0)]),
    ("z + x*y", [("z", 1.0), ("x", 2.0), ("y", 1.0)]),
    ("x*y*z", [("z", 2.0), ("x", 6.0), ("y", 3.0)]),
    ("(x + y)*z", [("z", 3.0), ("x", 3.0), ("y", 3.0)]),
    ("x + y + z", [("z", 1.0), ("x", 1.0), ("y", 1.0)]),
    ("x*2 + y*3", [("y", 3.0), ("x", 2.0)]),
    ("T.stack([x, y, z]).sum()", [("x", 1.0), ("y", 1.0), ("z", 1.0)]),
])
def test_order_of_hooks_on_several_leaves(T, expr, expected):
    x, y, z = _three_leaves(T)
    log = []
    for name, t in (("x", x), ("y", y), ("z", z)):
        t.register_hook(lambda g, name=name: log.append((name, g.item())))
    eval(expr, {"T": T, "x": x, "y": y, "z": z}).sum().backward()
    assert log == expected


def test_order_of_leaf_and_non_leaf_hooks(T):
    x, y, z = _three_leaves(T)
    log = []
    xy = x * y
    for name, t in (("x", x), ("y", y), ("z", z), ("xy", xy)):
        t.register_hook(lambda g, name=name: log.append(name))
    (xy + z).sum().backward()
    assert log == ["z", "xy", "x", "y"]


# ---- misc ---------------------------------------------------------------------------------


def test_hook_does_not_keep_graph_alive_after_tensor_dies(T):
    # the hook fires through the node the tensor had; dropping the Python tensor is fine
    x = T.tensor([1.0], requires_grad=True)
    log = []

    def build():
        y = x * 2
        y.register_hook(lambda g: (log.append(g.item()), g * 3)[1])
        return y * 1

    out = build()
    gc.collect()
    out.sum().backward()
    assert log == [1.0]
    assert vals(x.grad) == [6.0]


def test_print_hook_output(T, capsys):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    y.register_hook(print)
    T.mean(y).backward()
    assert capsys.readouterr().out == "tensor([0.5000, 0.5000])\n"


def test_non_leaf_grad_not_populated_by_hook(T):
    x = T.tensor([1.0], requires_grad=True)
    y = x * 2
    y.register_hook(lambda g: g * 2)
    y.sum().backward()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert grad_of(y) is None
    assert vals(x.grad) == [4.0]


def test_reentrant_backward_inside_hook(T):
    x = T.tensor([1.0], requires_grad=True)
    w = T.tensor([2.0], requires_grad=True)
    y = x * 2
    log = []

    def h(g):
        log.append(("in", T.is_grad_enabled()))
        with T.enable_grad():
            inner = (w * 3).sum()
        inner.backward()
        log.append(("after", T.is_grad_enabled(), vals(w.grad)))
        return g * 2

    y.register_hook(h)
    y.sum().backward()
    assert log == [("in", False), ("after", False, [3.0])]
    assert vals(x.grad) == [4.0]
    assert T.is_grad_enabled()


def test_autograd_grad_inside_hook(T):
    x = T.tensor([1.0], requires_grad=True)
    w = T.tensor([2.0], requires_grad=True)
    y = x * 2
    log = []

    def h(g):
        with T.enable_grad():
            (gw,) = T.autograd.grad((w * w).sum(), w)
        log.append(gw.tolist())
        return g + gw

    y.register_hook(h)
    y.sum().backward()
    assert log == [[4.0]]
    assert vals(x.grad) == [10.0]
    assert w.grad is None


def test_backward_called_under_no_grad(T):
    x = T.tensor([1.0], requires_grad=True)
    log = []
    x.register_hook(lambda g: log.append(T.is_grad_enabled()))
    loss = (x * 2).sum()
    with T.no_grad():
        loss.backward()
        assert not T.is_grad_enabled()
    assert log == [False]
    assert vals(x.grad) == [2.0]


@IGNORE_CREATE_GRAPH_WARNING
def test_create_graph_under_no_grad_enables_grad_in_hooks(T):
    x = T.tensor([1.0], requires_grad=True)
    log = []
    x.register_hook(lambda g: log.append((T.is_grad_enabled(), g.requires_grad)))
    loss = (x * x).sum()
    with T.no_grad():
        loss.backward(create_graph=True)
    assert log == [(True, True)]
    assert x.grad.requires_grad


def test_error_in_hook_frees_what_already_ran(T):
    x = T.tensor([1.0], requires_grad=True)
    y = x * x
    z = y * 3
    h = y.register_hook(lambda g: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        z.sum().backward()
    h.remove()
    with exact(RuntimeError, SECOND_BACKWARD):
        z.sum().backward()


def test_error_in_hook_with_retain_graph_then_backward_again(T):
    x = T.tensor([1.0], requires_grad=True)
    y = x * x
    z = y * 3
    h = y.register_hook(lambda g: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        z.sum().backward(retain_graph=True)
    assert x.grad is None
    h.remove()
    z.sum().backward()
    assert vals(x.grad) == [6.0]


class _DoubleMulFn:
    @staticmethod
    def make(T):
        class DoubleMul(T.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 2, x * 3

            @staticmethod
            def backward(ctx, g1, g2):
                return g1 * 2 + g2 * 3

        return DoubleMul


def test_tensor_hooks_inplace_multiple_outputs(T):
    # PyTorch's test_tensor_hooks_inplace_multiple_outputs (custom Function part)
    DoubleMul = _DoubleMulFn.make(T)
    b = T.tensor([1.0, 2.0], requires_grad=True)
    out1, out2 = DoubleMul.apply(b)
    log = []
    h1 = out1.register_hook(lambda g: log.append(("fn0", g.tolist())))
    h2 = out2.register_hook(lambda g: log.append(("fn1", g.tolist())))
    out1.mul_(2)
    h3 = out1.register_hook(lambda g: log.append(("fn2", g.tolist())))
    (out1 + out2 * 3).sum().backward()
    assert log == [("fn2", [1.0, 1.0]), ("fn0", [2.0, 2.0]), ("fn1", [3.0, 3.0])]
    assert vals(b.grad) == [13.0, 13.0]
    for h in (h1, h2, h3):
        h.remove()


def test_retains_grad_inplace_multiple_outputs(T):
    # PyTorch's test_retains_grad_inplace_multiple_outputs (custom Function part)
    DoubleMul = _DoubleMulFn.make(T)
    b = T.tensor([1.0, 2.0], requires_grad=True)
    v, m = DoubleMul.apply(b)
    v.retain_grad()
    m.retain_grad()
    v.mul_(2)
    (v + m).sum().backward()
    assert vals(v.grad) == [1.0, 1.0]
    assert vals(m.grad) == [1.0, 1.0]
    assert vals(b.grad) == [7.0, 7.0]


# ---- several roots, roots that are inputs, views, double backward ----------------------------


def test_same_root_twice_fires_once_with_summed_seed(T):
    x = T.tensor([1.0], requires_grad=True)
    y = x * 2
    log = []
    y.register_hook(lambda g: log.append(g.item()))
    T.autograd.backward([y, y], [T.tensor([1.0]), T.tensor([2.0])])
    assert log == [3.0]
    assert vals(x.grad) == [6.0]


@pytest.mark.parametrize("roots, expected, xgrad", [
    ("ab", [("b", 2.0), ("a", 1.0)], [8.0]),
    ("ba", [("b", 1.0), ("a", 2.0)], [7.0]),
])
def test_several_roots_run_newest_node_first(T, roots, expected, xgrad):
    # the order follows node creation (b is newer), not the order of the roots
    x = T.tensor([1.0], requires_grad=True)
    a = x * 2
    b = x * 3
    log = []
    a.register_hook(lambda g: log.append(("a", g.item())))
    b.register_hook(lambda g: log.append(("b", g.item())))
    tensors = {"a": a, "b": b}
    T.autograd.backward([tensors[r] for r in roots], [T.tensor([1.0]), T.tensor([2.0])])
    assert log == expected
    assert vals(x.grad) == xgrad


def test_root_that_is_also_the_grad_input(T):
    x = T.tensor([1.0], requires_grad=True)
    y = x * 2
    log = []
    y.register_hook(lambda g: (log.append(g.item()), g * 5)[1])
    (g,) = T.autograd.grad(y, y, T.tensor([2.0]))
    assert log == [2.0]
    assert vals(g) == [10.0]


def test_leaf_root_that_is_also_the_grad_input(T):
    x = T.tensor([1.0], requires_grad=True)
    log = []
    x.register_hook(lambda g: (log.append(g.item()), g * 3)[1])
    (g,) = T.autograd.grad(x, x, T.tensor([2.0]))
    assert log == [2.0]
    assert vals(g) == [6.0]
    assert x.grad is None


def test_hook_on_view(T):
    x = T.tensor([1.0, 2.0, 3.0], requires_grad=True)
    v = x[1:]
    log = []
    v.register_hook(lambda g: (log.append(g.tolist()), g * 2)[1])
    (v * v).sum().backward()
    assert log == [[4.0, 6.0]]
    assert vals(x.grad) == [0.0, 8.0, 12.0]


def test_hook_result_is_differentiated_under_create_graph(T):
    x = T.tensor([2.0], requires_grad=True)
    y = x * x
    log = []
    y.register_hook(lambda g: (log.append(g.item()), g * y)[1])
    (gx,) = T.autograd.grad(y.sum(), x, create_graph=True)
    assert vals(gx) == [16.0]  # hooked g_y = y, gx = 2x * y = 2x^3
    assert gx.requires_grad
    (ggx,) = T.autograd.grad(gx.sum(), x)
    # the second backward reaches y again (through g * y): its hook fires with d(gx)/dy = 2x
    # = 4 and returns 4 * y = 16, then 16 * dy/dx (= 4) + 2 * g_y (= 8) = 72
    assert log == [1.0, 4.0]
    assert vals(ggx) == [72.0]
