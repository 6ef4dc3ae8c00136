"""Inference tensors, as torch has them: a tensor made under ``inference_mode()`` is one
(``is_inference()``), as are its views and ``detach()``; outside the mode it may not be changed
in place, saved for backward or made to require grad; ``clone()`` and out-of-place results
are normal tensors; a view of a normal tensor made in the mode may not be changed in place
under grad mode when its base requires grad.

Each program runs under disthook and under torch (when installed): the values, the errors'
types and their messages must be equal; the messages are also checked against the text
torch 2.13 gives, so that the test means something without torch.
"""
from __future__ import annotations

import importlib
import threading

import pytest

import disthook

INPLACE = "Inplace update to inference tensor outside InferenceMode is not allowed."
SAVED = "Inference tensors cannot be saved for backward."
REQUIRES_GRAD = ("Setting requires_grad=True on inference tensor outside InferenceMode is not "
                 "allowed.")
VERSION = "Inference tensors do not track version counter."
VIEW = "A view was created in inference mode and is being modified inplace in normal mode."


def outcome(fn, lib):
    """What ``fn(lib)`` gives: its value (lists for tensors), or the error's type and text."""
    try:
        value = fn(lib)
    except RuntimeError as exc:
        return ("error", str(exc))
    if isinstance(value, tuple):
        return tuple(v.tolist() if hasattr(v, "tolist") else v for v in value)
    return value.tolist() if hasattr(value, "tolist") else value


def both(fn):
    """``fn``'s outcome under disthook, checked equal to torch's where torch is installed."""
    mine = outcome(fn, disthook)
    try:
        torch = importlib.import_module("torch")
    except ImportError:
        return mine
    assert mine == outcome(fn, torch)
    return mine


def made_inside(lib):
    with lib.inference_mode():
        return lib.ones(3) * 2


# ---- which tensors are inference tensors ---------------------------------------------------

def test_is_inference_of_what_is_made_inside_and_what_comes_from_it():
    def program(lib):
        with lib.inference_mode():
            a = lib.ones(3) * 2
            inside = a.is_inference()
            normal_view = None
        n = lib.ones(3)
        with lib.inference_mode():
            normal_view = n.view(3).is_inference()
        return (inside, a.is_inference(), lib.is_inference(a), a.view(3).is_inference(),
                a[0:2].is_inference(), a.detach().is_inference(), a.data.is_inference(),
                a.reshape(3).is_inference(), a.unsqueeze(0).is_inference(),
                a.clone().is_inference(), (a + 1).is_inference(), lib.exp(a).is_inference(),
                normal_view, n.is_inference(), a.requires_grad, a.grad_fn)

    assert both(program) == (True, True, True, True, True, True, True, True, True, False,
                             False, False, False, False, False, None)


def test_inference_mode_false_inside_makes_normal_tensors():
    def program(lib):
        with lib.inference_mode(), lib.inference_mode(False):
            b = lib.ones(3) * 2
            enabled = (lib.is_inference_mode_enabled(), lib.is_grad_enabled())
        return (b.is_inference(), *enabled)

    assert both(program) == (False, False, True)


def test_the_decorator_form_makes_inference_tensors():
    def program(lib):
        @lib.inference_mode()
        def infer(x):
            return x * 2

        out = infer(lib.ones(2))
        return out.is_inference(), lib.ones(2).is_inference()

    assert both(program) == (True, False)


# ---- in-place changes ---------------------------------------------------------------------

INPLACE_OPS = {
    "mul_": lambda lib, a: a.mul_(2),
    "add_": lambda lib, a: a.add_(1),
    "view_mul_": lambda lib, a: a.view(3).mul_(2),
    "slice_mul_": lambda lib, a: a[0:2].mul_(2),
    "detached_view_mul_": lambda lib, a: a.detach().view(3).mul_(2),
    "setitem": lambda lib, a: a.__setitem__(0, 1.0),
    "copy_": lambda lib, a: a.copy_(lib.zeros(3)),
    "zero_": lambda lib, a: a.zero_(),
    "fill_": lambda lib, a: a.fill_(1.0),
    "unsqueeze_": lambda lib, a: a.unsqueeze_(0),
    "squeeze_": lambda lib, a: a.squeeze_(),
    "t_": lambda lib, a: a.t_(),
    "transpose_": lambda lib, a: a.transpose_(0, 0),
    "resize_": lambda lib, a: a.resize_(4),
    "set_": lambda lib, a: a.set_(lib.ones(3)),
    "out=": lambda lib, a: lib.add(lib.ones(3), 1, out=a),
}


