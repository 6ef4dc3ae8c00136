"""Post-accumulate-grad hooks, ``.grad`` (warnings, assignment), ``retain_grad``,
accumulation across backward calls and the backward-twice rule: hook_semantics.md §2, §3
and the matching rows of §14.

Each test runs under disthook and torch (``T`` fixture, see hook_conformance.py).
"""
from __future__ import annotations

import gc
import warnings
import weakref

import pytest
from hook_conformance import (
    IGNORE_CREATE_GRAPH_WARNING,
    NO_GRAD_HOOK,
    NON_LEAF_GRAD_WARNING,
    POST_ACC_NON_LEAF,
    POST_ACC_RETURN,
    RETAIN_NO_GRAD,
    SECOND_BACKWARD,
    exact,
    load,
    vals,
)


@pytest.fixture(params=["disthook", "torch"])
def T(request):
    """The library under test (hook_conformance.load skips torch when it is missing)."""
    return load(request.param)


# ---- §2 register_post_accumulate_grad_hook ---------------------------------------------------


def test_post_acc_hook_requires_grad(T):
    # [e1 1f]
    with exact(RuntimeError, NO_GRAD_HOOK):
        T.ones(2).register_post_accumulate_grad_hook(lambda t: None)


def test_post_acc_hook_on_non_leaf_refused(T):
    # [e2 2c]
    y = T.tensor([1.0], requires_grad=True) * 2
    with exact(RuntimeError, POST_ACC_NON_LEAF):
        y.register_post_accumulate_grad_hook(lambda t: None)


def test_post_acc_hook_precondition_order(T):
    # a non-leaf that does not require grad cannot exist, but a tensor without requires_grad
    # is refused with the requires_grad message first
    x = T.tensor([1.0])
    with exact(RuntimeError, NO_GRAD_HOOK):
        x.register_post_accumulate_grad_hook(lambda t: None)


def test_post_acc_hook_receives_tensor_after_grad_updated(T):
    # [e2 2a]
    x = T.tensor([1.0, 2.0], requires_grad=True)
    log = []
    x.register_hook(lambda g: (log.append(("pre", g.tolist(), vals(x.grad))), g * 2)[1])

    def pah(t):
        log.append(("post", t is x, t.grad.tolist(), T.is_grad_enabled()))

    x.register_post_accumulate_grad_hook(pah)
    (x * 3).sum().backward()
    assert log == [("pre", [3.0, 3.0], None), ("post", True, [6.0, 6.0], False)]
    log.clear()
    (x * 3).sum().backward()
    assert log == [("pre", [3.0, 3.0], [6.0, 6.0]), ("post", True, [12.0, 12.0], False)]


def test_post_acc_hook_fires_once_for_leaf_used_twice(T):
    # [e2 2b]
    x = T.tensor([1.0], requires_grad=True)
    cnt = [0]
    x.register_post_accumulate_grad_hook(lambda t: cnt.__setitem__(0, cnt[0] + 1))
    (x * 2 + x * 3).sum().backward()
    assert cnt == [1]
    assert vals(x.grad) == [5.0]


def test_post_acc_hook_returning_value_raises(T):
    # [e2 2c]
    x = T.tensor([1.0], requires_grad=True)
    x.register_post_accumulate_grad_hook(lambda t: t.grad)
    with exact(RuntimeError, POST_ACC_RETURN):
        (x * 1).sum().backward()


def test_post_acc_hook_returning_a_tensor_raises(T):
    x = T.tensor([1.0], requires_grad=True)
    x.register_post_accumulate_grad_hook(lambda t: T.ones(1))
    with exact(RuntimeError, POST_ACC_RETURN):
        (x * 1).sum().backward()


@pytest.mark.parametrize("ret, tname", [(0, "int"), (False, "bool"), ((), "tuple"),
                                        ("x", "str"), ([1], "list"), (1.5, "float")])
def test_post_acc_hook_returning_non_tensor_is_type_error(T, ret, tname):
    # measured on torch 2.13: only a Tensor return gets the "should return None." message
    x = T.tensor([1.0], requires_grad=True)
    x.register_post_accumulate_grad_hook(lambda t: ret)
    with exact(TypeError, f"expected Variable, but hook returned '{tname}'"):
        (x * 1).sum().backward()


