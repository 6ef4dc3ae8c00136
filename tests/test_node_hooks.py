"""Autograd Node hooks (``grad_fn.register_prehook`` / ``register_hook``), AccumulateGrad
nodes, and the per-node execution order: hook_semantics.md §10, §2 (ordering at a leaf)
and the matching rows of §14.

Each test runs under disthook and torch (``T`` fixture, see hook_conformance.py).
"""
from __future__ import annotations

import pytest
from hook_conformance import IGNORE_CREATE_GRAPH_WARNING, exact, load, vals


@pytest.fixture(params=["disthook", "torch"])
def T(request):
    """The library under test (hook_conformance.load skips torch when it is missing)."""
    return load(request.param)


def ft(tup):
    """A tuple of gradients as lists (None kept), for exact comparison."""
    return tuple(None if t is None else t.tolist() for t in tup)


# ---- identity, names, edges -----------------------------------------------------------------


def test_grad_fn_identity_name_and_edges(T):
    # [e8_e10 10d]
    a = T.tensor([1.0], requires_grad=True)
    c = a * 2
    assert c.grad_fn is c.grad_fn
    assert c.grad_fn.name() == "MulBackward0"
    nf = c.grad_fn.next_functions
    assert len(nf) == 2
    assert type(nf[0][0]).__name__ == "AccumulateGrad"
    assert nf[0][1] == 0
    assert nf[1] == (None, 0)
    s = c.sum()
    assert s.grad_fn.name() == "SumBackward0"
    assert s.grad_fn.next_functions[0] == (c.grad_fn, 0)


def test_nodes_are_autograd_graph_nodes(T):
    x = T.tensor([1.0], requires_grad=True)
    y = x * 1
    assert isinstance(y.grad_fn, T.autograd.graph.Node)
    assert isinstance(y.grad_fn.next_functions[0][0], T.autograd.graph.Node)


def test_accumulate_grad_node_is_reused_while_alive(T):
    # [e8_e10 10f]
    a = T.tensor([1.0], requires_grad=True)
    acc = (a * 1).grad_fn.next_functions[0][0]
    assert (a * 1).grad_fn.next_functions[0][0] is acc
    assert (a + 2).grad_fn.next_functions[0][0] is acc
    assert type(acc).__name__ == "AccumulateGrad"
    assert acc.variable is a
    assert acc.next_functions == ()


def test_accumulate_grad_name(T):
    # [e2 2d] prints "acc node name: torch::autograd::AccumulateGrad"
    a = T.tensor([1.0], requires_grad=True)
    assert (a * 1).grad_fn.next_functions[0][0].name() == "torch::autograd::AccumulateGrad"


def test_accumulate_grad_pre_and_post_hook_arguments(T):
    # [e8_e10 10f]: prehook gets (grad,), posthook gets gi=() and go=(grad,)
    a = T.tensor([1.0], requires_grad=True)
    acc = (a * 1).grad_fn.next_functions[0][0]
    log = []
    acc.register_hook(lambda gi, go: log.append(("post", ft(gi), ft(go))))
    acc.register_prehook(lambda go: log.append(("pre", ft(go))))
    (a * 5).sum().backward()
    assert log == [("pre", ([5.0],)), ("post", (), ([5.0],))]
    assert vals(a.grad) == [5.0]


def test_accumulate_grad_prehook_replaces_what_is_accumulated(T):
    a = T.tensor([1.0, 2.0], requires_grad=True)
    acc = (a * 1).grad_fn.next_functions[0][0]
    acc.register_prehook(lambda go: (go[0] * 10,))
    (a * 3).sum().backward()
    assert vals(a.grad) == [30.0, 30.0]


# ---- pre-hooks ------------------------------------------------------------------------------


def test_prehook_replaces_and_posthook_slot_none_stops_flow(T):
    # [e8_e10 10a]
    a = T.tensor([1.0, 2.0], requires_grad=True)
    b = T.tensor([3.0, 4.0], requires_grad=True)
    c = a * b
    log = []
    c.grad_fn.register_prehook(lambda go: (log.append(("pre", ft(go))), (go[0] * 10,))[1])
    c.grad_fn.register_hook(
        lambda gi, go: (log.append(("post", ft(gi), ft(go))), (gi[0] + 1, None))[1])
    c.sum().backward()
    assert log == [("pre", ([1.0, 1.0],)),
                   ("post", ([30.0, 40.0], [10.0, 20.0]), ([10.0, 10.0],))]
    assert vals(a.grad) == [31.0, 41.0]
    assert b.grad is None


