"""``torch._foreach_*`` (what optimizers and EMA helpers call): every one against torch, out
of place (values and gradients) and in place (values, the list returned), with numbers,
tensors and lists as the other operands."""
import numpy as np
import pytest

import disthook

torch = pytest.importorskip("torch")

SHAPES = [(2, 3), (4,), ()]


def arrays(seed, positive=False):
    rng = np.random.RandomState(seed)
    out = [rng.uniform(0.2, 0.9, s) if positive else rng.uniform(-0.9, 0.9, s) for s in SHAPES]
    return [a.astype(np.float64) for a in out]


def lists(lib, seed, positive=False, requires_grad=False):
    return [lib.tensor(a, requires_grad=requires_grad) for a in arrays(seed, positive)]


UNARY = ["abs", "acos", "asin", "atan", "ceil", "cos", "cosh", "erf", "erfc", "exp", "expm1",
         "floor", "frac", "lgamma", "log", "log10", "log1p", "log2", "neg", "reciprocal",
         "round", "rsqrt", "sigmoid", "sign", "sin", "sinh", "sqrt", "tan", "tanh", "trunc"]


def operands(lib, case):
    """The further operands of case ``case``: (args, kwargs)."""
    other, third = lists(lib, 1, positive=True), lists(lib, 2, positive=True)
    return {
        "add-number": ((0.5,), {}), "add-list": ((other,), {"alpha": 2.0}),
        "add-numbers": (([1.0, 2.0, 3.0],), {}), "add-tensor": ((lib.tensor(1.5),), {}),
        "sub-list": ((other,), {"alpha": 0.5}), "mul-number": ((3.0,), {}),
        "mul-list": ((other,), {}), "div-list": ((other,), {}), "pow-number": ((2.0,), {}),
        "maximum-list": ((other,), {}), "minimum-list": ((other,), {}),
        "clamp_min-number": ((0.1,), {}), "clamp_max-list": ((other,), {}),
        "lerp-number": ((other, 0.25), {}), "lerp-list": ((other, third), {}),
        "addcmul-number": ((other, third), {"value": 2.0}),
        "addcdiv-numbers": ((other, third, [1.0, 0.5, 2.0]), {}),
    }[case]


CASES = ["add-number", "add-list", "add-numbers", "add-tensor", "sub-list", "mul-number",
         "mul-list", "div-list", "pow-number", "maximum-list", "minimum-list",
         "clamp_min-number", "clamp_max-list", "lerp-number", "lerp-list", "addcmul-number",
         "addcdiv-numbers"]


def same(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g.detach().numpy(), np.float64),
                                   w.detach().numpy(), rtol=1e-6, atol=1e-7)


def run(lib, op, case=None, in_place=False):
    positive = op in ("acos", "asin", "log", "log10", "log1p", "log2", "sqrt", "rsqrt",
                      "lgamma", "reciprocal", "pow")
    xs = lists(lib, 0, positive=positive, requires_grad=not in_place)
    args, kwargs = operands(lib, case) if case else ((), {})
    name = f"_foreach_{op}" + ("_" if in_place else "")
    out = getattr(lib, name)(xs, *args, **kwargs)
    if in_place:
        assert isinstance(out, list) and all(a is b for a, b in zip(out, xs))
        return xs, None
    assert isinstance(out, tuple)
    sum(o.sum() for o in out).backward()
    return out, [x.grad for x in xs]


@pytest.mark.parametrize("in_place", [False, True], ids=["out", "in-place"])
@pytest.mark.parametrize("op", UNARY)
def test_one_tensor_ops_match_torch(op, in_place):
    got, got_grads = run(disthook, op, in_place=in_place)
    want, want_grads = run(torch, op, in_place=in_place)
    same(got, want)
    if want_grads is not None:
        same(got_grads, want_grads)


@pytest.mark.parametrize("in_place", [False, True], ids=["out", "in-place"])
@pytest.mark.parametrize("case", CASES)
def test_ops_with_operands_match_torch(case, in_place):
    op = case.split("-")[0]
    got, got_grads = run(disthook, op, case, in_place)
    want, want_grads = run(torch, op, case, in_place)
    same(got, want)
    if want_grads is not None:
        same(got_grads, want_grads)


@pytest.mark.parametrize("lib", [disthook, torch], ids=["disthook", "torch"])
def test_reductions_copies_and_errors(lib):
    xs = lists(lib, 0)
    out = {"norm": lib._foreach_norm(xs), "norm1": lib._foreach_norm(xs, 1),
           "max": lib._foreach_max(xs), "powsum": lib._foreach_powsum(xs, 3),
           "clone": lib._foreach_clone(xs), "pow-first": lib._foreach_pow(2.0, xs),
           "mm": lib._foreach_mm([xs[0]], [xs[0].T])}
    copied = lists(lib, 5)
    assert lib._foreach_copy_(copied, xs) == copied
    out["copy"] = copied
    zeroed = lists(lib, 6)
    lib._foreach_zero_(zeroed)
    out["zero"] = zeroed
    with pytest.raises(RuntimeError, match="Tensor lists must have the same number of "
                                           "tensors, got 3 and 2"):
        lib._foreach_add(xs, xs[:2])
    values = {k: [np.asarray(t.detach().numpy(), np.float64) for t in v] for k, v in out.items()}
    if lib is torch:
        for k, v in values.items():
            for a, b in zip(v, REDUCED[k]):
                np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    else:
        REDUCED.update(values)


REDUCED: dict = {}  # disthook's values, compared when torch's case runs (it runs second)


@pytest.mark.parametrize("lib", [disthook, torch], ids=["disthook", "torch"])
def test_erf_and_gelu_of_a_zero_dim_tensor(lib):
    """(found by ``_foreach_erf`` over a list holding a scalar tensor: numpy gave _erf a
    scalar that takes no ``out=``, a TypeError)"""
    x = lib.tensor(0.5, dtype=lib.float64)
    assert abs(lib.erf(x).item() - 0.5204998778) < 1e-6  # disthook: to about 1e-7
    assert abs(lib.nn.functional.gelu(x).item() - 0.3457312306) < 1e-6