def test_post_acc_hook_result_is_checked_then_refused(T):
    # the result is validated against the tensor like a gradient hook's (type, then size);
    # returning the tensor itself counts as returning None, and later hooks see a result
    def run(*hooks):
        x = T.tensor([1.0], requires_grad=True)
        for hook in hooks:
            x.register_post_accumulate_grad_hook(hook)
        (x * 2).sum().backward()
        return x

    with exact(RuntimeError, "hook '<lambda>' has changed the type of value "
               "(was torch.FloatTensor got torch.DoubleTensor)"):
        run(lambda t: T.ones(3, dtype=T.float64))
    with exact(RuntimeError, "hook '<lambda>' has changed the size of value"):
        run(lambda t: T.ones(3))
    x = run(lambda t: t, lambda t: None)
    assert vals(x.grad) == [2.0]
    seen = []
    with exact(RuntimeError, POST_ACC_RETURN):
        run(lambda t: t * 5, lambda t: seen.append(vals(t)))
    assert seen == [[5.0]]


def test_post_acc_hook_not_under_autograd_grad(T):
    # [e2 2c]
    x = T.tensor([1.0], requires_grad=True)
    cnt = [0]
    x.register_post_accumulate_grad_hook(lambda t: cnt.__setitem__(0, cnt[0] + 1))
    T.autograd.grad((x * 2).sum(), x)
    assert cnt == [0]
    assert x.grad is None
    (x * 2).sum().backward(inputs=[x])
    assert cnt == [1]
    assert vals(x.grad) == [2.0]


def test_post_acc_hook_not_when_excluded_by_inputs(T):
    x = T.tensor([1.0], requires_grad=True)
    w = T.tensor([2.0], requires_grad=True)
    log = []
    x.register_post_accumulate_grad_hook(lambda t: log.append("x"))
    w.register_post_accumulate_grad_hook(lambda t: log.append("w"))
    (x * w).sum().backward(inputs=[w])
    assert log == ["w"]


def test_post_acc_hook_ordering(T):
    # PyTorch's test_post_accumulate_grad_hook_ordering: ((1 - 2) / 5 + 0.5) * 10 = 3
    tensor = T.tensor([0.25, 0.5, 0.75], requires_grad=True)
    log = []

    def pre_hook(grad):
        log.append("tensor_hook")
        return grad.sub(2.0)

    def acc_grad_node_pre_hook(grad_out):
        log.append(("acc_prehook", len(grad_out)))
        return (grad_out[0].div(5.0),)

    def post_acc_grad_hook(t):
        log.append("post_acc")
        t.grad.add_(0.5)

    def acc_grad_node_post_hook(grad_in, grad_out):
        log.append(("acc_posthook", len(grad_in), len(grad_out)))
        tensor.grad = grad_out[0].mul(10)

    acc_grad = tensor.view_as(tensor).grad_fn.next_functions[0][0]
    tensor.register_hook(pre_hook)
    acc_grad.register_prehook(acc_grad_node_pre_hook)
    tensor.register_post_accumulate_grad_hook(post_acc_grad_hook)
    acc_grad.register_hook(acc_grad_node_post_hook)
    tensor.sum().backward()
    assert log == ["tensor_hook", ("acc_prehook", 1), "post_acc", ("acc_posthook", 0, 1)]
    assert vals(tensor.grad) == pytest.approx([3.0, 3.0, 3.0])


def test_post_acc_hook_ordering_without_node_posthook(T):
    # [e2 2d]: t.grad == (1 - 2) / 5 + 0.5 = 0.3
    t = T.tensor([0.25, 0.5, 0.75], requires_grad=True)
    acc = t.view_as(t).grad_fn.next_functions[0][0]
    t.register_hook(lambda g: g.sub(2.0))
    acc.register_prehook(lambda go: (go[0].div(5.0),))
    t.register_post_accumulate_grad_hook(lambda p: (p.grad.add_(0.5), None)[1])
    t.sum().backward()
    assert vals(t.grad) == pytest.approx([0.3, 0.3, 0.3])


