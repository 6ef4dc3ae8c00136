"""Autograd anomaly mode: torch.autograd.detect_anomaly / set_detect_anomaly and the flags.
A node whose gradients hold NaN raises torch's RuntimeError; a failed node (NaN, its own
error, a hook's) warns with the forward's traceback of where it was made; nothing is
recorded or checked while the mode is off. Each program runs under disthook and, where torch
is installed, under torch, and the errors and warnings are compared."""
import re
import warnings

import numpy as np
import pytest

import disthook
from disthook.autograd import anomaly_mode, engine
from disthook.ops import base

LIBS = [disthook]
try:
    import torch

    LIBS.append(torch)
except ImportError:  # the parity half is skipped
    torch = None

ids = [lib.__name__ for lib in LIBS]
NAN = float("nan")


@pytest.fixture(autouse=True)
def anomaly_off():
    """Every test starts and ends with the mode off (as a process starts)."""
    for lib in LIBS:
        lib.set_anomaly_enabled(False)
    yield
    for lib in LIBS:
        lib.set_anomaly_enabled(False)


def run(fn, lib):
    """``fn(lib)``: (the error's type name and text or None, the warnings' texts), torch's
    note on where in its C++ a warning came from left out."""
    error = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            fn(lib)
        except Exception as exc:  # noqa: BLE001 - any error, compared
            error = (type(exc).__name__, str(exc))
    texts = [re.sub(r" \(Triggered internally at .*\)$", "", str(w.message), flags=re.DOTALL)
             for w in caught if issubclass(w.category, UserWarning)]
    return error, texts


def same_in_both(fn):
    """The result under disthook, checked equal to torch's."""
    results = [run(fn, lib) for lib in LIBS]
    for other in results[1:]:
        assert other == results[0]
    return results[0]


def ends_with(text: str, header: str, *lines) -> bool:
    """Whether ``text`` is ``header`` then a traceback (pytest's frames first) that ends with
    the frames of this file given, (line's text, function) each."""
    return text.startswith(header) and text.endswith(trace(*lines))


def trace(*lines):
    """The traceback text of frames in this file, (line's text, function) each."""
    out = []
    for code, function in lines:
        number = SOURCE.index(code) + 1
        out.append(f'  File "{__file__}", line {number}, in {function}\n    {code.strip()}\n')
    return "".join(out)


with open(__file__) as f:
    SOURCE = [line.rstrip("\n") for line in f]


# ---- the programs ------------------------------------------------------------------------

def scaled(lib, a):
    return a * lib.tensor([NAN, 1.0])  # the node that will fail


def nan_through_mul(lib):
    a = lib.tensor([1.0, 4.0], requires_grad=True)
    with lib.autograd.detect_anomaly():
        y = scaled(lib, a.sqrt()).sum()
        y.backward()


def nan_in_second_output(lib):
    a = lib.tensor([NAN, 1.0], requires_grad=True)
    b = lib.tensor([2.0, 3.0], requires_grad=True)
    lib.autograd.set_detect_anomaly(True)
    (a.detach() * b).sum().backward()  # b's gradient, the node's output 0: NaN
    (b * a.detach()).sum().backward()  # now output 1


