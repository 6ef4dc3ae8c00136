"""The products' common path (plain tensors, one dtype, shapes that fit) builds no error
message: issue 33 measured the Python around a large product running cold right after its
kernel, each formatted message costing microseconds there. The messages themselves, built
only on failure, stay torch's."""
import dis
import sys

import numpy as np
import pytest

import disthook

torch = pytest.importorskip("torch")

_FORMATTING = {name for name in dis.opname if name.startswith("FORMAT") or name == "BUILD_STRING"}


def _string_ops_run(fn, *args) -> list:
    """The string-building opcodes executed in disthook.ops.linalg while ``fn(*args)`` runs."""
    seen = []

    def trace(frame, event, arg):
        if frame.f_code.co_filename.endswith("ops/linalg.py"):
            frame.f_trace_opcodes = True
            if event == "opcode":
                name = dis.opname[frame.f_code.co_code[frame.f_lasti]]
                if name in _FORMATTING:
                    seen.append((frame.f_code.co_name, name))
        return trace

    sys.settrace(trace)
    try:
        fn(*args)
    finally:
        sys.settrace(None)
    return seen


def _operands(lib, shapes):
    rng = np.random.default_rng(0)
    return [lib.tensor(rng.standard_normal(s).astype(np.float32), requires_grad=True)
            for s in shapes]


CASES = {
    "mm": (lambda a, b: a.mm(b), [(3, 4), (4, 5)], [(3, 4), (5, 5)]),
    "matmul": (lambda a, b: a @ b, [(3, 4), (4, 5)], [(3, 4), (5, 5)]),
    "addmm": (lambda c, a, b: disthook.addmm(c, a, b) if isinstance(c, disthook.Tensor)
              else torch.addmm(c, a, b), [(5,), (3, 4), (4, 5)], [(5,), (3, 4), (5, 5)]),
    "mv": (lambda a, v: a.mv(v), [(3, 4), (4,)], [(3, 4), (5,)]),
    "dot": (lambda a, b: a.dot(b), [(4,), (4,)], [(4,), (5,)]),
    "bmm": (lambda a, b: a.bmm(b), [(2, 3, 4), (2, 4, 5)], [(2, 3, 4), (2, 5, 5)]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_product_that_fits_builds_no_message(name):
    fn, good, _ = CASES[name]
    assert _string_ops_run(fn, *_operands(disthook, good)) == []


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_product_that_does_not_fit_says_what_torch_says(name):
    fn, _, bad = CASES[name]
    errors = []
    for lib in (disthook, torch):
        with pytest.raises(RuntimeError) as info:
            fn(*_operands(lib, bad))
        errors.append(str(info.value))
    assert errors[0] == errors[1]


def _leaf():
    return disthook.tensor(np.ones(3, np.float32), requires_grad=True)


def test_a_leafs_accumulator_is_made_without_init_calls():
    """Made anew each step (as torch's), right after a product's kernel: no __init__ frames."""
    calls = []

    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_name == "__init__":
            calls.append(frame.f_code.co_qualname)

    w = _leaf()
    sys.setprofile(profile)
    try:
        y = w * 2
    finally:
        sys.setprofile(None)
    assert type(y.grad_fn.next_functions[0][0]).__name__ == "AccumulateGrad"
    assert not {"Node.__init__", "AccumulateGrad.__init__"} & set(calls)


def test_the_accumulator_is_as_its_constructor_makes_it():
    from disthook.autograd.graph import AccumulateGrad

    w = _leaf()
    first = (w * 2).grad_fn
    made = first.next_functions[0][0]
    after = (w * 2).grad_fn  # the same accumulator while the first graph holds it
    assert after.next_functions[0][0] is made
    built = AccumulateGrad(w)
    assert made.variable is built.variable is w
    for name in ("next_functions", "needs_input_grad", "_input_meta", "_seq", "_pre_hooks",
                 "_post_hooks", "_saved", "metadata_"):
        assert getattr(made, name) == getattr(built, name), name
    assert made.name() == built.name() and made.metadata == {}
    # the sequence advances as the constructor's did: one number per accumulator made
    v = _leaf()
    a = (w * 2).grad_fn._sequence_nr()
    b = (v * 2).grad_fn._sequence_nr()  # (a node takes its number before its edges)
    c = (w * 2).grad_fn._sequence_nr()  # v's accumulator took one between b and c
    assert (b - a, c - b) == (1, 2)
    seen = []
    made.register_hook(lambda gi, go: seen.append(go[0].numpy().tolist()))
    after.next_functions[0][0] is made and (w * 2).sum().backward()
    assert seen == [[2.0, 2.0, 2.0]] and w.grad.tolist() == [2.0, 2.0, 2.0]


@pytest.mark.filterwarnings("ignore:Anomaly Detection has been enabled")
def test_under_anomaly_mode_the_accumulator_records_where_it_was_made():
    w = _leaf()
    with disthook.autograd.detect_anomaly():
        acc = (w * 2).grad_fn.next_functions[0][0]
    assert "traceback_" in acc.metadata
