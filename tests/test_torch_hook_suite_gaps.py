"""Gaps found by running PyTorch's own hook tests (test_autograd.py, nn/test_module_hooks.py)
against disthook (issue 20): the saved-tensor views of a node (``_saved_<name>``,
``_raw_saved_<name>`` and their ``data``/``unpack_hook``), a saved input detached in place,
python scalars never packed, node sequence numbers, and more below.

Each test taking ``lib`` runs under disthook and torch (when installed) with the same asserts.
"""
from __future__ import annotations

import pytest
from test_module_api import lib  # noqa: F401 - the fixture: disthook, then torch

FREED = "after they have already been freed"


# ---- a node's saved tensors, by torch's names -----------------------------------------------

def test_saved_views_give_inputs_as_they_are_and_outputs_rebuilt(lib):
    torch = lib.torch
    x = torch.randn(3, requires_grad=True)
    h = x * 2
    prod = x * h
    out = h.exp()
    assert prod.grad_fn._saved_self is x and prod.grad_fn._saved_other is h
    result = out.grad_fn._saved_result
    assert result is not out and torch.equal(result, out)
    assert result.grad_fn is out.grad_fn and result._version == out._version
    prod.sum().backward()
    with pytest.raises(RuntimeError, match=FREED):
        prod.grad_fn._saved_self


def test_saved_output_shares_data_and_version_with_the_output(lib):
    torch = lib.torch
    out = torch.rand(2, requires_grad=True).exp()
    seen = out.grad_fn._saved_result
    with torch.no_grad():
        out += 1
    assert torch.equal(seen, out) and seen._version == out._version == 1


def test_raw_saved_data_and_unpack_hook(lib):
    torch = lib.torch
    x = torch.tensor(2.0, requires_grad=True)

    def unpack(t):
        return t

    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, unpack):
        sq = x ** 2
    ex = sq.exp()
    again = ex ** 2
    assert sq.grad_fn._raw_saved_self.data is x
    assert sq.grad_fn._raw_saved_self.unpack_hook is unpack
    kept = ex.grad_fn._raw_saved_result
    assert kept.unpack_hook is None and kept.data is not ex and torch.equal(kept.data, ex)
    assert again.grad_fn._raw_saved_self.data is ex
    assert isinstance(kept, torch.autograd.SavedTensor)
    with pytest.raises(RuntimeError, match="SavedTensor object from Python is forbidden"):
        torch.autograd.SavedTensor()


@pytest.mark.parametrize("pack, unpack, grad_factor", [
    (lambda t: 2 * t, lambda t: t / 2, 2.0),  # round trip: the plain gradient
    (lambda t: 2 * t, lambda t: t, 3.0),  # self reads 2x: d(x * 2x-as-constant) = x + 2x
])
def test_raw_saved_register_hooks_changes_what_backward_reads(lib, pack, unpack, grad_factor):
    torch = lib.torch
    x = torch.randn(4, requires_grad=True)
    y = x * x
    y.grad_fn._raw_saved_self.register_hooks(pack, unpack)
    y.sum().backward()
    assert torch.allclose(x.grad, grad_factor * x)


def test_raw_saved_register_hooks_errors(lib):
    torch = lib.torch
    x = torch.randn(3, requires_grad=True) + 1
    y = x * x
    with pytest.raises(TypeError, match="missing 1 required positional argument"):
        y.grad_fn._raw_saved_self.register_hooks(lambda t, extra: t, lambda t: t)
    y = x * x
    y.grad_fn._raw_saved_self.register_hooks(lambda t: t, lambda t: 1)
    with pytest.raises(TypeError, match="unpack_hook expected to be a Tensor"):
        y.grad_fn._saved_self

    def doubles_in_place(t):
        t *= 2
        return t

    y = torch.exp(x)
    with pytest.raises(RuntimeError, match="pack hook is modifying its input in place"):
        y.grad_fn._raw_saved_result.register_hooks(doubles_in_place, lambda t: t)