@pytest.mark.parametrize("name", sorted(INPLACE_OPS))
def test_an_inplace_change_outside_the_mode_is_refused(name):
    change = INPLACE_OPS[name]

    def program(lib):
        return change(lib, made_inside(lib))

    kind, msg = both(program)
    assert kind == "error" and msg.startswith(INPLACE)


@pytest.mark.parametrize("name", ["mul_", "add_", "setitem", "copy_"])
def test_the_refused_change_leaves_the_tensor_as_it_was(name):
    """(torch may write before it refuses; disthook refuses before writing)"""
    a = made_inside(disthook)
    with pytest.raises(RuntimeError, match="Inplace update to inference tensor"):
        INPLACE_OPS[name](disthook, a)
    assert a.tolist() == [2.0, 2.0, 2.0]


def test_detach_and_data_outside_the_mode_may_change_themselves_but_not_be_saved():
    """torch's looser kind: ``a.detach()`` / ``a.data`` outside the mode is an inference
    tensor that counts versions and may be changed in place (a's values change with it), but
    not saved for backward nor made to require grad; a view of it may not be changed."""
    def program(lib):
        a = made_inside(lib)
        d = a.detach()
        d.mul_(2)
        a.data.add_(1)
        d.detach().mul_(2)
        same_size = a.resize_(3)
        return a, d.is_inference(), a.data.is_inference(), d._version, same_size

    assert both(program) == ([10.0, 10.0, 10.0], True, True, 1, [10.0, 10.0, 10.0])

    def saved(lib):
        return lib.ones(3, requires_grad=True) * made_inside(lib).detach()

    kind, msg = both(saved)
    assert kind == "error" and msg.startswith(SAVED)

    def requires(lib):
        return made_inside(lib).data.requires_grad_()

    assert both(requires) == ("error", REQUIRES_GRAD)


@pytest.mark.parametrize("how", ["under_no_grad", "under_inference_mode_false",
                                 "detached_inside"])
def test_these_changes_outside_the_mode_are_refused_too(how):
    """no_grad and inference_mode(False) are outside the mode; detach() taken inside it is a
    full inference tensor."""
    def program(lib):
        a = made_inside(lib)
        if how == "under_no_grad":
            with lib.no_grad():
                return a.mul_(2)
        if how == "under_inference_mode_false":
            with lib.inference_mode(), lib.inference_mode(False):
                return a.mul_(2)
        with lib.inference_mode():
            d = a.detach()
        return d.mul_(2)

    kind, msg = both(program)
    assert kind == "error" and msg.startswith(INPLACE)


def test_an_inplace_change_inside_the_mode_is_allowed():
    def program(lib):
        a = made_inside(lib)
        with lib.inference_mode():
            a.mul_(2)
            a[0] = 1.0
        return a, a.clone().mul_(3)

    assert both(program) == ([1.0, 4.0, 4.0], [3.0, 12.0, 12.0])


def test_a_view_of_a_normal_tensor_made_inside_may_change_when_nothing_is_recorded():
    def program(lib):
        n = lib.ones(3)
        with lib.inference_mode():
            v = n[0:2]
        v.mul_(2)
        return n

    assert both(program) == [2.0, 2.0, 1.0]


@pytest.mark.parametrize("recorded_by", ["base", "operand"])
def test_a_view_made_inside_is_refused_a_recorded_change(recorded_by):
    def program(lib):
        base = lib.ones(3, requires_grad=recorded_by == "base").clone()
        with lib.inference_mode():
            v = base[0:2]
        return v.mul_(lib.full((2,), 2.0, requires_grad=recorded_by == "operand"))

    kind, msg = both(program)
    assert kind == "error" and msg.startswith(VIEW) and "inference_mode block" in msg


