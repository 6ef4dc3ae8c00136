"""torch.autograd.graph: saved_tensors_hooks, save_on_cpu, disable_saved_tensors_hooks,
register_multi_grad_hook; gradcheck/gradgradcheck; the create_graph warning.

Tests taking ``lib`` run under disthook and torch (when installed) with the same asserts.
"""
from __future__ import annotations

import importlib
import subprocess
import sys

import pytest
from test_module_api import lib  # noqa: F401 - the fixture: disthook, then torch


def packs(lib, fn, *shapes, requires_grad=None):
    """The log of pack/unpack calls for ``fn(*inputs)`` and one backward."""
    torch = lib.torch
    xs = [torch.randn(*s, requires_grad=True if requires_grad is None else requires_grad[i])
          for i, s in enumerate(shapes)]
    log = []

    def pack(t):
        log.append(("pack", tuple(t.shape), torch.is_grad_enabled(),
                    "input" if any(t is x for x in xs) else t.grad_fn.name()))
        return t

    def unpack(t):
        log.append(("unpack", tuple(t.shape)))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        y = fn(*xs)
    y.sum().backward()
    return log


def _functional(t):
    """torch.nn.functional of the library ``t`` belongs to."""
    return importlib.import_module(type(t).__module__.split(".")[0] + ".nn.functional")


def _gelu(a):
    return _functional(a).gelu(a)


def _linear(x, w, b):
    return _functional(x).linear(x, w, b)


@pytest.mark.parametrize("name, fn, shapes, expected", [
    ("mul", lambda a, b: a * b, [(2, 3), (2, 3)],
     [("pack", (2, 3), False, "input")] * 2 + [("unpack", (2, 3))] * 2),
    ("relu", lambda a: a.relu(), [(2, 3)],
     [("pack", (2, 3), False, "ReluBackward0"), ("unpack", (2, 3))]),
    ("sigmoid", lambda a: a.sigmoid(), [(2, 3)],
     [("pack", (2, 3), False, "SigmoidBackward0"), ("unpack", (2, 3))]),
    ("tanh", lambda a: a.tanh(), [(2, 3)],
     [("pack", (2, 3), False, "TanhBackward0"), ("unpack", (2, 3))]),
    ("exp", lambda a: a.exp(), [(2, 3)],
     [("pack", (2, 3), False, "ExpBackward0"), ("unpack", (2, 3))]),
    ("softmax", lambda a: a.softmax(-1), [(2, 3)],
     [("pack", (2, 3), False, "SoftmaxBackward0"), ("unpack", (2, 3))]),
    ("pow", lambda a: a ** 2, [(2, 3)], [("pack", (2, 3), False, "input"), ("unpack", (2, 3))]),
    ("gelu", _gelu, [(2, 3)],
     [("pack", (2, 3), False, "input"), ("unpack", (2, 3))]),
    ("linear", lambda x, w, b: _linear(x, w, b), [(2, 3), (4, 3), (4,)],
     [("pack", (2, 3), False, "input"), ("pack", (3, 4), False, "TBackward0"),
      ("unpack", (2, 3)), ("unpack", (3, 4))]),
    ("linear_3d", lambda x, w, b: _linear(x, w, b), [(5, 2, 3), (4, 3), (4,)],
     [("pack", (10, 3), False, "ViewBackward0"), ("pack", (3, 4), False, "TBackward0"),
      ("unpack", (10, 3)), ("unpack", (3, 4))]),
    ("sum", lambda a: a.sum(), [(2, 3)], []),
    ("add", lambda a: a + 1, [(2, 3)], []),
])
def test_what_each_op_saves(lib, name, fn, shapes, expected):
    assert packs(lib, fn, *shapes) == expected


def test_mul_saves_only_what_the_other_gradient_needs(lib):
    log = packs(lib, lambda a, b: a * b, (2, 3), (2, 3), requires_grad=[True, False])
    assert log == [("pack", (2, 3), False, "input"), ("unpack", (2, 3))]