def test_hooked_saved_input_keeps_its_place_in_the_graph(lib):
    torch = lib.torch
    base = torch.randn(5, requires_grad=True)
    x = base + 1
    y = x ** 3
    y.grad_fn._raw_saved_self.register_hooks(lambda t: t, lambda t: t)
    assert y.grad_fn._saved_self.grad_fn is x.grad_fn
    (g,) = torch.autograd.grad(y.sum(), (base,), create_graph=True)
    g.sum().backward()
    assert torch.allclose(base.grad, 6 * x)


def test_saved_input_detached_in_place_raises_but_saved_output_does_not(lib):
    torch = lib.torch
    a = torch.tensor(1.0, requires_grad=True).clone()
    b = a.sin()
    a.detach_()
    with pytest.raises(RuntimeError, match="saved tensor that has been detached in-place"):
        b.backward()
    a = torch.tensor(1.0, requires_grad=True).clone()
    b = a.exp()
    a.detach_()
    b.backward()


def test_python_scalars_are_never_packed(lib):
    torch = lib.torch

    def refuse(t):
        raise AssertionError("a python scalar was packed")

    a = torch.randn(5, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(refuse, refuse):
        out = (a * 3).sum()
        (g,) = torch.autograd.grad(out, (a,))
    assert torch.allclose(g, torch.full((5,), 3.0))


# ---- scheduling --------------------------------------------------------------------------------

def test_sequence_numbers_order_ready_nodes(lib):
    torch = lib.torch
    x, y, z = (torch.randn(3, requires_grad=True) for _ in range(3))
    a, b = x + y, y + z
    c = a + b
    for node, nr in ((a.grad_fn, 100), (b.grad_fn, 99), (c.grad_fn, 98)):
        node._set_sequence_nr(nr)
    assert [n._sequence_nr() for n in (a.grad_fn, b.grad_fn, c.grad_fn)] == [100, 99, 98]
    order = []
    for name, t in (("a", a), ("b", b), ("c", c)):
        t.register_hook(lambda g, name=name: order.append(name))
    c.sum().backward()
    assert order == ["c", "a", "b"]  # the root first, then the larger number
    acc = (x * 1).grad_fn.next_functions[0][0]
    assert acc._sequence_nr() == 2**64 - 1


# ---- GradientEdge: an edge in place of a tensor, as input or output ---------------------------

def test_grad_to_an_edge_equals_grad_to_its_tensor(lib):
    torch = lib.torch
    G = torch.autograd.graph
    leaf = torch.rand(2, requires_grad=True)
    mid = leaf.clone()
    var, mean = torch.var_mean(mid * 3)
    for t, loss in ((leaf, (mid * 2).sum()), (mid, (mid * 2).sum()), (mean, mean * var)):
        ref = torch.autograd.grad(loss, t, retain_graph=True)
        new = torch.autograd.grad(loss, G.get_gradient_edge(t), retain_graph=True)
        assert torch.allclose(ref[0], new[0])
    edge = G.get_gradient_edge(mean)
    assert isinstance(edge, G.GradientEdge) and isinstance(edge, tuple)
    assert edge.node is mean.grad_fn and edge.output_nr == 1
    assert G.GradientEdge(mid.grad_fn, 0).node is mid.grad_fn
    with pytest.raises(RuntimeError, match="gradient edge for a Tensor that does not require"):
        G.get_gradient_edge(torch.ones(2))


def test_an_edge_keeps_meaning_the_version_it_was_taken_from(lib):
    torch = lib.torch
    x = torch.rand(2, requires_grad=True).clone()
    before = torch.autograd.graph.get_gradient_edge(x)
    x *= 2
    g_before, g_now = torch.autograd.grad(x.sum(), (before, x))
    assert torch.equal(g_before, torch.full((2,), 2.0)) and torch.equal(g_now, torch.ones(2))

    leaf = torch.rand(2, requires_grad=True)
    edge = torch.autograd.graph.get_gradient_edge(leaf)
    out = leaf.clone()
    with torch.no_grad():
        assert leaf.set_(torch.rand(2)) is leaf  # a new AccumulateGrad from now on
    with pytest.raises(RuntimeError, match="appears to not have been used in the graph"):
        torch.autograd.grad(out.sum(), leaf, retain_graph=True)
    assert torch.equal(torch.autograd.grad(out.sum(), edge)[0], torch.ones(2))


def test_edge_inputs_to_grad_and_backward(lib):
    torch = lib.torch
    G = torch.autograd.graph
    x = torch.rand(2, requires_grad=True).clone()
    y = torch.rand(2, requires_grad=True).clone()
    ex, ey = G.GradientEdge(x.grad_fn, x.output_nr), G.GradientEdge(y.grad_fn, y.output_nr)
    out = x.clone()
    gx, gy = torch.autograd.grad(out.sum(), (ex, y), allow_unused=True, retain_graph=True)
    assert torch.equal(gx, torch.ones(2)) and gy is None
    with pytest.raises(RuntimeError, match="materialize_grads cannot be used when the given "
                                           "input is a GradientEdge"):
        torch.autograd.grad(out.sum(), (x, ey), allow_unused=True, materialize_grads=True)
    for inputs in ((ex, y), (x, ey), (ex, ey)):
        torch.autograd.backward(out.sum(), inputs=inputs, retain_graph=True)
    with pytest.raises(RuntimeError, match="all inputs have to be Tensors or GradientEdges, "
                                           "but got int"):
        torch.autograd.grad(out.sum(), (1,))


def test_an_edge_as_output(lib):
    torch = lib.torch
    G = torch.autograd.graph
    x = torch.tensor([1.0, 2.0], requires_grad=True)

    def fn(reduce=True):
        tmp = x.sin().cos()
        if reduce:
            tmp = tmp.sum()
        return tmp.exp().clone().sin().sum(), G.get_gradient_edge(tmp)

    out, edge = fn()
    (g_tmp,) = torch.autograd.grad(out, (edge,))
    (two_steps,) = torch.autograd.grad(edge, (x,), grad_outputs=(g_tmp,))
    (one_go,) = torch.autograd.grad(fn()[0], (x,))
    assert torch.allclose(two_steps, one_go)
    with pytest.raises(RuntimeError, match="implicitly created only for scalar outputs"):
        torch.autograd.grad(fn(reduce=False)[1], (x,))
    with pytest.raises(RuntimeError, match=r"Mismatch in shape: grad_output\[0\] has a shape of "
                                           r"torch.Size\(\[4\]\) and output\[0\] has a shape "
                                           r"of torch.Size\(\[\]\)\."):
        torch.autograd.grad(fn()[1], (x,), grad_outputs=torch.ones(4))
    _, edge = fn()
    torch.autograd.backward(edge, retain_graph=True)
    (ref,) = torch.autograd.grad(edge, (x,), retain_graph=True)
    assert torch.allclose(x.grad, ref)
    x.grad = None
    torch.autograd.backward((edge,), retain_graph=True)
    assert torch.allclose(x.grad, ref)
    (_, edge1), (out2, _) = fn(), fn()
    (mixed,) = torch.autograd.grad((edge1, out2), (x,), retain_graph=True)
    x.grad = None
    torch.autograd.backward((edge1, out2))
    assert torch.allclose(x.grad, mixed)


def test_an_edge_keeps_its_graph_alive(lib):
    torch = lib.torch

    class Clone(torch.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            return t.clone()

        @staticmethod
        def backward(ctx, g):
            return g.clone()

    inp = torch.rand(1, requires_grad=True)
    for out in (inp.clone(), Clone.apply(inp)):
        edge = torch.autograd.graph.get_gradient_edge(out)
        torch.autograd.backward(edge)
        del out
        torch.autograd.backward(edge)
    assert torch.equal(inp.grad, torch.full((1,), 4.0))


def test_resize_function(lib):
    torch = lib.torch
    import importlib

    Resize = importlib.import_module(f"{lib.name}.autograd._functions").Resize
    x = torch.rand(6, requires_grad=True)
    y = Resize.apply(x, (2, 3))
    assert y.shape == (2, 3) and y.grad_fn.name() == "ResizeBackward"
    (y * torch.arange(6.0).view(2, 3)).sum().backward()
    assert torch.equal(x.grad, torch.arange(6.0))
    with pytest.raises(RuntimeError, match="requested resize to 4x2 \\(8 elements in total\\)"):
        Resize.apply(x, (4, 2))


# ---- non-reentrant checkpoint: torch's nestable design ------------------------------------------

def _checkpoint_module(lib):
    import importlib

    return importlib.import_module(f"{lib.name}.utils.checkpoint")


def _counting_clone(torch, counter):
    def fn(x):
        def clone(t):  # saves nothing: rerun only when early stop is off
            counter[0] += 1
            return t.clone()
        return clone(x.sin().cos())
    return fn


@pytest.mark.parametrize("outer, local, reruns", [
    (None, None, 0), (None, False, 1), (None, True, 0),
    (False, None, 1), (True, None, 0), (False, True, 1), (True, False, 0),
])
def test_early_stop_setting_is_read_at_forward_and_wins_over_the_argument(lib, outer, local,
                                                                          reruns):
    cp = _checkpoint_module(lib)
    counter = [0]
    kwargs = {} if local is None else {"early_stop": local}
    a = lib.torch.tensor(1.0, requires_grad=True)
    if outer is None:
        out = cp.checkpoint(_counting_clone(lib.torch, counter), a, use_reentrant=False,
                            **kwargs)
    else:
        with cp.set_checkpoint_early_stop(outer):
            out = cp.checkpoint(_counting_clone(lib.torch, counter), a, use_reentrant=False,
                                **kwargs)
    out.backward()
    assert counter[0] == 1 + reruns


def _flaky(orig, again):
    calls = [0]

    def fn(x):
        calls[0] += 1
        return orig(x) if calls[0] == 1 else again(x)
    return fn


def test_checkpoint_errors_for_a_rerun_that_saves_more_or_differently(lib):
    torch, cp = lib.torch, _checkpoint_module(lib)
    a = torch.randn(1, requires_grad=True)
    two, three = (lambda x: x.sin().exp()), (lambda x: x.sin().exp().sin())
    with cp.set_checkpoint_early_stop(False):
        out = cp.checkpoint(_flaky(two, three), a, use_reentrant=False)
    with pytest.raises(cp.CheckpointError, match="trying to save more tensors during "
                                                 "recomputation than during the original"):
        out.backward()
    cp.checkpoint(_flaky(two, three), a, use_reentrant=False).backward()  # early stop: fine
    alt = lambda x: x.sin() * torch.tensor([1.0, 2.0])  # noqa: E731
    for kwargs, ctx in (({"debug": True}, None), ({}, True), ({"debug": True}, False)):
        manager = cp.set_checkpoint_debug_enabled(ctx)
        with manager:
            out = cp.checkpoint(_flaky(two, alt), a, use_reentrant=False, **kwargs)
            with pytest.raises(cp.CheckpointError) as info:
                out.backward()
        debug = ctx if ctx is not None else kwargs.get("debug", False)
        assert ("You are seeing this error because you passed `debug=True` to checkpoint"
                in str(info.value)) == debug
        assert ("have different metadata than during the forward pass" in str(info.value)
                ) != debug


def test_saved_tensors_read_outside_backward_recompute_each_time(lib):
    torch, cp = lib.torch, _checkpoint_module(lib)
    count = [0]

    def fn(a):
        count[0] += 1
        return torch.exp(a * (a * a))

    a = torch.randn(5, requires_grad=True)
    d = cp.checkpoint(fn, a, use_reentrant=False)
    d.grad_fn._saved_result
    d.grad_fn._saved_result
    d.sum().backward()
    assert count[0] == 4
    with pytest.raises(RuntimeError, match=FREED):
        d.grad_fn._saved_result


def test_a_recomputed_tensor_can_be_unpacked_once_per_backward(lib):
    torch, cp = lib.torch, _checkpoint_module(lib)
    errors = []

    class Twice(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, y):
            ctx.save_for_backward(x, y)
            return x * y

        @staticmethod
        def backward(ctx, g):
            x, y = ctx.saved_tensors
            try:
                ctx.saved_tensors
            except RuntimeError as error:
                errors.append(str(error))
            return g * y, g * x

    x, y = torch.tensor(2.0, requires_grad=True), torch.tensor(3.0, requires_grad=True)
    cp.checkpoint(lambda u, v: Twice.apply(u * v, v * v), x, y, use_reentrant=False).backward()
    assert len(errors) == 1 and errors[0].startswith(
        "torch.utils.checkpoint: Unpack is being triggered for a tensor that was already "
        "unpacked once. If you are calling ctx.saved_tensors in backward")


def test_graph_exec_group_recomputes_once_and_refuses_overlap(lib):
    torch, cp = lib.torch, _checkpoint_module(lib)
    for grouped, runs in ((True, 2), (False, 3)):
        counter = [0]

        def fn(x):
            counter[0] += 1
            y = x.sin().cos()
            return y, y.sin().cos()

        x = torch.randn(3, requires_grad=True)
        y, z = cp.checkpoint(fn, x, use_reentrant=False)
        with cp.GraphExecGroup() if grouped else cp.noop_context_fn()[0]:
            (gy,) = torch.autograd.grad(z, (y,), grad_outputs=(torch.ones(3),))
            torch.autograd.grad(y, (x,), grad_outputs=(gy,))
        assert counter[0] == runs
    out = cp.checkpoint(lambda t: t.sin().cos(), x, use_reentrant=False)
    with cp.GraphExecGroup() as group:
        with pytest.raises(RuntimeError, match="GraphExecGroup contexts cannot be nested"):
            with cp.GraphExecGroup():
                pass
        assert cp.GraphExecGroup._get_current_group() is group
        out.sum().backward(retain_graph=True)
        with pytest.raises(RuntimeError, match="Performing two backward calls that overlap"):
            out.sum().backward()


def test_recomputed_tensors_die_with_their_use(lib):
    import gc
    import weakref

    torch, cp = lib.torch, _checkpoint_module(lib)
    refs = []

    class Keep(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            y = x.clone()
            ctx.save_for_backward(y)
            refs.append(weakref.ref(y))
            return y

        @staticmethod
        def backward(ctx, g):
            ctx.saved_tensors
            return None

    inp = torch.randn(3, requires_grad=True)
    gc.disable()
    try:
        cp.checkpoint(Keep.apply, inp, use_reentrant=False).sum().backward()
        assert len(refs) == 2 and all(r() is None for r in refs)
    finally:
        gc.enable()


def test_non_tensor_inputs_keep_their_identity_through_recompute(lib):
    torch, cp = lib.torch, _checkpoint_module(lib)
    seen = []

    class Keep(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, y):
            ctx.save_for_backward(y)
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            seen.append(ctx.saved_tensors[0])
            return g, None

    a, b = torch.tensor(1.0, requires_grad=True), torch.tensor(1.0)
    cp.checkpoint(Keep.apply, a, b, use_reentrant=False).backward()
    assert seen[0] is b


@pytest.mark.parametrize("early_stop", [True, False])
def test_nested_checkpoints_under_higher_order_grads(lib, early_stop):
    torch, cp = lib.torch, _checkpoint_module(lib)

    def c(fn):
        return lambda t: cp.checkpoint(fn, t, use_reentrant=False)

    def grad(fn):
        def wrapper(t):
            with torch.enable_grad():
                (g,) = torch.autograd.grad(fn(t), (t,), create_graph=True)
            return g
        return wrapper

    def f(t):
        return t.sin().exp().sin()

    x = torch.randn((), requires_grad=True)
    with cp.set_checkpoint_early_stop(early_stop):
        for plain, wrapped in ((f, c(c(f))), (grad(grad(f)), grad(c(grad(c(f))))),
                               (grad(grad(f)), c(grad(grad(c(f)))))):
            assert torch.allclose(plain(x), wrapped(x))


def test_an_outer_checkpoint_reruns_before_the_inner_one(lib):
    torch, cp, nn = lib.torch, _checkpoint_module(lib), lib.nn
    log = []
    a, b = nn.Linear(2, 2), nn.Linear(2, 2)
    a.register_forward_pre_hook(lambda m, args: log.append("a"))
    b.register_forward_pre_hook(lambda m, args: log.append("b"))
    x = torch.tensor([[0.5, -1.0]], requires_grad=True)

    def outer(t):
        return cp.checkpoint(lambda u: b(u).tanh(), a(t).tanh(), use_reentrant=False)

    cp.checkpoint(outer, x, use_reentrant=False).sum().backward()
    assert log == ["a", "b", "a", "b"]


# ---- custom Functions -------------------------------------------------------------------

def test_clear_saved_tensors_on_access(lib):
    import weakref

    torch = lib.torch
    errors = []

    class Once(torch.autograd.Function):
        clear_saved_tensors_on_access = True

        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            ref = weakref.ref(x)
            del x
            errors.append(ref() is None)
            try:
                ctx.saved_tensors
            except RuntimeError as error:
                errors.append(str(error))
            return g

    y = Once.apply(torch.randn(3, requires_grad=True).clone())
    y.sum().backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="saved_tensors can only be accessed once when "
                                           "clear_saved_tensors_on_access=True"):
        y.sum().backward()
    assert errors[0] is True and "can only be accessed once" in errors[1]


# ---- gradcheck's checks after the Jacobians -----------------------------------------------------

def _hooked_clone(torch, hook):
    def fn(x):
        y = x.clone()
        y.register_hook(hook)
        return y
    return fn


def test_gradcheck_checks_backward_with_undefined_output_grads(lib):
    torch = lib.torch
    gradcheck = torch.autograd.gradcheck

    def refuse_none(g):
        if g is None:
            raise RuntimeError("x is undefined")

    fn = _hooked_clone(torch, refuse_none)
    x = torch.ones(2, dtype=torch.double, requires_grad=True)
    with pytest.warns(UserWarning, match="Backwards compatibility: New undefined gradient "
                                         "support checking feature"):
        with pytest.raises(RuntimeError, match="Expected backward function to handle "
                                               "undefined output grads"):
            gradcheck(fn, (x,))
        assert gradcheck(fn, (x,), raise_exception=False) is False
    assert gradcheck(fn, (x,), check_undefined_grad=False) is True
    assert gradcheck(fn, (x,), check_undefined_grad=False, check_batched_grad=True,
                     fast_mode=True) is True


def test_gradcheck_checks_backward_scales_with_grad_output(lib):
    torch = lib.torch
    gradcheck = torch.autograd.gradcheck
    fn = _hooked_clone(torch, lambda g: g + 1e-2)
    x = torch.ones(1, dtype=torch.double, requires_grad=True)
    with pytest.raises(RuntimeError, match="^backward not multiplied by grad_output"):
        gradcheck(fn, (x,), atol=1e-1)
    assert gradcheck(fn, (x,), atol=1e-1, raise_exception=False) is False
    import importlib

    module = importlib.import_module(f"{lib.name}.autograd.gradcheck")
    with pytest.raises(module.GradcheckError,
                       match="^Jacobian mismatch for output 0 with respect to input 0"):
        gradcheck(fn, (torch.ones(2, 2, dtype=torch.double, requires_grad=True),))


def test_gradcheck_lets_other_errors_through_and_needs_a_mode(lib):
    torch = lib.torch
    x = torch.ones(1, dtype=torch.double, requires_grad=True)

    def broken(t):
        raise RuntimeError("Not a GradcheckError!")

    with pytest.raises(RuntimeError, match="Not a GradcheckError!"):
        torch.autograd.gradcheck(broken, (x,), raise_exception=False)
    with pytest.raises(AssertionError, match="Expected at least one of check_forward_ad or "
                                             "check_backward_ad to be True"):
        torch.autograd.gradcheck(lambda t: t, (x,), check_backward_ad=False)


# ---- warnings torch gives once ---------------------------------------------------------------

def test_create_graph_warning_every_time_under_warn_always(lib):
    import warnings

    torch = lib.torch
    # disthook keeps the pair in disthook.autograd until its top level re-exports them
    module = torch if lib.name == "torch" else torch.autograd
    old = module.is_warn_always_enabled()
    module.set_warn_always(True)
    try:
        for _ in range(2):
            b = torch.randn(3, requires_grad=True, dtype=torch.double)
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("default")
                (b * b).sum().backward(create_graph=True)
            assert sum("Using backward() with create_graph=True" in str(w.message)
                       for w in seen) == 1
            b.grad = None
    finally:
        module.set_warn_always(old)
    assert module.is_warn_always_enabled() == old