def test_post_acc_hooks_multiple_in_order(T):
    # PyTorch's test_post_accumulate_grad_hook_multiple_hooks
    tensor = T.tensor([1.0, 2.0, 3.0], requires_grad=True)
    log = []

    def hook1(t):
        log.append("hook1")
        t.sub_(t.grad)

    def hook2(t):
        log.append("hook2")
        t.mul_(4.0)

    tensor.register_post_accumulate_grad_hook(hook1)
    tensor.register_post_accumulate_grad_hook(hook2)
    tensor.sum().backward()
    assert log == ["hook1", "hook2"]
    assert vals(tensor) == [0.0, 4.0, 8.0]  # 4 * (ref - 1)
    assert tensor.requires_grad and tensor.is_leaf


def test_post_acc_hooks_on_multiple_tensors(T):
    # PyTorch's test_post_accumulate_grad_hook_multiple_tensors
    def hook(t):
        t.sub_(t.grad)

    t1 = T.tensor([1.0, 2.0, 3.0], requires_grad=True)
    t2 = T.tensor([5.0, 6.0], requires_grad=True)
    t1.register_post_accumulate_grad_hook(hook)
    t2.register_post_accumulate_grad_hook(hook)
    t1.sum().backward()
    t2.sum().backward()
    assert vals(t1) == [0.0, 1.0, 2.0]
    assert vals(t2) == [4.0, 5.0]


def test_post_acc_hook_sgd_step_in_backward(T):
    # the documented use: an optimizer step inside backward, then zero the grad
    w = T.tensor([1.0, 2.0], requires_grad=True)
    lr = 0.5

    def step(p):
        p.sub_(p.grad * lr)
        p.grad = None

    h = w.register_post_accumulate_grad_hook(step)
    x = T.tensor([2.0, 4.0])
    for _ in range(2):
        (w * x).sum().backward()
        assert w.grad is None
    assert vals(w) == [-1.0, -2.0]  # w - 2 * lr * x
    h.remove()
    (w * x).sum().backward()
    assert vals(w) == [-1.0, -2.0]
    assert vals(w.grad) == [2.0, 4.0]


def test_post_acc_hook_removed_and_context_manager(T):
    x = T.tensor([1.0], requires_grad=True)
    log = []
    h = x.register_post_accumulate_grad_hook(lambda t: log.append("a"))
    with x.register_post_accumulate_grad_hook(lambda t: log.append("b")):
        (x * 1).sum().backward()
    (x * 1).sum().backward()
    h.remove()
    h.remove()
    (x * 1).sum().backward()
    assert log == ["a", "b", "a"]


def test_post_acc_hook_removal_during_backward_is_snapshotted(T):
    x = T.tensor([1.0], requires_grad=True)
    log = []

    def p1(t):
        log.append("p1")
        h2.remove()

    x.register_post_accumulate_grad_hook(p1)
    h2 = x.register_post_accumulate_grad_hook(lambda t: log.append("p2"))
    (x * 1).sum().backward()
    (x * 1).sum().backward()
    assert log == ["p1", "p2", "p1"]


def test_post_acc_hook_gets_cleaned_up_with_tensor(T):
    # PyTorch's test_post_accumulate_grad_hook_gets_cleaned_up
    def make():
        thing = T.tensor([1.0, 2.0, 3.0])

        def hook(t):
            t.sub_(t.grad)
            t.add_(thing)

        t = T.tensor([1.0, 1.0, 1.0], requires_grad=True)
        t.register_post_accumulate_grad_hook(hook)
        t.sum().backward()
        return t, weakref.ref(thing)

    t, ref = make()
    gc.collect()
    assert ref() is not None
    assert vals(t) == [1.0, 2.0, 3.0]
    del t
    gc.collect()
    assert ref() is None


# ---- §3 .grad warnings ----------------------------------------------------------------------


def _grad_warnings(read):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        value = read()
    return value, [(x.category, str(x.message)) for x in w]


def _strip_cpp_suffix(msg: str) -> str:
    # torch appends " (Triggered internally at <path>:<line>.)"
    i = msg.find(" (Triggered internally at ")
    return msg if i < 0 else msg[:i]


def test_non_leaf_grad_warns_and_is_none(T):
    # [e2_e3 3a]
    x = T.tensor([1.0], requires_grad=True)
    y = x * 2
    y.backward()
    value, w = _grad_warnings(lambda: y.grad)
    assert value is None
    assert [(c, _strip_cpp_suffix(m)) for c, m in w] == [(UserWarning, NON_LEAF_GRAD_WARNING)]
    assert (y.is_leaf, x.is_leaf, y.retains_grad) == (False, True, False)