def test_matmul_saves_both_operands(lib):
    log = packs(lib, lambda a, b: a @ b, (2, 3), (3, 4))
    assert sorted(e for e in log if e[0] == "pack") == [("pack", (2, 3), False, "input"),
                                                       ("pack", (3, 4), False, "input")]
    assert len(log) == 4


def test_python_scalars_are_not_packed():
    import disthook as torch

    a = torch.ones(2, requires_grad=True)
    seen = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: seen.append(t) or t, lambda t: t):
        (a * 2).sum()
        (a / 3).sum()
    assert seen == []


def test_only_the_innermost_pair_applies(lib):
    torch = lib.torch
    G = torch.autograd.graph
    log = []
    a = torch.randn(2, requires_grad=True)
    with G.saved_tensors_hooks(lambda t: log.append("outer") or t, lambda t: t):
        with G.saved_tensors_hooks(lambda t: log.append("inner") or t, lambda t: t):
            (a * a).sum()
        (a * a).sum()
    assert log == ["inner", "inner", "outer", "outer"]


def test_unpack_runs_at_each_read_and_packed_values_are_freed(lib):
    torch = lib.torch
    log = []
    a = torch.randn(2, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: log.append("p") or t,
                                                  lambda t: log.append("u") or t):
        y = (a * a).sum()
    y.backward(retain_graph=True)
    y.backward()
    assert log == ["p", "p", "u", "u", "u", "u"]
    with pytest.raises(RuntimeError, match="^Trying to backward through the graph a second"):
        y.backward()


def test_pack_may_return_anything_and_unpack_decides_the_value(lib):
    torch = lib.torch
    a = torch.ones(2, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: "token",
                                                  lambda s: torch.full((2,), 5.0)):
        y = (a * a).sum()
    y.backward()
    assert a.grad.tolist() == [10.0, 10.0]


def test_unpack_must_return_a_tensor(lib):
    torch = lib.torch
    a = torch.randn(2, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: 3):
        y = (a * a).sum()
    with pytest.raises(TypeError, match="^Output of saved tensor unpack_hook expected to be a "
                       "Tensor but got result of type int$"):
        y.backward()


def test_pack_may_not_modify_its_input(lib):
    torch = lib.torch
    b = torch.randn(2, requires_grad=True) * 1
    with pytest.raises(RuntimeError, match="^A saved tensor pack hook is modifying its input "
                       "in place. Tensors provided"):
        with torch.autograd.graph.saved_tensors_hooks(lambda t: t.mul_(2), lambda t: t):
            (b * b).sum()


def test_no_version_check_under_hooks(lib):
    torch = lib.torch
    a = torch.ones(2, requires_grad=True)
    b = a * 1
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t.detach().clone(), lambda t: t):
        y = (b * b).sum()
    b.add_(1)  # without hooks this backward would raise
    y.backward()
    assert a.grad.tolist() == [2.0, 2.0]