def test_the_version_of_an_inference_tensor_is_refused():
    def program(lib):
        return made_inside(lib)._version

    assert both(program) == ("error", VERSION)


# ---- autograd -----------------------------------------------------------------------------

def test_saving_an_inference_tensor_for_backward_is_refused():
    def program(lib):
        w = lib.ones(3, requires_grad=True)
        return (w * made_inside(lib)).sum()

    kind, msg = both(program)
    assert kind == "error" and msg.startswith(SAVED)


def test_saving_it_under_inference_mode_false_is_refused():
    def program(lib):
        w = lib.ones(3, requires_grad=True)
        a = made_inside(lib)
        with lib.inference_mode(), lib.inference_mode(False):
            return (w * a).sum()

    kind, msg = both(program)
    assert kind == "error" and msg.startswith(SAVED)


def test_an_op_that_saves_nothing_of_it_runs_backward():
    def program(lib):
        w = lib.ones(3, requires_grad=True)
        (w + made_inside(lib)).sum().backward()
        return w.grad

    assert both(program) == [1.0, 1.0, 1.0]


def test_a_clone_is_saved_and_differentiated():
    def program(lib):
        w = lib.ones(3, requires_grad=True)
        (w * made_inside(lib).clone()).sum().backward()
        return w.grad

    assert both(program) == [2.0, 2.0, 2.0]


def test_a_custom_function_saving_it_is_refused():
    def program(lib):
        class Keep(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x, y):
                ctx.save_for_backward(y)
                return x * 2

            @staticmethod
            def backward(ctx, g):
                return g, None

        return Keep.apply(lib.ones(3, requires_grad=True), made_inside(lib))

    kind, msg = both(program)
    assert kind == "error" and msg.startswith(SAVED)


@pytest.mark.parametrize("how", ["requires_grad_", "attribute", "Parameter"])
def test_requiring_grad_outside_the_mode_is_refused(how):
    def program(lib):
        a = made_inside(lib)
        if how == "requires_grad_":
            return a.requires_grad_()
        if how == "attribute":
            a.requires_grad = True
            return a
        return lib.nn.Parameter(a)

    assert both(program) == ("error", REQUIRES_GRAD)


def test_requiring_grad_inside_the_mode_or_not_requiring_it_is_allowed():
    def program(lib):
        a = made_inside(lib)
        a.requires_grad_(False)
        with lib.inference_mode():
            b = (lib.ones(2) * 2).requires_grad_()
        return a.requires_grad, b.requires_grad, b.is_inference()

    assert both(program) == (False, True, True)


# ---- the normal path ----------------------------------------------------------------------

def test_tensors_made_after_the_mode_and_in_other_threads_are_normal():
    plain = disthook.Tensor.__dict__["_make"]
    seen = {}
    entered, done = threading.Event(), threading.Event()

    def other():
        entered.wait(10)
        t = disthook.ones(2) * 2
        seen["other"] = t.is_inference()
        t.mul_(2)  # a normal tensor: allowed
        done.set()

    thread = threading.Thread(target=other)
    thread.start()
    with disthook.inference_mode():
        entered.set()
        done.wait(10)
        mine = disthook.ones(2) * 2
    thread.join(10)
    assert seen == {"other": False} and mine.is_inference()
    assert disthook.Tensor.__dict__["_make"] is plain  # the plain _make is back
    after = disthook.ones(2) * 2
    assert not after.is_inference()
    after.mul_(2)


@pytest.mark.parametrize("name", ["SGD", "Adam"])
def test_an_optimizer_step_on_a_model_built_inside_the_mode_is_refused(name):
    """Its parameters are inference tensors (they require grad, and a forward and backward
    that saves none of them runs); the step's in-place update is refused, as in torch."""
    def program(lib):
        with lib.inference_mode():
            model = lib.nn.Linear(2, 2)
        model(lib.ones(1, 2)).sum().backward()
        opt = getattr(lib.optim, name)(model.parameters(), lr=0.1)
        flags = (model.weight.is_inference(), model.weight.requires_grad)
        opt.step()
        return flags

    kind, msg = both(program)
    assert kind == "error" and msg.startswith(INPLACE)