def test_non_leaf_grad_warning_points_at_caller(T):
    x = T.tensor([1.0], requires_grad=True)
    y = x * 2
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        _ = y.grad
    assert len(w) == 1
    assert w[0].filename == __file__


def test_tensor_grad_warnings(T):
    # PyTorch's test_tensor_grad_warnings
    dummy = T.empty(1)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        dummy.requires_grad_()
        _ = dummy.grad
        assert len(w) == 0
        dummy = dummy.clone()
        _ = dummy.grad
        assert len(w) == 1
        dummy.retain_grad()
        _ = dummy.grad
        assert len(w) == 1


def test_leaf_grad_never_warns(T):
    x = T.tensor([1.0], requires_grad=True)
    plain = T.tensor([1.0])
    _, w = _grad_warnings(lambda: (x.grad, plain.grad))
    assert w == []
    (x * 1).sum().backward()
    _, w = _grad_warnings(lambda: x.grad)
    assert w == []


def test_retained_non_leaf_does_not_warn_before_backward(T):
    # [e2_e3 3b]
    x = T.tensor([1.0], requires_grad=True)
    y = x * 2
    y.retain_grad()
    value, w = _grad_warnings(lambda: y.grad)
    assert value is None
    assert w == []


def test_non_leaf_with_assigned_grad_does_not_warn(T):
    x = T.tensor([1.0], requires_grad=True)
    y = x * 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y.grad = T.tensor([7.0])
    value, w = _grad_warnings(lambda: y.grad)
    assert vals(value) == [7.0]
    assert w == []


# ---- §3 retain_grad rules -------------------------------------------------------------------


def test_retain_grad_requires_grad(T):
    with exact(RuntimeError, RETAIN_NO_GRAD):
        T.ones(1).retain_grad()


def test_retain_grad_is_noop_on_leaf(T):
    x = T.tensor([1.0], requires_grad=True)
    x.retain_grad()
    assert x.retains_grad is False
    x.retain_grad()
    assert x.retains_grad is False


def test_retain_grad_idempotent_on_non_leaf(T):
    x = T.tensor([1.0], requires_grad=True)
    y = x * 2
    assert y.retains_grad is False
    y.retain_grad()
    y.retain_grad()
    assert y.retains_grad is True
    (y * 3).sum().backward()
    assert vals(y.grad) == [3.0]


def test_retain_grad(T):
    # PyTorch's test_retain_grad: accumulation h1*2 -> h1*4, no-op on leaves, input*18
    inp = T.tensor([[1.0, 2.0, 3.0]], requires_grad=True)
    h1 = inp * 3
    out = (h1 * h1).sum()
    h1.retain_grad()
    h1.retain_grad()
    out.backward(retain_graph=True)
    assert vals(h1.grad) == [[6.0, 12.0, 18.0]]
    out.backward(retain_graph=True)
    assert vals(h1.grad) == [[12.0, 24.0, 36.0]]
    with T.no_grad():
        inp.grad.zero_()
    inp.retain_grad()
    inp.retain_grad()
    out.backward()
    assert vals(inp.grad) == [[18.0, 36.0, 54.0]]


def test_retain_grad_sees_all_tensor_hooks(T):
    # [e1 1d] / test_retains_grad_can_always_observe_tensor_prehook
    a = T.tensor(1.0, requires_grad=True)
    b = a.clone()
    b.register_hook(lambda g: g * 2)
    b.retain_grad()
    b.register_hook(lambda g: g * 2)
    b.clone().backward()
    assert b.grad.item() == 4.0
    assert a.grad.item() == 4.0

    a = T.tensor(1.0, requires_grad=True)
    b = a.clone()
    b.retain_grad()
    b.register_hook(lambda g: g * 2)
    b.clone().backward()
    assert b.grad.item() == 2.0
    assert a.grad.item() == 2.0


def test_retain_grad_excludes_node_prehooks(T):
    # [e8_e10 10c]: tensor hook x2, grad_fn pre-hook x3: c.grad = 2, upstream gets 6 * 2
    a = T.tensor([1.0], requires_grad=True)
    c = a * 2
    c.grad_fn.register_prehook(lambda go: (go[0] * 3,))
    c.register_hook(lambda g: g * 2)
    c.retain_grad()
    c.sum().backward()
    assert vals(c.grad) == [2.0]
    assert vals(a.grad) == [12.0]


