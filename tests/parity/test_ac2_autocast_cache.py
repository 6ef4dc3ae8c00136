"""A weight used more than once in one CPU autocast region, as torch 2.13 computes it.

torch casts a float32 leaf that requires grad (and is no view) once per region, with grad
mode on and the region's cache enabled, and every later use takes that cast until the
outermost region exits: the uses' bfloat16 gradients are summed in bfloat16 at the one cast
and reach the weight as one float32 gradient (a hook on the weight fires once). disthook cast
again at each use and summed the float32 gradients: another ``.grad``, silently. Each program
here runs in both libraries; ``.grad`` bits, hook calls and the cast nodes the uses share
are compared."""
import contextlib

import numpy as np
import pytest

import disthook

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(7)
X = RNG.standard_normal((16, 32)).astype(np.float32)
W = RNG.standard_normal((32, 32)).astype(np.float32)
B = RNG.standard_normal(32).astype(np.float32)
G = RNG.standard_normal((16, 32)).astype(np.float32)


def _casts(out):
    """The cast nodes (ToCopyBackward0) one output's graph reaches."""
    seen, todo, casts = set(), [out.grad_fn], []
    while todo:
        fn = todo.pop()
        if fn is None or id(fn) in seen:
            continue
        seen.add(id(fn))
        if type(fn).__name__ == "ToCopyBackward0":
            casts.append(fn)
        todo.extend(f for f, _ in fn.next_functions)
    return casts


def _shared(a, b):
    """How many cast nodes two outputs' graphs share."""
    return len({id(f) for f in _casts(a)} & {id(f) for f in _casts(b)})


def _leaves(lib):
    x = lib.tensor(X)
    w = lib.nn.Parameter(lib.tensor(W))
    b = lib.nn.Parameter(lib.tensor(B))
    return x, w, b


def _grads(lib, outs, params, calls):
    g = lib.tensor(G)
    loss = sum(((o.float() * g * (i + 1.5)).sum() for i, o in enumerate(outs)), 0)
    loss.backward()
    return ([p.grad.numpy().view(np.uint32).copy() for p in params], dict(calls),
            [_shared(outs[i], outs[j]) for i in range(len(outs)) for j in range(i)])


def _hooked(w, calls, name):
    def hook(grad):
        calls[name] = calls.get(name, 0) + 1
        assert str(grad.dtype).endswith("float32")

    w.register_hook(hook)


def linear_twice(lib):
    x, w, b = _leaves(lib)
    calls = {}
    _hooked(w, calls, "w")
    lin = lib.nn.Linear(32, 32)
    lin.weight, lin.bias = w, b
    with lib.autocast("cpu", dtype=lib.bfloat16):
        outs = [lin(x), lin(x * 2)]
    return _grads(lib, outs, [w, b], calls)


def shared_by_two_modules(lib):
    x, w, b = _leaves(lib)
    calls = {}
    _hooked(w, calls, "w")
    first, second = lib.nn.Linear(32, 32, bias=False), lib.nn.Linear(32, 32)
    first.weight = second.weight = w
    second.bias = b
    with lib.autocast("cpu", dtype=lib.bfloat16):
        h = first(x)
        outs = [h, second(h.float().tanh())]
    return _grads(lib, outs, [w, b], calls)


def one_op_twice(lib):
    x, w, _ = _leaves(lib)
    calls = {}
    _hooked(w, calls, "w")
    with lib.autocast("cpu", dtype=lib.bfloat16):
        outs = [lib.mm(x, lib.mm(w, w))]
    assert len(_casts(outs[0])) == 1  # both arguments of the inner mm: one cast
    return _grads(lib, outs, [w], calls)


def nested_regions(lib):
    x, w, _ = _leaves(lib)
    with lib.autocast("cpu", dtype=lib.bfloat16):
        with lib.autocast("cpu", dtype=lib.bfloat16):
            a = lib.mm(x, w)
        with lib.autocast("cpu", enabled=False):  # nests too: clears nothing on exit
            pass
        b = lib.mm(x, w)
    return _grads(lib, [a, b], [w], {})


