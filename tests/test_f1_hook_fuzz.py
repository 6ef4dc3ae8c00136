"""Differential fuzzing of hook semantics: random small programs that use hooks
(``f1_programs``), each run under torch and under disthook in one process, their logs
compared: every hook call in order (which hook, on which module or tensor, its arguments'
values, what it returned), outputs, every ``.grad``, and the errors raised (their type).

The default run takes ``F1_FUZZ_CASES`` programs (25) from seed ``F1_FUZZ_SEED`` (0);
more by hand, e.g. ``F1_FUZZ_CASES=2000 python -m pytest -q -p no:cacheprovider -n 2
tests/test_f1_hook_fuzz.py``, or one seed with ``-k 'seed_1103'``. A failure prints the
first entry that differs; ``f1_programs.generate(seed)`` is the program (data).
(integration/test_f1_hook_fuzz_deployed.py runs programs on a deployed model.)
"""
from __future__ import annotations

import os

import f1_programs as programs
import pytest

FIRST = int(os.environ.get("F1_FUZZ_SEED", "0"))
CASES = int(os.environ.get("F1_FUZZ_CASES", "25"))


@pytest.mark.parametrize("seed", range(FIRST, FIRST + CASES), ids=lambda s: f"seed_{s}")
def test_a_random_hook_program_logs_as_under_torch(seed):
    torch = pytest.importorskip("torch")
    import disthook

    program = programs.generate(seed)
    want = programs.run(torch, program)
    got = programs.run(disthook, program)
    difference = programs.compare(got, want)
    assert difference is None, f"seed {seed}: {difference}"


def test_the_comparison_sees_a_changed_value_an_order_and_an_error():
    """The comparison itself: a value off by more than the tolerance, two entries swapped,
    and an error type, each named with its entry."""
    import numpy as np

    log = [("h0:fwd", "a", np.array([1.0, 2.0])), ("grad", "x", None),
           ("error", "backward", "RuntimeError")]
    assert programs.compare(list(log), log) is None
    assert programs.compare([log[0][:2] + (np.array([1.0, 2.01]),), *log[1:]],
                            log).startswith("entry 0")
    assert programs.compare([log[1], log[0], log[2]], log).startswith("entry 0")
    assert programs.compare([*log[:2], ("error", "backward", "TypeError")],
                            log).startswith("entry 2")
    assert "2 entries against 3" in programs.compare(log[:2], log)


def test_the_programs_use_every_hook_kind_and_block():
    """Over the default seeds' span the generator makes every hook kind, block and backward
    variant (so a switch that stopped making one would show)."""
    made = [programs.generate(seed) for seed in range(200)]
    kinds = {h["kind"] for p in made for h in p["hooks"]}
    assert kinds == {"fpre", "fwd", "bpre", "bwd", "param", "input", "legacy", "g_fpre",
                     "g_fwd", "g_bpre", "g_bwd", "node", "post_acc"}
    assert {b for p in made for b in p["blocks"]} == set(programs.BLOCKS)
    assert {r["backward"] for p in made for r in p["rounds"]} == {
        "backward", "twice", "inputs", "grad", "grad_x", "none"}
    assert {e for p in made for r in p["rounds"] for e in r["extras"]} == set(programs.EXTRAS)
    assert not any(r["extras"] for seed in range(50)
                   for r in programs.generate(seed, deployable=True)["rounds"])
    # (F4's shapes: a buffered Linear, hooks acting in a grad mode, checkpointed forwards;
    # deployable programs, as drawn before them, have none unless asked)
    assert any(b for p in made for b in p["buffered"])
    assert {h["mode"] for p in made for h in p["hooks"]} == {
        None, "no_grad", "enable_grad", "inference"}
    assert any(r["checkpoint"] for p in made for r in p["rounds"])
    assert not any(h["mode"] or r["checkpoint"] or any(p["buffered"])
                   for seed in range(50) for p in [programs.generate(seed, deployable=True)]
                   for h in p["hooks"] for r in p["rounds"])
    # (F5's shapes: replacements as views, strided or float64, the steps of F5_EXTRAS, a
    # global forward hook; none in deployable programs unless asked)
    assert {h["form"] for p in made for h in p["hooks"]} == {None, "view", "strided", "dtype"}
    assert {e for p in made for r in p["rounds"] for e in r["f5"]} == set(programs.F5_EXTRAS)
    assert not any(h["form"] or r["f5"] or h["kind"] == "g_fwd"
                   for seed in range(50) for p in [programs.generate(seed, deployable=True)]
                   for h in p["hooks"] for r in p["rounds"])
    # (F9's steps; none in deployable programs unless asked)
    assert {e for p in made for r in p["rounds"] for e in r["f9"]} == set(programs.F9_EXTRAS)
    assert not any(r["f9"] for seed in range(50)
                   for r in programs.generate(seed, deployable=True)["rounds"])
    # (F12's steps and the views they take; none in deployable programs unless asked)
    assert {e for p in made for r in p["rounds"] for e in r["f12"]} == set(programs.F12_EXTRAS)
    assert {r["view"] for p in made for r in p["rounds"]} == set(programs.VIEWS)
    assert not any(r["f12"] for seed in range(50)
                   for r in programs.generate(seed, deployable=True)["rounds"])
    assert {h["does"] for p in made for h in p["hooks"]} >= {
        "log", "replace", "raise", "remove_self", "remove_other", "inplace", "bad",
        "act_hook", "act_retain"}


def test_an_inference_tensor_changed_in_place_outside_the_mode_is_refused():
    """What the generator leaves out (an in-place change of the output after an
    ``inference_mode`` round): torch refuses it, and so does disthook (see
    test_f2_inference_tensors.py)."""
    import disthook

    with disthook.inference_mode():
        out = disthook.ones(2) * 2
    with pytest.raises(RuntimeError, match="Inplace update to inference tensor outside "
                                           "InferenceMode is not allowed"):
        out.mul_(2)