def test_retained_grad_unaffected_by_in_place_edit_in_node_prehook(T):
    a = T.tensor([1.0], requires_grad=True)
    c = a * 2
    c.retain_grad()
    c.grad_fn.register_prehook(lambda go: (go[0].mul_(3), None)[1])
    c.sum().backward()
    assert vals(c.grad) == [1.0]
    assert vals(a.grad) == [6.0]


def test_retain_grad_value_seen_by_node_posthook(T):
    a = T.tensor([1.0], requires_grad=True)
    c = a * 2
    c.retain_grad()
    log = []
    c.grad_fn.register_prehook(lambda go: log.append(("pre", vals(c.grad))))
    c.register_hook(lambda g: (log.append(("tensor", vals(c.grad))), g * 5)[1])
    c.sum().backward()
    assert log == [("tensor", None), ("pre", [5.0])]


def test_retain_grad_inplace(T):
    # [e2_e3 3f] / test_retain_grad_inplace: the grad w.r.t. the latest version
    a = T.tensor([1.0], requires_grad=True).clone()
    a.retain_grad()
    a.mul_(2)
    a.sum().backward()
    assert vals(a.grad) == [1.0]

    a = T.tensor([1.0], requires_grad=True).clone()
    a.retain_grad()
    a.mul_(2)
    a.mul_(2)
    a.sum().backward()
    assert vals(a.grad) == [1.0]
    assert a.retains_grad is True


def test_retain_grad_inplace_with_hooks(T):
    # a hook registered before the in-place op belongs to the old version: not in a.grad
    leaf = T.tensor([1.0], requires_grad=True)
    a = leaf.clone()
    a.retain_grad()
    a.register_hook(lambda g: g * 10)
    a.mul_(2)
    a.register_hook(lambda g: g * 3)
    a.sum().backward()
    assert vals(a.grad) == [3.0]
    assert vals(leaf.grad) == [60.0]


def test_retain_grad_runs_without_other_hooks_on_multi_output_node(T):
    x = T.tensor([1.0, 2.0, 3.0], requires_grad=True)
    a, b, c = x.unbind()
    b.retain_grad()
    c.register_hook(lambda g: g * 2)
    (a + b * 3 + c).backward()
    assert b.grad.item() == 3.0
    assert vals(x.grad) == [1.0, 3.0, 2.0]


@IGNORE_CREATE_GRAPH_WARNING
def test_retained_grad_under_create_graph(T):
    x = T.tensor([1.0], requires_grad=True)
    y = x * x
    y.retain_grad()
    y.backward(create_graph=True)
    assert vals(y.grad) == [1.0]
    assert y.grad.requires_grad is False
    assert x.grad.requires_grad is True


def test_retained_grad_is_a_copy(T):
    x = T.tensor([1.0], requires_grad=True)
    y = x * 2
    y.retain_grad()
    seen = []
    y.register_hook(lambda g: seen.append(g))
    g0 = T.tensor([5.0])
    y.backward(g0)
    assert y.grad is not seen[0]
    assert y.grad is not g0
    g0.add_(1)
    y.grad.add_(1)
    assert vals(y.grad) == [6.0]
    assert vals(x.grad) == [10.0]


def test_retain_grad_does_not_keep_tensor_alive(T):
    # the same as test_retain_grad_cycle below, through an op that saves nothing
    x = T.ones(2, requires_grad=True)

    def run():
        y = x * 2
        y.retain_grad()
        return y + 1, weakref.ref(y)

    z, ref = run()
    gc.collect()
    assert ref() is None
    z.sum().backward()
    assert vals(x.grad) == [2.0, 2.0]


def test_retain_grad_tensor_dies(T):
    # PyTorch's test_retain_grad_cycle: retain_grad does not keep the tensor alive
    x = T.ones(2, requires_grad=True)
    died = []

    def run():
        y = x * 2
        y.retain_grad()
        ref = weakref.ref(y, lambda r: died.append(True))
        return y / 2, ref

    z, ref = run()
    gc.collect()
    assert ref() is None
    assert died == [True]
    z.sum().backward()
    assert vals(x.grad) == [1.0, 1.0]