def test_custom_function_saves_are_packed_after_forward(lib):
    torch = lib.torch
    log = []

    class Double(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            y = x * 2
            log.append("forward")
            ctx.save_for_backward(x, y)
            return y

        @staticmethod
        def backward(ctx, g):
            ctx.saved_tensors
            return g * 2

    a = torch.randn(2, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(
            lambda t: log.append(("p", t is a)) or t, lambda t: log.append("u") or t):
        y = Double.apply(a)
    y.sum().backward()
    assert log == ["forward", ("p", True), ("p", False), "u", "u"]


def test_no_packing_without_a_graph(lib):
    torch = lib.torch
    a = torch.randn(2, requires_grad=True)
    seen = []
    with torch.no_grad(), torch.autograd.graph.saved_tensors_hooks(
            lambda t: seen.append(1) or t, lambda t: t):
        a * a
    assert seen == []


def test_disable_saved_tensors_hooks(lib):
    G = lib.torch.autograd.graph
    with pytest.raises(RuntimeError, match="^no hooks here$"):
        with G.disable_saved_tensors_hooks("no hooks here"):
            with G.saved_tensors_hooks(lambda t: t, lambda t: t):
                pass
    with G.saved_tensors_hooks(lambda t: t, lambda t: t):
        with pytest.raises(RuntimeError, match="^no hooks here$"):
            with G.disable_saved_tensors_hooks("no hooks here"):
                pass
    with G.saved_tensors_hooks(lambda t: t, lambda t: t):  # usable again afterwards
        pass


def test_save_on_cpu_gives_the_same_gradients(lib):
    torch = lib.torch
    a = torch.randn(3, requires_grad=True)
    with torch.autograd.graph.save_on_cpu():
        y = (a.exp() * a).sum()
    y.backward()
    expected = (a.exp() * (a + 1)).detach()
    assert torch.allclose(a.grad, expected)
    assert issubclass(torch.autograd.graph.save_on_cpu, torch.autograd.graph.saved_tensors_hooks)


def test_double_backward_through_unpacked_tensors(lib):
    torch = lib.torch
    a = torch.tensor([1.0, 2.0], requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
        y = (a * a * a).sum()
    (g,) = torch.autograd.grad(y, a, create_graph=True)
    (gg,) = torch.autograd.grad(g.sum(), a)
    assert g.tolist() == [3.0, 12.0] and gg.tolist() == [6.0, 12.0]


# ---- register_multi_grad_hook ----------------------------------------------------------------

def _grads(grads):
    return [None if g is None else g.tolist() for g in grads]


def test_multi_grad_hook_all(lib):
    torch = lib.torch
    G = torch.autograd.graph
    a, b, c = (torch.ones(2, requires_grad=True) for _ in range(3))
    log = []
    h = G.register_multi_grad_hook((a, b, c), lambda grads: log.append(_grads(grads)))
    (a * 2 + b * 3).sum().backward()
    (a * 2 + b * 3 + c).sum().backward()
    assert log == [[[2.0, 2.0], [3.0, 3.0], None], [[2.0, 2.0], [3.0, 3.0], [1.0, 1.0]]]
    h.remove()
    (a * 2).sum().backward()
    assert len(log) == 2


def test_multi_grad_hook_any_and_under_autograd_grad(lib):
    torch = lib.torch
    G = torch.autograd.graph
    a, b = torch.ones(2, requires_grad=True), torch.ones(2, requires_grad=True)
    log = []
    G.register_multi_grad_hook((a, b), lambda g: log.append(("any", g.tolist())), mode="any")
    (a * 2 + b * 3).sum().backward()
    assert log == [("any", [3.0, 3.0])]
    log.clear()
    x = a * 1
    G.register_multi_grad_hook((x, b), lambda grads: log.append(("all", _grads(grads))))
    torch.autograd.grad((x * 4).sum(), a)
    assert log == [("all", [[4.0, 4.0], None]), ("any", [4.0, 4.0])]


def test_multi_grad_hook_errors_and_return_value(lib):
    torch = lib.torch
    G = torch.autograd.graph
    a = torch.ones(2, requires_grad=True)
    with pytest.raises(ValueError, match=r"^Expects mode to be one of \('all', 'any'\) but got "
                       "bad$"):
        G.register_multi_grad_hook((a,), lambda g: None, mode="bad")
    with pytest.raises(AssertionError, match="^Expected gradient function to be set$"):
        G.register_multi_grad_hook((a, torch.ones(2)), lambda g: None)
    G.register_multi_grad_hook((a,), lambda grads: 5)
    (a * 2).sum().backward()
    assert a.grad.tolist() == [2.0, 2.0]


# ---- gradcheck -------------------------------------------------------------------------------

def test_gradcheck_and_gradgradcheck_pass_and_fail(lib):
    torch = lib.torch
    x = torch.randn(3, dtype=torch.float64, requires_grad=True)
    w = torch.randn(3, 2, dtype=torch.float64, requires_grad=True)

    def f(a, b):
        return (a.sigmoid() @ b).tanh()

    assert torch.autograd.gradcheck(f, (x, w))
    assert torch.autograd.gradgradcheck(f, (x, w))

    class Wrong(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return a * 2

        @staticmethod
        def backward(ctx, g):
            return g * 3

    with pytest.raises(RuntimeError, match="^Jacobian mismatch for output 0 with respect to "
                       "input 0,\nnumerical:"):
        torch.autograd.gradcheck(Wrong.apply, (x,))
    assert torch.autograd.gradcheck(Wrong.apply, (x,), raise_exception=False) is False
    with pytest.raises(ValueError, match="^gradcheck expects at least one input tensor to "
                       "require gradient"):
        torch.autograd.gradcheck(f, (x.detach(), w.detach()))
    with pytest.warns(UserWarning, match="^Input #0 requires gradient and is not a double"):
        torch.autograd.gradcheck(lambda t: t * 2, (torch.ones(2, requires_grad=True),),
                                 raise_exception=False)


# ---- backward(create_graph=True) warns once per process --------------------------------------

CREATE_GRAPH_PROGRAM = """
import sys, warnings, importlib
torch = importlib.import_module(sys.argv[1])
warnings.simplefilter("always")
x = torch.ones(2, requires_grad=True)
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    torch.autograd.grad((x * x).sum(), x, create_graph=True)
    m = torch.nn.Linear(2, 2)
    m.register_full_backward_hook(lambda *a: None)
    m(x).sum().backward(create_graph=True)
    m(x).sum().backward(create_graph=True)
print(len(w), w[0].category.__name__, str(w[0].message).split(" (Triggered")[0])
"""


@pytest.mark.parametrize("name", ["disthook", "torch"])
def test_create_graph_backward_warns_once(name, request):
    if name == "torch":
        pytest.importorskip("torch")
        request.getfixturevalue("bytecode_as_the_environment_sets_it")  # torch's own bytecode
    out = subprocess.run([sys.executable, "-c", CREATE_GRAPH_PROGRAM, name], check=True,
                         capture_output=True, text=True).stdout
    assert out == (
        "1 UserWarning Using backward() with create_graph=True will create a reference cycle "
        "between the parameter and its gradient which can cause a memory leak. We recommend "
        "using autograd.grad when creating the graph to avoid this. If you have to use this "
        "function, make sure to reset the .grad fields of your parameters to None after use "
        "to break the cycle and avoid the leak.\n")


# ---- grad_fn._saved_<name> and _raw_saved_<name> ---------------------------------------------

def test_named_saved_tensors_and_their_own_hooks(lib, monkeypatch):
    torch = lib.torch
    a = torch.ones(2, requires_grad=True)
    b = torch.ones(2, requires_grad=True) * 2
    y = a * b
    if lib.name == "disthook" and not type(y.grad_fn).saved_names:
        # the op declares its names in ops/ (torch's: self, other); set them here until then
        monkeypatch.setattr(type(y.grad_fn), "saved_names", ("self", "other"), raising=False)
    assert y.grad_fn._saved_self is a and y.grad_fn._saved_other is b
    log = []
    raw = y.grad_fn._raw_saved_self
    raw.register_hooks(lambda t: log.append("p") or t, lambda t: log.append("u") or t)
    assert log == ["p"]
    with pytest.raises(RuntimeError, match="^Calling register_hooks on a saved tensor whose "
                       "hooks have already been set."):
        raw.register_hooks(lambda t: t, lambda t: t)
    y.sum().backward()
    assert log == ["p", "u"] and a.grad.tolist() == [2.0, 2.0]
    with pytest.raises(RuntimeError, match="^Trying to backward through the graph a second"):
        y.grad_fn._saved_self
    with pytest.raises(AttributeError, match="object has no attribute '_saved_nothing'"):
        y.grad_fn._saved_nothing