def test_prehooks_chain_and_none_keeps(T):
    # PyTorch's test_grad_fn_prehooks (built-in node)
    a = T.tensor([1.0], requires_grad=True)
    b = a * 2
    post_counter = [0]
    pre_counter = [0]
    log = []

    def posthook(grad_input, grad_output):
        log.append((pre_counter[0], ft(grad_input), ft(grad_output)))
        post_counter[0] += 1
        return grad_input

    def prehook(grad_output):
        pre_counter[0] += 1
        return (grad_output[0] * 2,)

    b.grad_fn.register_hook(posthook)
    b.grad_fn.register_hook(posthook)
    b.grad_fn.register_prehook(prehook)
    b.grad_fn.register_prehook(lambda x: None)
    b.grad_fn.register_prehook(prehook)
    b.grad_fn.register_prehook(prehook)
    b.grad_fn.register_prehook(lambda x: x)
    b.grad_fn.register_prehook(lambda x: None)
    b.sum().backward()
    assert post_counter == [2]
    assert pre_counter == [3]
    assert log == [(3, ([16.0], None), ([8.0],))] * 2
    assert vals(a.grad) == [16.0]


def test_prehooks_on_custom_function_node(T):
    # PyTorch's test_grad_fn_prehooks (custom Function)
    class Mul2(T.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, gO):
            return gO * 2

    a = T.tensor([1.0], requires_grad=True)
    b = Mul2.apply(a)
    log = []
    b.grad_fn.register_prehook(lambda go: (log.append(("pre", ft(go))), (go[0] * 2,))[1])
    b.grad_fn.register_prehook(lambda go: (log.append(("pre2", ft(go))), None)[1])
    b.grad_fn.register_hook(lambda gi, go: log.append(("post", ft(gi), ft(go))))
    b.sum().backward()
    assert log == [("pre", ([1.0],)), ("pre2", ([2.0],)), ("post", ([4.0],), ([2.0],))]
    assert vals(a.grad) == [4.0]


def test_prehook_returning_none_slot_stops_flow(T):
    a = T.tensor([1.0], requires_grad=True)
    b = a * 2
    b.grad_fn.register_prehook(lambda go: (None,))
    b.sum().backward()
    assert a.grad is None


def test_prehook_on_multi_output_node_sees_none_for_unused_output(T):
    x = T.tensor([1.0, 2.0, 3.0], requires_grad=True)
    a, _b, c = x.unbind()
    log = []
    a.grad_fn.register_prehook(lambda go: (log.append(ft(go)), (go[0] * 2, go[1], go[2]))[1])
    (a * 1 + c * 5).backward()
    assert log == [(1.0, None, 5.0)]
    assert vals(x.grad) == [2.0, 0.0, 5.0]


def test_prehook_multiple_outputs_custom_function(T):
    # PyTorch's test_grad_fn_prehooks_multiple_outputs (custom Function part)
    class DoubleMul2(T.autograd.Function):
        @staticmethod
        def forward(ctx, x, a, y):
            ctx.a = a
            return a * x * 2, a, a * y * 2

        @staticmethod
        def backward(ctx, g1, _a, g2):
            return ctx.a * g1 * 2, None, ctx.a * g2 * 2

    counter = [0]
    seen = []

    def prehook(grad_output):
        g1, ga, g2 = grad_output
        seen.append(ga)
        counter[0] += 1
        return (g1 * 2, None, g2 * 2)

    a = T.tensor([1.0, 2.0], requires_grad=True)
    b = T.tensor([3.0, 4.0], requires_grad=True)
    c, _, d = DoubleMul2.apply(a, 3, b)
    c.grad_fn.register_prehook(prehook)
    (c + d).sum().backward()
    assert counter == [1]
    assert seen == [None]
    assert vals(a.grad) == [12.0, 12.0]
    assert vals(b.grad) == [12.0, 12.0]


# ---- post-hooks -------------------------------------------------------------------------------


