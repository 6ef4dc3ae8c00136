"""Seed programs with tensor hooks, run unchanged under disthook (and torch when installed).

* seed 002 (ptorch.com, "pytorch中autograd以及hook函数详解"): ``y.register_hook(print)`` prints
  ``tensor([0.5000, 0.5000])`` during ``torch.mean(y).backward()``.
* seed 004 (Elliot Waite, "PyTorch Hooks Explained"): ``_backward_hooks`` is an OrderedDict
  run in registration order; a gradient clipper
  ``p.register_hook(lambda grad: torch.clamp(grad, -clip, clip))`` on every parameter; the
  caveat that an in-place change of a gradient inside a hook reaches the other input of
  ``e = c + d``.

The expected output is hard-coded (copied from torch 2.13), so every test runs with disthook
alone; the ``torch`` case of ``T`` re-checks the hard-coded values, and the ``*_same_as_torch``
tests compare the two libraries directly when torch is installed.
"""
from __future__ import annotations

import contextlib
import importlib
import io
import warnings
from collections import OrderedDict

import pytest


def _load(name: str):
    if name == "torch":
        return pytest.importorskip("torch")
    return importlib.import_module(name)


@pytest.fixture(params=["disthook", "torch"])
def T(request):
    return _load(request.param)


def _stdout(fn, *args):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        result = fn(*args)
    return buf.getvalue(), result


# ---- seed 002 -------------------------------------------------------------------------------


def seed002_register_hook_print(torch):
    """The seed's second session, verbatim apart from the prompts."""
    x = torch.tensor([1, 2], dtype=torch.float32, requires_grad=True)
    y = x * 2
    print(y.requires_grad)
    y.register_hook(print)
    z = torch.mean(y)
    z.backward()
    print(x.grad)


def seed002_no_hook(torch):
    """The seed's first session: y.grad and z.grad stay None (non-leaves)."""
    x = torch.tensor([1, 2], dtype=torch.float32, requires_grad=True)
    y = x * 2
    z = torch.mean(y)
    print(z)
    z.backward()
    print(x.grad)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        print(y.grad)
        print(z.grad)


SEED002_HOOK_OUT = "True\ntensor([0.5000, 0.5000])\ntensor([1., 1.])\n"
SEED002_NO_HOOK_OUT = "tensor(3., grad_fn=<MeanBackward0>)\ntensor([1., 1.])\nNone\nNone\n"


def test_seed002_hook_prints_grad(T):
    out, _ = _stdout(seed002_register_hook_print, T)
    assert out == SEED002_HOOK_OUT


def test_seed002_without_hook(T):
    out, _ = _stdout(seed002_no_hook, T)
    assert out == SEED002_NO_HOOK_OUT


def test_seed002_register_hook_returns_removable_handle(T):
    x = T.tensor([1, 2], dtype=T.float32, requires_grad=True)
    h = (x * 2).register_hook(print)
    assert type(h).__name__ == "RemovableHandle"


SEED002_SOURCE = """\
import torch
x = torch.tensor([1,2],dtype=torch.float32,requires_grad=True)
y = x * 2
print(y.requires_grad)
y.register_hook(print)
z = torch.mean(y)
z.backward()
print(x.grad)
"""


@pytest.mark.parametrize("name", ["disthook", "torch"])
def test_seed002_source_runs_unchanged(name):
    """The seed's lines as a program; disthook gets it through ``import disthook as torch``."""
    _load(name)
    source = SEED002_SOURCE
    if name == "disthook":
        source = source.replace("import torch", "import disthook as torch")
    out, _ = _stdout(exec, compile(source, "<seed002>", "exec"), {})
    assert out == SEED002_HOOK_OUT


def test_seed002_same_as_torch():
    torch = pytest.importorskip("torch")
    import disthook

    for program in (seed002_register_hook_print, seed002_no_hook):
        assert _stdout(program, disthook)[0] == _stdout(program, torch)[0]


# ---- seed 004: hooks for tensors ---------------------------------------------------------------


def test_seed004_backward_hooks_is_ordered_dict_run_in_order(T):
    a = T.tensor([1.0, 2.0], requires_grad=True)
    log = []

    def hook_a(grad):
        log.append(("a", grad.tolist()))
        return grad * 2

    def hook_b(grad):
        log.append(("b", grad.tolist()))

    h1 = a.register_hook(hook_a)
    h2 = a.register_hook(hook_b)
    assert isinstance(a._backward_hooks, OrderedDict)
    assert list(a._backward_hooks.items()) == [(h1.id, hook_a), (h2.id, hook_b)]
    (a * 3).sum().backward()
    assert log == [("a", [3.0, 3.0]), ("b", [6.0, 6.0])]
    assert a.grad.tolist() == [6.0, 6.0]
    h1.remove()
    assert list(a._backward_hooks) == [h2.id]