def _two_regions(lib, outer):
    x, w, _ = _leaves(lib)
    with outer:
        outs = []
        for _ in range(2):
            with lib.autocast("cpu", dtype=lib.bfloat16):
                outs.append(lib.mm(x, w))
    return _grads(lib, outs, [w], {})


def disabled_outer_region(lib):
    # the outermost region, though disabled: the inner ones' exits keep the casts
    return _two_regions(lib, lib.autocast("cpu", enabled=False))


def sequential_regions(lib):
    return _two_regions(lib, contextlib.nullcontext())


def cache_disabled(lib):
    x, w, _ = _leaves(lib)
    with lib.autocast("cpu", dtype=lib.bfloat16, cache_enabled=False):
        outs = [lib.mm(x, w), lib.mm(x, w)]
    return _grads(lib, outs, [w], {})


def cast_under_no_grad(lib):
    x, w, _ = _leaves(lib)
    with lib.autocast("cpu", dtype=lib.bfloat16):
        with lib.no_grad():
            lib.mm(x, w)  # not kept: the next use still reaches the weight
        outs = [lib.mm(x, w), lib.mm(x, w)]
    return _grads(lib, outs, [w], {})


def not_a_leaf(lib):
    x, w, _ = _leaves(lib)
    with lib.autocast("cpu", dtype=lib.bfloat16):
        v = w * 1.0
        outs = [lib.mm(x, v), lib.mm(x, v)]
    return _grads(lib, outs, [w], {})


def cleared_in_the_region(lib):
    x, w, _ = _leaves(lib)
    with lib.autocast("cpu", dtype=lib.bfloat16):
        a = lib.mm(x, w)
        lib.clear_autocast_cache()
        b = lib.mm(x, w)
    return _grads(lib, [a, b], [w], {})


def cache_switched_off(lib):
    x, w, _ = _leaves(lib)
    states = [lib.is_autocast_cache_enabled()]
    lib.set_autocast_cache_enabled(False)
    try:
        with lib.autocast("cpu", dtype=lib.bfloat16):  # (cache_enabled=None: the thread's)
            states.append(lib.is_autocast_cache_enabled())
            with lib.autocast("cpu", dtype=lib.bfloat16, cache_enabled=True):
                states.append(lib.is_autocast_cache_enabled())
                outs = [lib.mm(x, w), lib.mm(x, w)]
            outs.append(lib.mm(x, w))
        states.append(lib.is_autocast_cache_enabled())
    finally:
        lib.set_autocast_cache_enabled(True)
    grads, calls, shared = _grads(lib, outs, [w], {})
    return grads, calls, shared, states


PROGRAMS = [linear_twice, shared_by_two_modules, one_op_twice, nested_regions,
            disabled_outer_region, sequential_regions, cache_disabled, cast_under_no_grad,
            not_a_leaf, cleared_in_the_region, cache_switched_off]


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.__name__)
def test_grad_bits_hook_calls_and_shared_casts_are_torchs(program):
    ours, theirs = program(disthook), program(torch)
    for got, want in zip(ours[0], theirs[0]):
        assert np.array_equal(got, want), f"{(got != want).sum()} of {got.size} grad bits differ"
    assert ours[1:] == theirs[1:]


def test_one_cast_reaches_the_weight_once():
    _, calls, shared = linear_twice(disthook)
    assert calls == {"w": 1} and shared == [2]  # the weight's cast and the bias's
    assert sequential_regions(disthook)[2] == [0] and cache_disabled(disthook)[2] == [0]


def test_a_cast_kept_from_another_dtype_raises_as_torch():
    """The kept cast is the tensor's whatever dtype a nested region asks (torch's key):
    the op then meets two dtypes and raises torch's error."""
    for lib in (disthook, torch):
        x, w, _ = _leaves(lib)
        with lib.autocast("cpu", dtype=lib.bfloat16):
            lib.mm(x, w)
            with lib.autocast("cpu", dtype=lib.float16), \
                    pytest.raises(RuntimeError, match="same dtype"):
                lib.mm(x, w)
        with lib.autocast("cpu", dtype=lib.float16):
            assert lib.mm(x, w).dtype == lib.float16  # the outermost exit dropped it