def test_posthooks_chain(T):
    a = T.tensor([1.0], requires_grad=True)
    b = a * 2
    log = []
    b.grad_fn.register_hook(lambda gi, go: (log.append(("p1", ft(gi))), (gi[0] * 2, gi[1]))[1])
    b.grad_fn.register_hook(lambda gi, go: (log.append(("p2", ft(gi), ft(go))), None)[1])
    b.grad_fn.register_hook(lambda gi, go: (log.append(("p3", ft(gi))), (gi[0] + 1, None))[1])
    b.sum().backward()
    assert log == [("p1", ([2.0], None)), ("p2", ([4.0], None), ([1.0],)),
                   ("p3", ([4.0], None))]
    assert vals(a.grad) == [5.0]


def test_posthook_all_none_stops_all_flow(T):
    a = T.tensor([1.0], requires_grad=True)
    c = T.tensor([2.0], requires_grad=True)
    b = a * c
    b.grad_fn.register_hook(lambda gi, go: (None, None))
    b.sum().backward()
    assert a.grad is None
    assert c.grad is None


def test_posthook_grad_inputs_include_none_for_non_grad_operand(T):
    a = T.tensor([1.0], requires_grad=True)
    k = T.tensor([5.0])
    b = a * k
    log = []
    b.grad_fn.register_hook(lambda gi, go: log.append(ft(gi)))
    b.sum().backward()
    assert log == [([5.0], None)]


def test_posthook_slots_for_unneeded_edges_are_none(T):
    a = T.tensor([1.0], requires_grad=True)
    b = T.tensor([2.0], requires_grad=True)
    c = a * b
    log = []
    c.grad_fn.register_hook(lambda gi, go: log.append(ft(gi)))
    c.sum().backward(inputs=[a], retain_graph=True)
    T.autograd.grad(c.sum(), b, retain_graph=True)
    c.sum().backward()
    assert log == [([2.0], None), (None, [1.0]), ([2.0], [1.0])]
    assert vals(a.grad) == [4.0]
    assert vals(b.grad) == [1.0]


# ---- validation errors -------------------------------------------------------------------------


def test_posthook_wrong_length(T):
    # [e8_e10 10b]
    a = T.tensor([1.0], requires_grad=True)
    c = a * 2
    c.grad_fn.register_hook(lambda gi, go: (gi[0], gi[0], gi[0]))
    with exact(RuntimeError,
               "hook '<lambda>' has returned an incorrect number of values "
               "(got 3, but expected 2)"):
        c.sum().backward()


def test_prehook_wrong_length(T):
    a = T.tensor([1.0], requires_grad=True)
    c = a * 2
    c.grad_fn.register_prehook(lambda go: (go[0], go[0]))
    with exact(RuntimeError,
               "hook '<lambda>' has returned an incorrect number of values "
               "(got 2, but expected 1)"):
        c.sum().backward()


def test_prehook_empty_tuple(T):
    a = T.tensor([1.0], requires_grad=True)
    c = a * 2
    c.grad_fn.register_prehook(lambda go: ())
    with exact(RuntimeError,
               "hook '<lambda>' has returned an incorrect number of values "
               "(got 0, but expected 1)"):
        c.sum().backward()


def test_prehook_wrong_length_names_function(T):
    def named_pre(go):
        return (go[0], go[0])

    a = T.tensor([1.0], requires_grad=True)
    c = a * 2
    c.grad_fn.register_prehook(named_pre)
    with exact(RuntimeError,
               "hook 'named_pre' has returned an incorrect number of values "
               "(got 2, but expected 1)"):
        c.sum().backward()


def test_prehook_returns_tensor(T):
    a = T.tensor([1.0], requires_grad=True)
    c = a * 2
    c.grad_fn.register_prehook(lambda go: go[0])
    with exact(TypeError, "expected tuple, but hook returned 'Tensor'"):
        c.sum().backward()


@pytest.mark.parametrize("kind", ["pre", "post"])
def test_node_hook_returns_list(T, kind):
    a = T.tensor([1.0], requires_grad=True)
    c = a * 2
    if kind == "pre":
        c.grad_fn.register_prehook(lambda go: list(go))
    else:
        c.grad_fn.register_hook(lambda gi, go: list(gi))
    with exact(TypeError, "expected tuple, but hook returned 'list'"):
        c.sum().backward()


def test_accumulate_grad_prehook_wrong_length(T):
    a = T.tensor([1.0], requires_grad=True)
    acc = (a * 1).grad_fn.next_functions[0][0]
    acc.register_prehook(lambda go: (go[0], go[0]))
    with exact(RuntimeError,
               "hook '<lambda>' has returned an incorrect number of values "
               "(got 2, but expected 1)"):
        (a * 1).sum().backward()