def test_backward_inputs_makes_non_leaf_retain_grad(T):
    x = T.tensor([1.0], requires_grad=True)
    y = x + 2
    z = y * 3
    y.register_hook(lambda g: g * 10)
    z.backward(inputs=[y], retain_graph=True)
    assert y.retains_grad is True
    assert vals(y.grad) == [30.0]
    assert x.grad is None
    z.backward()
    assert vals(y.grad) == [60.0]
    assert vals(x.grad) == [30.0]


def test_backward_inputs_on_retained_non_leaf_writes_once(T):
    x = T.tensor([1.0], requires_grad=True)
    y = x * 2
    y.retain_grad()
    z = y * 3
    y.register_hook(lambda g: g * 2)
    z.backward(inputs=[y])
    assert vals(y.grad) == [6.0]
    assert x.grad is None


# ---- §3 accumulation across backward calls --------------------------------------------------


def test_accumulation_leaf_and_retained_non_leaf(T):
    # [e2_e3 3c]
    x = T.tensor([1.0, 2.0], requires_grad=True)
    h = x * 3
    h.retain_grad()
    out = (h * h).sum()
    out.backward(retain_graph=True)
    assert vals(x.grad) == [18.0, 36.0]
    assert vals(h.grad) == [6.0, 12.0]
    out.backward(retain_graph=True)
    assert vals(x.grad) == [36.0, 72.0]
    assert vals(h.grad) == [12.0, 24.0]


def test_leaf_grad_accumulates_in_place(T):
    # [e1 1p] / test_accumulate_grad
    x = T.tensor([1.0], requires_grad=True)
    (x * 1).sum().backward()
    g0 = x.grad
    (x * 1).sum().backward()
    assert x.grad is g0
    assert vals(g0) == [2.0]


def test_leaf_grad_preassigned_object_is_kept(T):
    # test_accumulate_grad_tensor_reference (dense): the assigned tensor is updated in place
    params = T.tensor([1.5, 1.5]).requires_grad_()
    assigned = T.tensor([1.5, 1.5])
    params.grad = assigned
    params.backward(T.tensor([1.5, 1.5]))
    assert params.grad is assigned
    assert vals(assigned) == [3.0, 3.0]