class Failing:
    @staticmethod
    def make(lib):
        class Boom(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 2

            @staticmethod
            def backward(ctx, grad):
                raise ValueError("bad backward")

        return Boom


def failing_function(lib):
    x = lib.ones(3, requires_grad=True)
    with lib.autograd.set_detect_anomaly(True, check_nan=False):
        out = Failing.make(lib).apply(x)
        out.sum().backward()


def failing_tensor_hook(lib):
    def hook(grad):
        raise KeyError("in the hook")

    x = lib.ones(2, requires_grad=True)
    with lib.autograd.set_detect_anomaly(True):
        y = x * 3
        y.register_hook(hook)
        y.sum().backward()


def graph_made_before(lib):
    a = lib.tensor([1.0, 2.0], requires_grad=True)
    y = (a * lib.tensor([NAN, 1.0])).sum()
    with lib.autograd.set_detect_anomaly(True):
        y.backward()


def flags(lib):
    seen = [(lib.is_anomaly_enabled(), lib.is_anomaly_check_nan_enabled())]
    lib.autograd.set_detect_anomaly(True, check_nan=False)
    seen.append((lib.is_anomaly_enabled(), lib.is_anomaly_check_nan_enabled()))
    with lib.autograd.detect_anomaly():
        seen.append((lib.is_anomaly_enabled(), lib.is_anomaly_check_nan_enabled()))
        with lib.autograd.set_detect_anomaly(False):
            seen.append((lib.is_anomaly_enabled(), lib.is_anomaly_check_nan_enabled()))
        seen.append((lib.is_anomaly_enabled(), lib.is_anomaly_check_nan_enabled()))
    seen.append((lib.is_anomaly_enabled(), lib.is_anomaly_check_nan_enabled()))
    lib.set_anomaly_enabled(False, False)
    seen.append((lib.is_anomaly_enabled(), lib.is_anomaly_check_nan_enabled()))
    raise AssertionError(repr(seen))  # the sequence, compared between the libraries


# ---- the tests ------------------------------------------------------------------------------

def test_nan_gradient_raises_and_warns_with_the_forward_traceback():
    error, texts = same_in_both(nan_through_mul)
    assert error == ("RuntimeError", ("Function 'MulBackward0' returned nan values in its 0th "
                                     "output."))
    assert texts[0] == ("Anomaly Detection has been enabled. This mode will increase the "
                        "runtime and should only be enabled for debugging.")
    assert ends_with(
        texts[1], "Error detected in MulBackward0. Traceback of forward call that caused the "
        "error:\n  File ", ("        y = scaled(lib, a.sqrt()).sum()", "nan_through_mul"),
                ("    return a * lib.tensor([NAN, 1.0])  # the node that will fail", "scaled"))
    assert len(texts) == 2


def test_the_output_named_is_the_one_with_nan():
    error, _ = same_in_both(nan_in_second_output)
    assert error == ("RuntimeError", ("Function 'MulBackward0' returned nan values in its 1th "
                                     "output."))


def test_an_error_in_a_backward_keeps_its_type_after_the_warning():
    for lib in LIBS:  # (torch's traceback has a frame of its own: compared up to it)
        error, texts = run(failing_function, lib)
        assert error == ("ValueError", "bad backward")
        assert len(texts) == 1 and texts[0].startswith(
            "Error detected in BoomBackward. Traceback of forward call that caused the error:\n")
        assert trace(("        out = Failing.make(lib).apply(x)", "failing_function")) in texts[0]


def test_an_error_in_a_tensor_hook_names_the_node_it_fired_before():
    error, texts = same_in_both(failing_tensor_hook)
    assert error == ("KeyError", "'in the hook'")
    assert len(texts) == 1 and ends_with(
        texts[0], "Error detected in MulBackward0. Traceback of forward call that caused the "
        "error:\n  File ", ("        y = x * 3", "failing_tensor_hook"))


def test_a_graph_made_with_the_mode_off_has_no_traceback():
    error, texts = same_in_both(graph_made_before)
    assert error[0] == "RuntimeError"
    assert texts == [("Error detected in MulBackward0. No forward pass information available. "
                     "Enable detect anomaly during forward pass for more information.")]


def test_the_flags_follow_torch():
    error, _ = same_in_both(flags)
    assert error[1] == repr([(False, True), (True, False), (True, True), (False, True),
                             (True, True), (True, False), (False, False)])


def test_custom_function_traceback_leaves_out_disthook_frames():
    # torch's traceback also shows its own autograd/function.py frame; disthook's shows the
    # program's frames only
    error, texts = run(failing_function, disthook)
    assert error == ("ValueError", "bad backward")
    assert len(texts) == 1 and ends_with(
        texts[0], "Error detected in BoomBackward. Traceback of forward call that caused the "
        "error:\n  File ", ("        out = Failing.make(lib).apply(x)", "failing_function"))


def test_the_warning_points_at_the_backward_call():
    a = disthook.tensor([1.0], requires_grad=True)
    disthook.autograd.set_detect_anomaly(True)
    y = a * NAN
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(RuntimeError, match="returned nan values"):
            y.backward()
    (w,) = caught
    assert w.filename == __file__ and SOURCE[w.lineno - 1].strip() == "y.backward()"


@pytest.mark.parametrize("lib", LIBS, ids=ids)
def test_check_nan_false_lets_nan_through(lib):
    a = lib.tensor([1.0, 2.0], requires_grad=True)
    with lib.autograd.set_detect_anomaly(True, check_nan=False):
        (a * lib.tensor([NAN, 1.0])).sum().backward()
    assert np.isnan(a.grad.numpy()[0]) and a.grad.numpy()[1] == 1.0


@pytest.mark.parametrize("lib", LIBS, ids=ids)
def test_inf_is_not_nan(lib):
    a = lib.tensor([0.0], requires_grad=True)
    with lib.autograd.set_detect_anomaly(True):
        a.sqrt().sum().backward()
    assert np.isinf(a.grad.numpy()[0])


@pytest.mark.parametrize("lib", LIBS, ids=ids)
def test_nan_from_node_hooks_is_checked_after_the_post_hooks(lib):
    lib.autograd.set_detect_anomaly(True)
    c = lib.ones(1, requires_grad=True)
    d = c * 2
    d.grad_fn.register_hook(lambda gi, go: (gi[0] * NAN, gi[1]))
    with pytest.raises(RuntimeError, match=r"^Function 'MulBackward0' returned nan values"):
        d.sum().backward()
    d = c * lib.tensor([NAN])
    d.grad_fn.register_hook(lambda gi, go: (lib.zeros_like(gi[0]), gi[1]))  # repaired
    d.sum().backward()
    assert c.grad.numpy()[0] == 0.0


@pytest.mark.parametrize("lib", LIBS, ids=ids)
def test_detect_anomaly_is_a_context_manager_only_as_in_torch(lib):
    with pytest.warns(UserWarning, match="Anomaly Detection has been enabled"):
        manager = lib.autograd.detect_anomaly()
    with pytest.raises(TypeError, match="'detect_anomaly' object is not callable"):
        manager(lambda: None)


@pytest.mark.parametrize("lib", LIBS, ids=ids)
def test_nodes_made_in_a_backward_know_their_parent(lib):
    x = lib.tensor([2.0], requires_grad=True)
    with lib.autograd.set_detect_anomaly(True):
        y = x ** 3
        (gx,) = lib.autograd.grad(y, x, create_graph=True)
    assert gx.grad_fn.metadata["parent_"] is y.grad_fn
    assert "parent_" not in y.grad_fn.metadata


def node_made_in_a_backward_fails(lib):
    x = lib.tensor([2.0], requires_grad=True)
    lib.autograd.set_detect_anomaly(True)
    y = x ** 3  # its backward, with create_graph, makes the node that fails
    (gx,) = lib.autograd.grad(y, x, create_graph=True)
    gx.backward(lib.tensor([NAN]))


def test_a_node_made_in_a_backward_that_fails_warns_for_its_parents_too():
    results = [run(node_made_in_a_backward_fails, lib) for lib in LIBS]
    for error, texts in results:
        assert error == ("RuntimeError", ("Function 'MulBackward0' returned nan values in its 1th "
                         "output."))
        assert len(texts) == 2
        assert texts[0].startswith("Error detected in ")
        assert "(gx,) = lib.autograd.grad(y, x, create_graph=True)" in texts[0]
        assert texts[1].startswith(
            "\n\nPrevious calculation was induced by PowBackward0. Traceback of forward call "
            "that induced the previous calculation:\n  File ")
        # (torch's ends with a frame of its own Tensor.__pow__)
        assert trace((("    y = x ** 3  # its backward, with create_graph, makes the node that "
                      "fails"), "node_made_in_a_backward_fails")) in texts[1]


def test_off_nothing_is_recorded_or_checked():
    plain_apply, plain_post = engine._apply, engine._run_post_hooks
    plain_init = disthook.autograd.graph.Node.__init__
    with disthook.autograd.detect_anomaly():
        assert base._new is not object.__new__ and engine._apply is not plain_apply
    assert base._new is object.__new__
    assert engine._apply is plain_apply and engine._run_post_hooks is plain_post
    assert disthook.autograd.graph.Node.__init__ is plain_init
    a = disthook.tensor([1.0], requires_grad=True)
    y = a * NAN
    assert y.grad_fn.metadata == {}
    y.backward()  # no check
    assert np.isnan(a.grad.numpy()[0])
    disthook.autograd.set_detect_anomaly(True, check_nan=False)  # recording, no check
    assert engine._apply is plain_apply and base._new is not object.__new__
    disthook.autograd.set_detect_anomaly(False)
    assert base._new is object.__new__


def test_torch_names():
    assert disthook.autograd.detect_anomaly is anomaly_mode.detect_anomaly
    assert disthook.autograd.set_detect_anomaly is anomaly_mode.set_detect_anomaly
    assert anomaly_mode.__all__ == ["detect_anomaly", "set_detect_anomaly"]
    assert {"detect_anomaly", "set_detect_anomaly"} <= set(disthook.autograd.__all__)