def test_prehook_slot_not_a_tensor(T):
    a = T.tensor([1.0], requires_grad=True)
    b = a * 2
    b.grad_fn.register_prehook(lambda go: (5,))
    with exact(TypeError, "expected Variable, but hook returned 'int'"):
        b.sum().backward()


def test_prehook_slot_wrong_size(T):
    a = T.tensor([1.0], requires_grad=True)
    b = a * 2
    b.grad_fn.register_prehook(lambda go: (T.ones(3),))
    with exact(RuntimeError, "hook '<lambda>' has changed the size of value"):
        b.sum().backward()


def test_posthook_slot_wrong_size(T):
    a = T.tensor([1.0], requires_grad=True)
    b = a * 2
    b.grad_fn.register_hook(lambda gi, go: (T.ones(3), None))
    with exact(RuntimeError, "hook '<lambda>' has changed the size of value"):
        b.sum().backward()


NONE_REPLACED = "can't replace a None gradient with a non-None value"


def test_node_hook_slot_checks(T):
    class Named:
        def __init__(self, ret):
            self.ret = ret

        def __call__(self, *args):
            return self.ret

    def run(kind, ret):
        a = T.tensor([1.0], requires_grad=True)
        b = a * 2
        register = b.grad_fn.register_prehook if kind == "pre" else b.grad_fn.register_hook
        register(Named(ret))
        b.sum().backward()

    for kind, pad in (("pre", ()), ("post", (None,))):
        with exact(TypeError, "expected Variable, but hook returned 'list'"):
            run(kind, ([1.0],) + pad)
        with exact(RuntimeError, "hook '<unknown>' has changed the size of value"):
            run(kind, (T.tensor(3.0),) + pad)  # a 0-d tensor for a [1] gradient
        # the type is checked before the size
        with exact(RuntimeError, "hook '<unknown>' has changed the type of value (was "
                   "torch.FloatTensor got torch.LongTensor)"):
            run(kind, (T.ones(3, dtype=T.int64),) + pad)
        run(kind, (None,) + pad)  # a slot may always be emptied


def test_node_hook_cannot_fill_an_empty_slot(T):
    a = T.tensor([1.0], requires_grad=True)
    b = a * T.tensor([2.0])  # the constant's slot is None
    b.grad_fn.register_hook(lambda gi, go: (gi[0], 5))
    with exact(RuntimeError, NONE_REPLACED):
        b.sum().backward()
    u, _ = T.tensor([1.0, 2.0], requires_grad=True).unbind()
    w = u * 3  # the second output gets no gradient: its slot in UnbindBackward0's grad_outputs is None
    u.grad_fn.register_prehook(lambda go: (go[0], T.ones(())))
    with exact(RuntimeError, NONE_REPLACED):
        w.backward()


def test_node_hooks_chain_and_check_against_the_previous_result(T):
    a = T.tensor([1.0], requires_grad=True)
    b = a * 2
    log = []
    b.grad_fn.register_prehook(lambda go: (go[0] * 10,))
    b.grad_fn.register_prehook(lambda go: log.append(go[0].tolist()))
    b.grad_fn.register_prehook(lambda go: go)  # the same tuple: no change
    b.grad_fn.register_hook(lambda gi, go: (None, None))
    b.grad_fn.register_hook(lambda gi, go: log.append(gi))
    b.sum().backward()
    assert log == [[10.0], (None, None)]
    assert a.grad is None
    c = a * 2
    c.grad_fn.register_hook(lambda gi, go: (None, None))
    c.grad_fn.register_hook(lambda gi, go: (T.ones(1), None))  # fills what the first emptied
    with exact(RuntimeError, NONE_REPLACED):
        c.sum().backward()