def test_seed004_hook_on_intermediate_runs_before_its_backward(T):
    a = T.tensor([1.0, 2.0], requires_grad=True)
    b = T.tensor([3.0, 4.0], requires_grad=True)
    c = a * b
    c.register_hook(lambda grad: grad * 10)
    c.sum().backward()
    assert a.grad.tolist() == [30.0, 40.0]
    assert b.grad.tolist() == [10.0, 20.0]


def test_seed004_inplace_change_reaches_other_input_of_add(T):
    # "for e = c + d the output gradients for c and d are the same: if the grad of d is
    # changed in place, the grad of c changes too"
    a = T.tensor([1.0], requires_grad=True)
    b = T.tensor([1.0], requires_grad=True)
    c = a * 1
    d = b * 1
    e = c + d
    log = []
    c.register_hook(lambda g: log.append(("c", g.item())))
    d.register_hook(lambda g: (log.append(("d", g.item())), g.mul_(100))[0])
    e.sum().backward()
    assert log == [("d", 1.0), ("c", 100.0)]
    assert (a.grad.item(), b.grad.item()) == (100.0, 100.0)


def test_seed004_inplace_change_after_sibling_leaf_accumulated(T):
    a = T.tensor([1.0], requires_grad=True)
    b = T.tensor([1.0], requires_grad=True)
    e = a + b
    b.register_hook(lambda g: g.mul_(100))
    e.sum().backward()
    assert (a.grad.item(), b.grad.item()) == (1.0, 100.0)


def test_seed004_inplace_change_of_expanded_grad_raises(T):
    a = T.tensor([1.0, 2.0], requires_grad=True)
    a.register_hook(lambda g: g.mul_(100))
    with pytest.raises(RuntimeError) as info:
        a.sum().backward()
    assert str(info.value) == (
        "unsupported operation: more than one element of the written-to tensor refers to a "
        "single memory location. Please clone() the tensor before performing the operation.")


# ---- seed 004: gradient clipper ----------------------------------------------------------------


def clipped_grads(torch, clip):
    """A two-layer computation; every parameter gets the seed's clipping hook."""
    w1 = torch.tensor([[0.5, -1.0], [2.0, 0.25]], requires_grad=True)
    b1 = torch.tensor([0.1, -0.2], requires_grad=True)
    w2 = torch.tensor([[1.5], [-3.0]], requires_grad=True)
    params = [w1, b1, w2]
    if clip is not None:
        for p in params:
            p.register_hook(lambda grad: torch.clamp(grad, -clip, clip))
    x = torch.tensor([[1.0, 2.0], [-1.0, 0.5]])
    out = (x @ w1 + b1).relu() @ w2
    loss = (out ** 2).mean()
    loss.backward()
    return loss.item(), [p.grad.tolist() for p in params]


UNCLIPPED = [[[13.1625, -5.625], [19.29375, 2.8125]], [7.5375, 5.625], [[30.615], [-1.734375]]]
CLIPPED_3 = [[[3.0, -3.0], [3.0, 2.8125]], [3.0, 3.0], [[3.0], [-1.734375]]]


def flat(nested) -> list:
    """Nested lists of floats, flattened in order."""
    if not isinstance(nested, list):
        return [nested]
    return [v for item in nested for v in flat(item)]


def test_seed004_gradient_clipper(T):
    loss, grads = clipped_grads(T, None)
    assert loss == pytest.approx(25.562809, rel=1e-6)
    assert flat(grads) == pytest.approx(flat(UNCLIPPED), rel=1e-5)
    loss, grads = clipped_grads(T, 3.0)
    assert loss == pytest.approx(25.562809, rel=1e-6)
    assert grads == CLIPPED_3


def test_seed004_clipper_on_intermediate_changes_upstream(T):
    w = T.tensor([1.0, -2.0], requires_grad=True)
    h = w * 4
    h.register_hook(lambda grad: T.clamp(grad, -1.0, 1.0))
    (h * T.tensor([3.0, -0.5])).sum().backward()
    assert w.grad.tolist() == [4.0, -2.0]  # clamp([3, -0.5]) * 4


def test_seed004_same_as_torch():
    torch = pytest.importorskip("torch")
    import disthook

    for clip in (None, 0.5, 3.0, 100.0):
        dh_loss, dh_grads = clipped_grads(disthook, clip)
        t_loss, t_grads = clipped_grads(torch, clip)
        assert dh_loss == pytest.approx(t_loss, rel=1e-6)
        assert flat(dh_grads) == pytest.approx(flat(t_grads), rel=1e-6)