@IGNORE_CREATE_GRAPH_WARNING
def test_leaf_grad_accumulates_out_of_place_with_create_graph(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    y = x + 2
    y.backward(T.ones(2), retain_graph=True)
    g0 = x.grad
    g0_clone = g0.clone()
    y.backward(T.ones(2), create_graph=True)
    assert x.grad is not g0
    assert vals(g0) == vals(g0_clone) == [1.0, 1.0]
    assert vals(x.grad) == [2.0, 2.0]


@IGNORE_CREATE_GRAPH_WARNING
def test_preassigned_grad_with_create_graph_is_replaced(T):
    params = T.tensor([1.5, 1.5]).requires_grad_()
    assigned = T.tensor([1.5, 1.5])
    params.grad = assigned
    params.backward(T.tensor([1.5, 1.5]), create_graph=True)
    assert params.grad is not assigned
    assert vals(assigned) == [1.5, 1.5]
    assert vals(params.grad) == [3.0, 3.0]


def test_retained_non_leaf_grad_is_new_object_each_pass(T):
    # [e2_e3 3h]
    x = T.tensor([1.0], requires_grad=True)
    y = x * 2
    y.retain_grad()
    s = (y * y).sum()
    s.backward(retain_graph=True)
    g0 = y.grad
    s.backward()
    assert y.grad is not g0
    assert vals(g0) == [4.0]
    assert vals(y.grad) == [8.0]


def test_first_leaf_grad_does_not_alias_seed(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    seed = T.tensor([3.0, 4.0])
    x.backward(seed)
    assert vals(x.grad) == [3.0, 4.0]
    seed.add_(1)
    assert vals(x.grad) == [3.0, 4.0]
    x.backward(seed)
    assert vals(x.grad) == [7.0, 9.0]


@pytest.mark.parametrize("expr", ["x.clone()", "x + 0"])
def test_leaf_grad_does_not_alias_seed_through_identity_ops(T, expr):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    seed = T.tensor([3.0, 4.0])
    eval(expr, {"x": x}).backward(seed)
    seed.add_(1)
    assert vals(x.grad) == [3.0, 4.0]


def test_grad_kept_by_leaf_hook_is_not_accumulated_into(T):
    # logging gradients from a hook, then a second backward: the logged tensor must not change
    x = T.tensor([1.0, 2.0], requires_grad=True)
    saved = []
    x.register_hook(lambda g: saved.append(g))
    (x * 1).sum().backward()
    (x * 1).sum().backward()
    assert [vals(g) for g in saved] == [[1.0, 1.0], [1.0, 1.0]]
    assert vals(x.grad) == [2.0, 2.0]


def test_leaf_grad_takes_the_buffer_only_when_nobody_else_holds_it(T):
    # torch steals an incoming gradient nobody else references (AccumulateGrad post-hooks
    # then see .grad's own storage) and copies any other
    def shares(build, hook=None):
        x = T.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
        seen = []
        acc = x.view_as(x).grad_fn.next_functions[0][0]
        acc.register_hook(lambda gi, go: seen.append(go[0]))
        if hook is not None:
            x.register_hook(hook)
        build(x)
        return x.grad.data_ptr() == seen[0].data_ptr()

    w = T.ones(2, 2)
    kept = []
    assert shares(lambda x: (x @ w).sum().backward())
    assert shares(lambda x: (x * 3 + x * 2).sum().backward())
    assert shares(lambda x: (x * 3).sum().backward(), lambda g: g * 2)
    assert not shares(lambda x: x.clone().backward(T.ones(2, 2)))
    assert not shares(lambda x: (x * 3).sum().backward(), lambda g: kept.append(g))
    assert not shares(lambda x: (x * 3).sum().backward(),
                      lambda g: kept.append(g * 2) or kept[-1])
    # gradients that arrive as views of a whole array nothing else holds: Linear's weight
    # (a product seen through two transposes), a broadcast bias (a sum reshaped)
    assert shares(lambda x: T.nn.functional.linear(T.ones(3, 2), x).sum().backward())
    assert shares(lambda x: (T.ones(2, 2) @ x.t()).sum().backward())
    assert shares(lambda x: (T.ones(3, 2, 2) + x).sum().backward())
    assert not shares(lambda x: (x.t() * 3).sum().backward())  # .grad keeps x's layout
    assert not shares(lambda x: T.nn.functional.linear(T.ones(3, 2), x).sum().backward(),
                      lambda g: kept.append(g))


def test_two_leaves_fed_the_same_gradient_get_separate_grads(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    y = T.tensor([3.0, 4.0], requires_grad=True)
    seed = T.tensor([1.0, 1.0])
    (x + y).backward(seed)
    (x + y).backward(seed)
    assert vals(x.grad) == vals(y.grad) == [2.0, 2.0]
    assert vals(seed) == [1.0, 1.0]


@IGNORE_CREATE_GRAPH_WARNING
def test_first_leaf_grad_under_create_graph_is_a_copy(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    seed = T.tensor([3.0, 4.0])
    x.backward(seed, create_graph=True)
    assert x.grad is not seed and x.grad.grad_fn is None
    seed.add_(1)
    assert vals(x.grad) == [3.0, 4.0]
    w = T.tensor([3.0, 4.0], requires_grad=True)
    z = T.tensor([1.0, 2.0], requires_grad=True)
    (z * w).sum().backward(create_graph=True)
    assert type(z.grad.grad_fn).__name__ == "CopyBackwards"
    assert z.grad.grad_fn.next_functions[0] == (None, 0)
    assert z.grad.grad_fn.next_functions[1][0].name() == "MulBackward0"


def test_manual_grad_then_accumulate(T):
    # [e2_e3 3g]
    x = T.tensor([1.0], requires_grad=True)
    x.grad = T.tensor([5.0])
    (x * 1).sum().backward()
    assert vals(x.grad) == [6.0]


def test_grad_assignment_size_error(T):
    x = T.tensor([1.0], requires_grad=True)
    x.grad = T.tensor([5.0])
    with exact(RuntimeError,
               "attempting to assign a gradient of size '[3]' to a tensor of size '[1]'. "
               "Please ensure that the gradient and the tensor are the same size"):
        x.grad = T.ones(3)
    assert vals(x.grad) == [5.0]


@pytest.mark.parametrize("value, tname", [(5, "int"), ([1.0], "list")])
def test_grad_assignment_type_error(T, value, tname):
    x = T.tensor([1.0], requires_grad=True)
    with exact(TypeError,
               f"assigned grad expected to be a Tensor or None but got grad of type {tname}"):
        x.grad = value


def test_grad_assignment_dtype_error(T):
    x = T.tensor([1.0], requires_grad=True)
    with exact(RuntimeError,
               "attempting to assign a gradient with dtype 'double' to a tensor with grad_dtype "
               "'Float'. The gradient must match the tensor's grad_dtype (defaults to the "
               "tensor's dtype). You can set the tensor's grad_dtype attribute with a specific "
               "dtype, or None to allow any dtype. Set grad_dtype with caution. Diverging the "
               "dtypes of a tensor and its gradient may break downstream systems that assume "
               "they match."):
        x.grad = T.tensor([1.0], dtype=T.float64)


def test_grad_assignment_none_and_del(T):
    x = T.tensor([1.0], requires_grad=True)
    (x * 2).sum().backward()
    x.grad = None
    assert x.grad is None
    (x * 2).sum().backward()
    del x.grad
    assert x.grad is None


def test_grad_zero_then_accumulate(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    (x * 2).sum().backward()
    g = x.grad
    with T.no_grad():
        x.grad.zero_()
    (x * 3).sum().backward()
    assert x.grad is g
    assert vals(x.grad) == [3.0, 3.0]


# ---- §3 backward twice, other backward errors --------------------------------------------------


def test_backward_twice_error(T):
    # [e2_e3 3d]
    x = T.tensor([1.0, 2.0], requires_grad=True)
    out = (x * x).sum()
    out.backward()
    with exact(RuntimeError, SECOND_BACKWARD):
        out.backward()


def test_backward_twice_without_saved_tensors_works(T):
    # [e2_e3 3d]: (x + 1).sum() saves nothing
    x = T.tensor([1.0, 2.0], requires_grad=True)
    out = (x + 1).sum()
    out.backward()
    out.backward()
    assert vals(x.grad) == [2.0, 2.0]


@pytest.mark.parametrize("expr, second", [
    ("-x", [-2.0, -2.0]),
    ("x - 1", [2.0, 2.0]),
    ("x.mean()", [1.0, 1.0]),
    ("x.clone()", [2.0, 2.0]),
    ("x.view(2)", [2.0, 2.0]),
    ("x[0:1]", [2.0, 0.0]),
    ("x * 2", None),
    ("2 * x", None),
    ("x / 2", None),
    ("x * t", None),
    ("x.exp()", None),
    ("x.sum() * 1", None),
])
def test_backward_twice_fails_only_through_nodes_that_saved_tensors(T, expr, second):
    # a python scalar operand is wrapped into a saved tensor: x * 2 cannot run twice
    x = T.tensor([1.0, 2.0], requires_grad=True)
    t = T.tensor([2.0, 2.0])
    c = eval(expr, {"x": x, "t": t}).sum()
    c.backward()
    if second is None:
        with exact(RuntimeError, SECOND_BACKWARD):
            c.backward()
    else:
        c.backward()
        assert vals(x.grad) == second


def test_autograd_grad_frees_graph_too(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    out = (x * x).sum()
    T.autograd.grad(out, x)
    with exact(RuntimeError, SECOND_BACKWARD):
        out.backward()


def test_retain_graph_allows_second_backward(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    out = (x * x).sum()
    out.backward(retain_graph=True)
    out.backward()
    assert vals(x.grad) == [4.0, 8.0]
    with exact(RuntimeError, SECOND_BACKWARD):
        out.backward()


def test_backward_non_scalar_error(T):
    # [e2_e3 3e]
    x = T.tensor([1.0, 2.0], requires_grad=True)
    with exact(RuntimeError, "grad can be implicitly created only for scalar outputs"):
        (x * 2).backward()


def test_backward_without_grad_fn_error(T):
    with exact(RuntimeError,
               "element 0 of tensors does not require grad and does not have a grad_fn"):
        T.ones(2).sum().backward()


def test_hooks_do_not_fire_when_backward_errors_early(T):
    x = T.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    log = []
    y.register_hook(lambda g: log.append("y"))
    with exact(RuntimeError, "grad can be implicitly created only for scalar outputs"):
        y.backward()
    assert log == []