def test_custom_function_posthook_keeps_every_slot_under_inputs(T):
    # built-in nodes compute only the gradients leading to a wanted input; a custom Function
    # returns what its backward returns
    class Mul(T.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            ctx.save_for_backward(a, b)
            return a * b

        @staticmethod
        def backward(ctx, g):
            a, b = ctx.saved_tensors
            return g * b, g * a

    a = T.tensor([1.0], requires_grad=True)
    b = T.tensor([2.0], requires_grad=True)
    c = Mul.apply(a, b)
    log = []
    c.grad_fn.register_hook(lambda gi, go: log.append(ft(gi)))
    c.sum().backward(inputs=[a], retain_graph=True)
    T.autograd.grad(c.sum(), b)
    assert log == [([2.0], [1.0]), ([2.0], [1.0])]
    assert vals(a.grad) == [2.0] and b.grad is None


def test_posthook_unneeded_slot_cannot_be_filled(T):
    a = T.tensor([1.0], requires_grad=True)
    b = T.tensor([2.0], requires_grad=True)
    c = a * b
    c.grad_fn.register_hook(lambda gi, go: (gi[0], T.ones(1)))
    with exact(RuntimeError, NONE_REPLACED):
        c.sum().backward(inputs=[a])


def test_exception_in_node_hook_propagates_and_grad_mode_restored(T):
    a = T.tensor([1.0], requires_grad=True)
    b = a * 2

    def boom(go):
        raise ValueError("nodeboom")

    b.grad_fn.register_prehook(boom)
    with exact(ValueError, "nodeboom"):
        b.sum().backward()
    assert T.is_grad_enabled()


# ---- per-node execution order -------------------------------------------------------------


def test_per_node_order_tensor_pre_retain_post(T):
    # [e8_e10 10c]: [tensor, node_pre, node_post, a_tensor]; c.grad excludes the pre-hook
    a = T.tensor([1.0], requires_grad=True)
    c = a * 2
    log = []
    c.grad_fn.register_prehook(lambda go: (log.append(("node_pre", go[0].item())),
                                           (go[0] * 3,))[1])
    c.register_hook(lambda g: (log.append(("tensor", g.item())), g * 2)[1])
    c.retain_grad()
    c.grad_fn.register_hook(
        lambda gi, go: log.append(("node_post", ft(gi), ft(go), c.grad.item())))
    a.register_hook(lambda g: log.append(("a_tensor", g.item())))
    c.sum().backward()
    assert log == [("tensor", 1.0), ("node_pre", 2.0), ("node_post", ([12.0], None), ([6.0],), 2.0),
                   ("a_tensor", 12.0)]
    assert vals(c.grad) == [2.0]
    assert vals(a.grad) == [12.0]


def test_full_chain_order_with_every_hook_kind(T):
    x = T.tensor([1.0], requires_grad=True)
    y = x * 2
    z = y * 3
    log = []
    for n, t in (("x", x), ("y", y), ("z", z)):
        t.register_hook(lambda g, n=n: log.append((n + "_t", g.item())))
    for n, t in (("y", y), ("z", z)):
        t.grad_fn.register_prehook(lambda go, n=n: log.append((n + "_pre", ft(go))))
        t.grad_fn.register_hook(lambda gi, go, n=n: log.append((n + "_post", ft(gi), ft(go))))
    acc = y.grad_fn.next_functions[0][0]
    acc.register_prehook(lambda go: log.append(("acc_pre", ft(go))))
    acc.register_hook(lambda gi, go: log.append(("acc_post", ft(gi), ft(go))))
    x.register_post_accumulate_grad_hook(lambda t: log.append(("x_pa", t.grad.item())))
    z.sum().backward()
    assert log == [
        ("z_t", 1.0),
        ("z_pre", ([1.0],)),
        ("z_post", ([3.0], None), ([1.0],)),
        ("y_t", 3.0),
        ("y_pre", ([3.0],)),
        ("y_post", ([6.0], None), ([3.0],)),
        ("x_t", 6.0),
        ("acc_pre", ([6.0],)),
        ("x_pa", 6.0),
        ("acc_post", (), ([6.0],)),
    ]


def test_prehook_ordering(T):
    # PyTorch's test_prehook_ordering: tensor hooks run before the grad_fn's pre-hooks
    log = []

    def hook1(g):
        log.append(1)
        return g * 3

    def hook2(gs):
        log.append(2)
        return tuple(g * 2 for g in gs)

    a = T.tensor(1.0, requires_grad=True)
    b = a.clone()
    b.grad_fn.register_prehook(hook2)
    b.register_hook(hook1)
    b.grad_fn.register_prehook(hook2)
    acc = b.grad_fn.next_functions[0][0]
    a.register_hook(hook1)
    acc.register_prehook(hook2)
    a.register_hook(hook1)

    b.sum().backward(retain_graph=True)
    assert log == [1, 2, 2, 1, 1, 2]
    assert a.grad.item() == 216.0  # 3 * 2 * 2 * 3 * 3 * 2

    # autograd.grad runs the tensor hooks of the input, not its AccumulateGrad pre-hook
    log.clear()
    (g,) = T.autograd.grad(b.sum(), inputs=(a,), retain_graph=True)
    assert log == [1, 2, 2, 1, 1]
    assert g.item() == 108.0

    log.clear()
    b.sum().backward(inputs=(b,))
    assert log == [1, 2, 2]
    # retain_grad-like accumulation for inputs=(b,) sees the tensor hook, not the pre-hooks
    assert b.grad.item() == 3.0


def test_hook_edge_case_when_called_with_grad(T):
    # PyTorch's test_hook_edge_case_when_called_with_grad, as an exact log
    a = T.tensor(1.0, requires_grad=True)
    b = a * 2
    c = b * 2
    log = []
    a.register_hook(lambda g: log.append("a_t"))
    b.register_hook(lambda g: log.append("b_t"))
    acc = b.grad_fn.next_functions[0][0]
    acc.register_hook(lambda gi, go: log.append("acc_post"))
    acc.register_prehook(lambda go: log.append("acc_pre"))
    b.grad_fn.register_hook(lambda gi, go: log.append("b_post"))
    b.grad_fn.register_prehook(lambda go: log.append("b_pre"))

    T.autograd.grad(c, inputs=(b,), retain_graph=True)
    assert log == ["b_t"]
    log.clear()
    T.autograd.grad(c, inputs=(a, b), retain_graph=True)
    assert log == ["b_t", "b_pre", "b_post", "a_t"]
    log.clear()
    T.autograd.grad(c, inputs=(a,), retain_graph=True)
    assert log == ["b_t", "b_pre", "b_post", "a_t"]
    log.clear()
    c.backward(retain_graph=True)
    assert log == ["b_t", "b_pre", "b_post", "a_t", "acc_pre", "acc_post"]
    log.clear()
    c.backward(inputs=(a, b), retain_graph=True)
    assert log == ["b_t", "b_pre", "b_post", "a_t", "acc_pre", "acc_post"]
    log.clear()
    c.backward(inputs=(b,), retain_graph=True)
    assert log == ["b_t", "b_pre", "b_post"]
    assert b.grad.item() == 4.0  # 2 from this call, 2 from backward(inputs=(a, b))


def test_accumulate_grad_hooks_observe_tensor_hook(T):
    # PyTorch's test_accumulate_grad_posthooks_can_observe_tensor_prehook
    a = T.tensor(1.0, requires_grad=True)
    log = []
    b = a.clone()
    acc = b.grad_fn.next_functions[0][0]
    acc.register_hook(lambda gi, go: log.append(("post", len(gi), ft(go))))
    acc.register_prehook(lambda go: log.append(("pre", ft(go))))
    a.register_hook(lambda g: g * 2)
    b.backward()
    assert log == [("pre", (2.0,)), ("post", 0, (2.0,))]


def test_accumulate_grad_hooks_not_run_when_excluded_by_inputs(T):
    # PyTorch's test_accumulate_grad_posthooks_should_not_execute
    def tensor_prehook(g):
        raise RuntimeError("tensor hook must not run")

    def posthook(gi, go):
        raise RuntimeError("post hook must not run")

    a = T.tensor(1.0, requires_grad=True)
    a.register_hook(tensor_prehook)
    b = T.tensor(1.0, requires_grad=True)
    c = a.clone()
    acc = c.grad_fn.next_functions[0][0]
    acc.register_hook(posthook)
    out = a + b + c
    out.sum().backward(inputs=[b])
    assert b.grad.item() == 1.0


def test_accumulate_grad_hooks_with_undefined_grad(T):
    # an upstream custom Function returns None: AccumulateGrad still runs its hooks
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
    b.register_post_accumulate_grad_hook(lambda t: log.append(("b_pa", t.grad)))
    acc = rb.grad_fn.next_functions[1][0]
    assert acc.variable is b
    acc.register_prehook(lambda go: log.append(("acc_pre", ft(go))))
    acc.register_hook(lambda gi, go: log.append(("acc_post", ft(gi), ft(go))))
    rb.grad_fn.register_hook(lambda gi, go: log.append(("fn_post", ft(gi), ft(go))))
    (ra + rb).sum().backward()
    assert log == [("fn_post", ([1.0], None), ([1.0], [1.0])), ("acc_pre", (None,)),
                   ("b_pa", None), ("acc_post", (), (None,))]
    assert b.grad is None


# ---- firing counts, grad mode ------------------------------------------------------------------


def test_node_hooks_fire_once_per_backward(T):
    a = T.tensor([1.0], requires_grad=True)
    b = a * 2
    cnt = [0, 0]
    b.grad_fn.register_prehook(lambda go: cnt.__setitem__(0, cnt[0] + 1))
    b.grad_fn.register_hook(lambda gi, go: cnt.__setitem__(1, cnt[1] + 1))
    (b + b).sum().backward(retain_graph=True)
    assert cnt == [1, 1]
    (b * 3).sum().backward()
    assert cnt == [2, 2]


def test_grad_mode_in_node_hooks(T):
    a = T.tensor([1.0], requires_grad=True)
    b = a * 2
    log = []
    b.grad_fn.register_prehook(
        lambda go: log.append(("pre", T.is_grad_enabled(), go[0].requires_grad)))
    b.grad_fn.register_hook(
        lambda gi, go: log.append(("post", T.is_grad_enabled(), gi[0].requires_grad)))
    a.register_post_accumulate_grad_hook(
        lambda t: log.append(("pa", T.is_grad_enabled(), t.grad.requires_grad)))
    (b * b).sum().backward(retain_graph=True)
    assert log == [("pre", False, False), ("post", False, False), ("pa", False, False)]


@IGNORE_CREATE_GRAPH_WARNING
def test_grad_mode_in_node_hooks_with_create_graph(T):
    a = T.tensor([1.0], requires_grad=True)
    b = a * 2
    log = []
    b.grad_fn.register_prehook(
        lambda go: log.append(("pre", T.is_grad_enabled(), go[0].requires_grad)))
    b.grad_fn.register_hook(
        lambda gi, go: log.append(("post", T.is_grad_enabled(), gi[0].requires_grad)))
    a.register_post_accumulate_grad_hook(
        lambda t: log.append(("pa", T.is_grad_enabled(), t.grad.requires_grad)))
    (b * b).sum().backward(create_graph=True)
    assert log == [("pre", True, True), ("post", True, True), ("pa", True, True)]


# ---- removal --------------------------------------------------------------------------------


def test_prehook_removed_before_backward(T):
    # [e8_e10 10d]
    a = T.tensor([1.0], requires_grad=True)
    c = a * 2
    h = c.grad_fn.register_prehook(lambda go: (go[0] * 100,))
    h.remove()
    c.sum().backward()
    assert vals(a.grad) == [2.0]


def test_prehook_remove_hooks(T):
    # PyTorch's test_grad_fn_prehooks_remove_hooks
    a = T.tensor([1.0, 2.0], requires_grad=True)
    b = a * 2
    counter = [0]

    def prehook(grad_output):
        counter[0] += 1

    handle = b.grad_fn.register_prehook(prehook)
    b.grad_fn.register_prehook(prehook)
    handle.remove()
    b.sum().backward()
    assert vals(a.grad) == [2.0, 2.0]
    assert counter == [1]

    # removal during backward: the removed later hook still runs this pass
    a = T.tensor([1.0, 2.0], requires_grad=True)
    b = a * 2
    counter = [0]

    def prehook1(grad_output):
        handle2.remove()
        handle3.remove()  # removing an already removed hook is fine

    def prehook2(grad_output):
        counter[0] += 1

    b.grad_fn.register_prehook(prehook1)
    handle2 = b.grad_fn.register_prehook(prehook2)
    handle3 = b.grad_fn.register_prehook(prehook2)
    handle3.remove()
    b.sum().backward()
    assert vals(a.grad) == [2.0, 2.0]
    assert counter == [1]


def test_prehook_removal_during_backward_is_snapshotted(T):
    # [e8_e10 10e]
    a = T.tensor([1.0, 2.0, 3.0], requires_grad=True)
    b = a * 2
    log = []

    def p1(go):
        log.append("p1")
        h2.remove()

    def p2(go):
        log.append("p2")

    b.grad_fn.register_prehook(p1)
    h2 = b.grad_fn.register_prehook(p2)
    b.sum().backward(retain_graph=True)
    b.sum().backward()
    assert log == ["p1", "p2", "p1"]


def test_posthook_removal_during_backward_is_snapshotted(T):
    a = T.tensor([1.0], requires_grad=True)
    b = a * 2
    log = []

    def p1(gi, go):
        log.append("p1")
        h2.remove()

    def p2(gi, go):
        log.append("p2")

    b.grad_fn.register_hook(p1)
    h2 = b.grad_fn.register_hook(p2)
    b.sum().backward(retain_graph=True)
    b.sum().backward()
    assert log == ["p1", "p2", "p1"]


def test_node_hook_removed_from_tensor_hook_before_node_runs(T):
    # the tensor hooks of c run before c.grad_fn's pre-hooks: removing one there is immediate
    a = T.tensor([1.0], requires_grad=True)
    c = a * 2
    log = []
    hp = c.grad_fn.register_prehook(lambda go: log.append("pre"))

    def th(g):
        log.append("tensor")
        hp.remove()

    c.register_hook(th)
    c.sum().backward()
    assert log == ["tensor"]


def test_node_hook_handles_are_removable_handles(T):
    a = T.tensor([1.0], requires_grad=True)
    b = a * 2
    h1 = b.grad_fn.register_prehook(lambda go: None)
    h2 = b.grad_fn.register_hook(lambda gi, go: None)
    assert isinstance(h1, T.utils.hooks.RemovableHandle)
    assert isinstance(h2, T.utils.hooks.RemovableHandle)
    assert h2.id == h1.id + 1
    with b.grad_fn.register_prehook(lambda go: (go[0] * 0,)):
        pass
    b.sum().backward()
    assert vals(a.grad) == [2.0]


# ---- registration during backward ------------------------------------------------------------


def test_posthook_registered_in_prehook_of_same_node_runs_this_pass(T):
    a = T.tensor([1.0], requires_grad=True)
    b = a * 2
    log = []

    def pre(go):
        log.append("pre")
        b.grad_fn.register_hook(lambda gi, go: log.append("late_post"))

    b.grad_fn.register_prehook(pre)
    b.sum().backward(retain_graph=True)
    assert log == ["pre", "late_post"]
    log.clear()
    b.sum().backward()
    assert log == ["pre", "late_post", "late_post"]


def test_prehook_registered_in_tensor_hook_of_same_node_runs_this_pass(T):
    a = T.tensor([1.0], requires_grad=True)
    b = a * 2
    log = []

    def th(g):
        log.append("t")
        b.grad_fn.register_prehook(lambda go: log.append("late_pre"))

    b.register_hook(th)
    b.sum().backward()
    assert log == ["t", "late_pre"]


def test_hook_added_to_running_hook_list_waits_for_next_pass(T):
    # pre-hooks, post-hooks and post-accumulate hooks iterate over a snapshot
    a = T.tensor([1.0], requires_grad=True)
    b = a * 2
    log = []

    def pre1(go):
        log.append("pre1")
        b.grad_fn.register_prehook(lambda go: log.append("late_pre"))

    def post1(gi, go):
        log.append("post1")
        b.grad_fn.register_hook(lambda gi, go: log.append("late_post"))

    def pa(t):
        log.append("pa")
        t.register_post_accumulate_grad_hook(lambda t: log.append("late_pa"))

    b.grad_fn.register_prehook(pre1)
    b.grad_fn.register_hook(post1)
    a.register_post_accumulate_grad_hook(pa)
    b.sum().backward(retain_graph=True)
    assert log == ["pre1", "post1", "pa"]
    log.clear()
    b.sum().backward()
    assert log == ["pre1", "late_pre", "post1", "late_post", "pa", "late_pa"]


def test_hooks_registered_on_upstream_nodes_during_backward_run(T):
    a = T.tensor([1.0], requires_grad=True)
    b = a * 2
    c = b * 3
    log = []

    def cpre(go):
        log.append("cpre")
        b.grad_fn.register_prehook(lambda go: log.append("b_late_pre"))
        b.grad_fn.next_functions[0][0].register_hook(lambda gi, go: log.append("acc_late_post"))

    c.grad_fn.register_prehook(cpre)
    c.sum().backward()
    assert log == ["cpre", "b_late_pre", "acc_late_post"]
