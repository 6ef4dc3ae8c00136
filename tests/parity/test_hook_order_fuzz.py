"""Hook firing order on random graphs, disthook against torch (skipped without torch).

Each case builds the same random DAG of small ops over a few leaves in both libraries (same
creation order, so the same node sequence numbers), puts tensor hooks, node pre/post hooks,
AccumulateGrad hooks, post-accumulate hooks and retain_grad on random places, runs a
backward variant, and compares the complete event logs (names, values) and the resulting
``.grad`` values. The exact order checks the engine's ready-queue tie-breaking, which the
hand-written tests only touch in a few shapes.
"""
from __future__ import annotations

import importlib
import random
import warnings

import pytest
from sweeps import first

N_CASES = 40


def _lib(name):
    if name == "torch":
        return pytest.importorskip("torch")
    return importlib.import_module(name)


def _r(t):
    return None if t is None else [round(v, 4) for v in t.reshape(-1).tolist()]


def run_case(T, seed: int, variant: str):
    rng = random.Random(seed)
    log = []
    n_leaves = rng.randint(2, 4)
    leaves = [T.tensor([float(i + 1), 0.5 * (i + 1)], requires_grad=True)
              for i in range(n_leaves)]
    const = T.tensor([1.5, -0.5])
    tensors = list(leaves)
    names = [f"x{i}" for i in range(n_leaves)]
    for k in range(rng.randint(3, 9)):
        op = rng.choice(["add", "mul", "muls", "sub", "neg", "addc", "mulc"])
        a = rng.randrange(len(tensors))
        b = rng.randrange(len(tensors))
        ta, tb = tensors[a], tensors[b]
        if op == "add":
            t = ta + tb
        elif op == "mul":
            t = ta * tb
        elif op == "muls":
            t = ta * 0.5
        elif op == "sub":
            t = ta - tb
        elif op == "neg":
            t = -ta
        elif op == "addc":
            t = ta + const
        else:
            t = ta * const
        tensors.append(t)
        names.append(f"t{k}")
    # the output uses the last tensor and a random earlier one
    out = (tensors[-1] + tensors[rng.randrange(len(tensors))]).sum()

    for t, n in zip(tensors, names):
        if rng.random() < 0.6:
            factor = rng.choice([None, 2.0, -1.0])
            t.register_hook(
                lambda g, n=n, f=factor: (log.append(("t", n, _r(g))),
                                          None if f is None or g is None else g * f)[1])
        if t.grad_fn is not None:
            if rng.random() < 0.3:
                t.retain_grad()
            if rng.random() < 0.3:
                t.grad_fn.register_prehook(
                    lambda go, n=n: log.append(("pre", n, [_r(g) for g in go])))
            if rng.random() < 0.3:
                t.grad_fn.register_hook(
                    lambda gi, go, n=n: log.append(("post", n, [_r(g) for g in gi])))
        else:
            if rng.random() < 0.4:
                t.register_post_accumulate_grad_hook(
                    lambda p, n=n: log.append(("pa", n, _r(p.grad))))
            if rng.random() < 0.3:
                acc = (t * 1).grad_fn.next_functions[0][0]
                acc.register_prehook(lambda go, n=n: log.append(("acc_pre", n)))
                acc.register_hook(lambda gi, go, n=n: log.append(("acc_post", n)))

    result = None
    if variant == "backward":
        out.backward()
    elif variant == "backward_twice":
        out.backward(retain_graph=True)
        log.append("---")
        out.backward()
    elif variant == "inputs":
        chosen = rng.sample(leaves, rng.randint(1, n_leaves))
        out.backward(inputs=chosen)
    else:  # autograd.grad w.r.t. random tensors
        chosen = rng.sample(tensors, rng.randint(1, min(3, len(tensors))))
        result = [_r(g) for g in T.autograd.grad(out, chosen, allow_unused=True)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        grads = [_r(t.grad) for t in tensors]
    return log, grads, result


# (seed, variant) -> reason, for cases known to differ from torch (strict xfail); none now
KNOWN: dict = {}
# the first 10 seeds (every variant) in the default run, all 40 with -m exhaustive
CASES = first([
    pytest.param(seed, variant, marks=pytest.mark.xfail(strict=True, reason=KNOWN[seed, variant]))
    if (seed, variant) in KNOWN else (seed, variant)
    for seed in range(N_CASES)
    for variant in ("backward", "backward_twice", "inputs", "grad")
], 10 * 4, names=2)


@pytest.mark.parametrize("seed, variant", CASES)
def test_random_graph_hook_order_same_as_torch(seed, variant):
    torch = _lib("torch")
    disthook = _lib("disthook")
    want = run_case(torch, seed, variant)
    got = run_case(disthook, seed, variant)
    assert got[0] == want[0], "event log differs"
    assert got[1] == want[1], ".grad values differ"
    assert got[2] == want[2], "autograd.grad results differ"
