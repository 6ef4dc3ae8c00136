"""Complex tensors: dtypes, promotion, construction, printing, and every op declared right for
complex numbers, each checked in complex128 against central differences and against torch
(forward, gradient, node name): the gradient of a real loss is dL/dx + i dL/dy, torch's
convention. Ops not declared refuse a complex input (the gate in ``Op.apply``)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import disthook

try:
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="compares with torch")
EPS = 1e-6


def _lib(t):
    return disthook if isinstance(t, disthook.Tensor) else torch


def _inputs(lib, arrays):
    return [lib.tensor(a, requires_grad=a.dtype.kind in "fc") for a in arrays]


def _loss(lib, outs, weights):
    """A real loss of the outputs: sum(Re(out) w1 + Im(out) w2), or sum(out w) for real."""
    total = 0
    for o, (w1, w2) in zip(outs, weights):
        if o.is_complex():
            total = total + (o.real * lib.tensor(w1)).sum() + (o.imag * lib.tensor(w2)).sum()
        elif o.dtype.is_floating_point:
            total = total + (o * lib.tensor(w1)).sum()
    return total


def _np_loss(outs, weights) -> float:
    total = 0.0
    for o, (w1, w2) in zip(outs, weights):
        d = o._data
        if d.dtype.kind == "c":
            total += float(np.sum(d.real * w1) + np.sum(d.imag * w2))
        elif d.dtype.kind == "f":
            total += float(np.sum(d * w1))
    return total


def _as_list(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _grads(lib, fn, arrays, weights):
    xs = _inputs(lib, arrays)
    loss = _loss(lib, _as_list(fn(*xs)), weights)
    wrt = [x for x in xs if x.requires_grad]
    grads = lib.autograd.grad(loss, wrt, allow_unused=True)
    return [np.zeros(x.shape, x.detach().numpy().dtype) if g is None
            else g.detach().resolve_conj().numpy() for g, x in zip(grads, wrt)]


def _fd_grads(fn, arrays, weights):
    """Central differences: for a complex input, of its real and imaginary parts apart."""
    def loss(arrs):
        with disthook.no_grad():
            return _np_loss(_as_list(fn(*[disthook.tensor(a) for a in arrs])), weights)

    out = []
    for i, a in enumerate(arrays):
        if a.dtype.kind not in "fc":
            continue
        g = np.zeros(a.shape, a.dtype)
        for j in np.ndindex(a.shape):
            for step in ((1.0, 1j) if a.dtype.kind == "c" else (1.0,)):
                plus, minus = list(arrays), list(arrays)
                plus[i], minus[i] = a.copy(), a.copy()
                plus[i][j] += EPS * step
                minus[i][j] -= EPS * step
                g[j] += step * (loss(plus) - loss(minus)) / (2 * EPS)
        out.append(g)
    return out


def check(fn, *inputs, seed=0, atol=1e-6, node=True):
    """``fn`` on inputs given as shapes (float64) or ("c", shape) (complex128): forward and
    the gradient of a real loss against central differences, and against torch."""
    rng = np.random.default_rng(seed)
    arrays = []
    for x in inputs:
        if isinstance(x, np.ndarray):
            arrays.append(x)
        elif x and x[0] == "c":
            arrays.append(rng.uniform(-2, 2, x[1]) + 1j * rng.uniform(-2, 2, x[1]))
        else:
            arrays.append(rng.uniform(-2, 2, x))
    outs = _as_list(fn(*_inputs(disthook, arrays)))
    weights = [(rng.standard_normal(o.shape), rng.standard_normal(o.shape)) for o in outs]
    got = _grads(disthook, fn, arrays, weights)
    for k, (g, f) in enumerate(zip(got, _fd_grads(fn, arrays, weights))):
        np.testing.assert_allclose(g, f, atol=1e-5, rtol=1e-5,
                                   err_msg=f"grad {k} vs finite differences")
    if torch is None:
        return
    t_outs = _as_list(fn(*_inputs(torch, arrays)))
    for k, (o, t) in enumerate(zip(outs, t_outs)):
        assert str(o.dtype) == str(t.dtype), f"output {k}: {o.dtype} != {t.dtype}"
        np.testing.assert_allclose(o.detach().numpy(), t.detach().resolve_conj().numpy(), atol=atol,
                                   rtol=atol, err_msg=f"output {k} vs torch")
        if node and t.grad_fn is not None:
            assert o.grad_fn.name() == t.grad_fn.name(), (o.grad_fn.name(), t.grad_fn.name())
    for k, (g, w) in enumerate(zip(got, _grads(torch, fn, arrays, weights))):
        assert g.dtype == w.dtype, f"grad {k}: {g.dtype} != {w.dtype}"
        np.testing.assert_allclose(g, w, atol=atol, rtol=atol, err_msg=f"grad {k} vs torch")


C = ("c", (3, 4))
R = (3, 4)


# ---- the ops, forward and backward ------------------------------------------------------

@pytest.mark.parametrize("fn, inputs", [
    (lambda a, b: a + b, (C, C)),
    (lambda a, b: a - b, (C, C)),
    (lambda a, b: a * b, (C, C)),
    (lambda a, b: a / b, (C, C)),
    (lambda a, b: a * b, (C, R)),          # mul by real: the real one's gradient is real
    (lambda a, b: b / a, (C, R)),
    (lambda a: 2 / a + (1 - 1j) / a, (C,)),
    (lambda a, b: a - 2 * b + 1j, (C, R)),
    (lambda a: -a, (C,)),
    (lambda a: a.exp(), (C,)),
    (lambda a: (a * 0.5j).exp() * a, (C,)),
    (lambda a: a.sum(), (C,)),
    (lambda a: a.sum(1, keepdim=True), (C,)),
    (lambda a: a.mean(0), (C,)),
    (lambda a: a.conj(), (C,)),
    (lambda a: a.conj() * a, (C,)),
    (lambda a: a.abs(), (C,)),
    (lambda a: a.angle(), (C,)),
    (lambda a: a.real * 2, (C,)),
    (lambda a: a.imag * 3, (C,)),
    (lambda a: _lib(a).view_as_real(a), (C,)),
    (lambda a: _lib(a).view_as_complex(a), ((3, 2),)),
    (lambda a: _lib(a).view_as_complex(_lib(a).view_as_real(a) * 2), (C,)),
    (lambda a, b: _lib(a).complex(a, b), (R, R)),
    # (polar's abs is non-negative: torch's gradient for a negative one is of |abs|)
    (lambda a, b: _lib(a).polar(a, b), (np.random.default_rng(1).uniform(0.1, 2, R), R)),
    (lambda a: a.to(_lib(a).complex128) * (1 + 2j), (R,)),
    (lambda a: a.reshape(2, 6), (C,)),
    (lambda a: a.view(4, 3), (C,)),
    (lambda a: a.permute(1, 0), (C,)),
    (lambda a: a.transpose(0, 1), (C,)),
    (lambda a: a.t(), (C,)),
    (lambda a: a.unsqueeze(0).expand(2, 3, 4), (C,)),
    (lambda a: a[1], (C,)),
    (lambda a: a[:, 1:3], (C,)),
    (lambda a: a[[0, 2, 0]], (C,)),
    (lambda a, b: _lib(a).cat([a, b], 1), (C, C)),
    (lambda a, b: _lib(a).stack([a, b]), (C, C)),
    (lambda a: a.flip(0).roll(1, 1), (C,)),
    (lambda a, b: _lib(a).where(b > 0, a, a * 2j), (C, R)),
])
def test_op_gradient_matches_torch_and_finite_differences(fn, inputs):
    check(fn, *inputs)


@pytest.mark.parametrize("fn, inputs", [
    (lambda a, b: a @ b, (C, ("c", (4, 2)))),
    (lambda a, b: a.mm(b), (C, ("c", (4, 2)))),
    (lambda a, b: a.bmm(b), (("c", (2, 3, 4)), ("c", (2, 4, 2)))),
    (lambda a, b: a @ b, (("c", (2, 3, 4)), ("c", (4,)))),
    (lambda a, b: a.dot(b), (("c", (4,)), ("c", (4,)))),
    (lambda a, b: _lib(a).einsum("ij,jk->ik", a, b), (C, ("c", (4, 2)))),
    (lambda a, b: _lib(a).einsum("bix,iox->box", a, b), (("c", (2, 3, 4)), ("c", (3, 2, 4)))),
])
def test_products_match_torch(fn, inputs):
    # a complex product is taken from real products of the parts: torch's node is MmBackward0
    check(fn, *inputs, node=False)


def test_a_rotary_embedding_as_llama_writes_it():
    """LLaMA's apply_rotary_emb: pairs as complex numbers, times unit phases, back to real."""
    def rope(x, freqs):
        lib = _lib(x)
        cis = lib.polar(lib.ones_like(freqs), freqs)
        z = lib.view_as_complex(x.reshape(*x.shape[:-1], -1, 2))
        return lib.view_as_real(z * cis).flatten(2)

    check(rope, (2, 3, 4), (3, 2))


# ---- dtypes, promotion, construction, printing ------------------------------------------

@needs_torch
@pytest.mark.parametrize("expr", [
    "t.ones(3, dtype=t.float64) * t.tensor(1j)", "t.ones(3) * 1j", "t.ones(3, dtype=t.int64) * 1j",
    "t.ones(3, dtype=t.float64) * 1j", "t.ones(3, dtype=t.cfloat) * t.ones(3, dtype=t.float64)",
    "t.ones(3, dtype=t.cfloat) * t.tensor(1., dtype=t.float64)",
    "t.ones(3, dtype=t.cfloat) * t.tensor(1j, dtype=t.cdouble)",
    "t.cat([t.ones(2), t.ones(2, dtype=t.cfloat)])", "t.ones(2, dtype=t.cfloat) / 2",
    "t.tensor([1, 2]) / t.tensor(1j)", "t.arange(3) * (1 + 1j)",
])
def test_promotion_matches_torch(expr):
    got, want = eval(expr, {"t": disthook}), eval(expr, {"t": torch})
    assert str(got.dtype) == str(want.dtype), expr
    np.testing.assert_allclose(got.numpy(), want.numpy())


@needs_torch
def test_printing_and_names_match_torch():
    def show(t):
        z = t.tensor([[1.5 + 2j], [3 - 1j]])
        w = t.zeros(2, dtype=t.cfloat)
        w.real[0] = 3
        w.imag[1] = 2
        return [repr(z), repr(z.to(t.cdouble)), repr(t.tensor(2 + 1j)), repr(w), repr(z.real),
                repr(t.tensor([0.001 + 1000j, -2 - 0j])), str(t.cfloat), str(t.complex128),
                z.type(), t.cfloat.is_complex, t.cfloat.is_floating_point, t.cfloat.is_signed,
                str(t.float32.to_complex()), str(t.cdouble.to_real()), z.is_complex(),
                t.cfloat.itemsize, repr(t.tensor([1 + 2j, 3j]) == t.tensor([1 + 2j, 3]))]

    assert show(disthook) == show(torch)


def test_views_share_memory_and_are_writable():
    z = disthook.tensor([1 + 2j, 3 - 1j])
    r = disthook.view_as_real(z)
    assert r.shape == (2, 2) and r._base is z
    r[0, 1] = 5.0
    z.imag[1] = 7.0
    z.real.mul_(2)
    assert z.tolist() == [2 + 5j, 6 + 7j]
    x = disthook.tensor([[1.0, 2.0], [3.0, 4.0]])
    c = disthook.view_as_complex(x)
    c.mul_(1j)
    assert x.tolist() == [[-2.0, 1.0], [-4.0, 3.0]]
    assert z.numpy().dtype == np.complex64


def test_view_as_complex_refuses_what_torch_refuses():
    with pytest.raises(RuntimeError, match="last dimension of size 2"):
        disthook.view_as_complex(disthook.ones(3, 3))
    with pytest.raises(RuntimeError, match="last dimension with stride 1"):
        disthook.view_as_complex(disthook.ones(2, 3).t())
    with pytest.raises(RuntimeError, match="only supported for complex tensors"):
        disthook.view_as_real(disthook.ones(3))


def test_randn_of_a_complex_dtype_has_torch_scaling():
    disthook.manual_seed(0)
    z = disthook.randn(200_000, dtype=disthook.cfloat)
    assert z.dtype == disthook.complex64
    # each part has variance 1/2, as torch's (the whole: 1)
    assert abs(float(z.real.var()) - 0.5) < 0.01 and abs(float(z.imag.var()) - 0.5) < 0.01


def test_a_complex_leaf_descends_with_its_grad():
    """z -= lr * z.grad goes down: the gradient is dL/dx + i dL/dy."""
    target = disthook.tensor([1 - 1j, 2 + 0.5j])
    z = disthook.zeros(2, dtype=disthook.cfloat, requires_grad=True)
    for _ in range(50):
        loss = ((z - target) * (z - target).conj()).real.sum()
        loss.backward()
        with disthook.no_grad():
            z -= 0.1 * z.grad
        z.grad = None
    np.testing.assert_allclose(z.detach().numpy(), target.numpy(), atol=1e-4)


def test_cast_to_real_warns_and_keeps_the_real_part():
    z = disthook.tensor([1 + 2j], requires_grad=True)
    with pytest.warns(UserWarning, match="discards the imaginary part"):
        x = z.float()
    assert x.tolist() == [1.0]
    x.sum().backward()
    assert z.grad.tolist() == [1 + 0j]


# ---- the gate: ops not made right for complex numbers refuse them ------------------------

@pytest.mark.parametrize("call", [
    lambda z: z.relu(), lambda z: z.max(), lambda z: z.sort(),
    lambda z: z < 1, lambda z: z >= 1, lambda z: z.argmax(), lambda z: z.argsort(),
    lambda z: z.clamp(0, 1), lambda z: z.asin(), lambda z: z.atanh(), lambda z: z.atan(),
    lambda z: z.softmax(0), lambda z: z.cummax(0), lambda z: z.amin(), lambda z: z.var(),
    lambda z: disthook.nn.functional.linear(z, z), lambda z: z.nan_to_num(),
    lambda z: z.maximum(z), lambda z: z.topk(1),
])  # (sigmoid, tanh, log, sqrt, pow by a number: tests/test_complex_holomorphic.py)
@pytest.mark.parametrize("grad", [False, True])
def test_undeclared_ops_refuse_a_complex_input(call, grad):
    z = disthook.tensor([[1 + 2j, -3 + 0.5j], [0.25j, 2 + 0j]], requires_grad=grad)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a refusal, not a cast with a warning
        with pytest.raises(RuntimeError, match="ComplexFloat|complex"):
            call(z)


def test_the_refusal_names_the_op_and_the_dtype():
    z = disthook.ones(2, dtype=disthook.cdouble)
    with pytest.raises(NotImplementedError, match="\"atanh\" not implemented for "
                                                  "'ComplexDouble'"):
        z.atanh()


# ---- optimizers: SGD steps a complex parameter as torch (the others: test_a2_complex_optim) -

def test_sgd_with_momentum_steps_a_complex_parameter_as_torch():
    rng = np.random.default_rng(5)
    w0 = rng.standard_normal((3, 2)) + 1j * rng.standard_normal((3, 2))
    x = rng.standard_normal((4, 3)) + 1j * rng.standard_normal((4, 3))

    def run(t):
        w = t.nn.Parameter(t.tensor(w0))
        opt = t.optim.SGD([w], lr=0.05, momentum=0.9, weight_decay=0.01, nesterov=True)
        for _ in range(3):
            loss = (t.tensor(x) @ w).abs().sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
        return w.detach().numpy()

    got = run(disthook)
    if torch is not None:
        np.testing.assert_allclose(got, run(torch), rtol=1e-10)


@pytest.mark.parametrize("fn, inputs", [
    (lambda a: a.mH, (C,)), (lambda a: a.H, (C,)), (lambda a: a.adjoint(), (C,)),
    (lambda a, b: a.vdot(b), (("c", (4,)), ("c", (4,)))),
    (lambda a, b: _lib(a).outer(a, b), (("c", (3,)), ("c", (2,)))),
    (lambda a: a.cdouble() * 1j, (R,)),
])
def test_conjugating_forms_match_torch(fn, inputs):
    check(fn, *inputs, node=False)


def test_a_custom_functions_complex_output_has_history():
    """torch gives a custom Function's complex output a grad_fn, as a float one's."""
    class Twice(disthook.autograd.Function):
        @staticmethod
        def forward(ctx, z):
            return z * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2

    z = disthook.tensor([1 + 1j], requires_grad=True)
    out = Twice.apply(z)
    assert out.requires_grad and out.grad_fn is not None
    out.real.sum().backward()
    assert z.grad.tolist() == [2 + 0j]


@pytest.mark.parametrize("call", [
    lambda z: z.unique(), lambda z: z.unique_consecutive(), lambda z: z.histc(),
    lambda z: z.histogram(), lambda z: z.float_power(2), lambda z: z.abs_(),
    lambda z: z.absolute_(), lambda z: z.bernoulli(), lambda z: disthook.bernoulli(z),
    lambda z: disthook.searchsorted(z, z), lambda z: disthook.isin(z, z),
    lambda z: disthook.histogramdd(z.reshape(2, 1)), lambda z: disthook.randint_like(z, 3),
])
def test_methods_outside_the_ops_refuse_a_complex_input_too(call):
    """They compute on numpy directly (no Op.apply): each checks for itself, as torch's."""
    with pytest.raises(RuntimeError, match="ComplexFloat|complex"):
        call(disthook.tensor([1 + 2j, 0.25j]))


@needs_torch
@pytest.mark.parametrize("expr", ["z.bool()", "z.long()", "z.cov()", "z.isreal()",
                                  "z.is_signed()"])
def test_casts_and_statistics_of_complex_match_torch(expr):
    def value(t):
        z = t.tensor([[1 + 2j, 0.25j, -3 + 0j], [2 - 1j, 0j, 1 + 1j]])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = eval(expr, {"z": z})
        return out if isinstance(out, bool) else (str(out.dtype), out.numpy().tolist())

    got, want = value(disthook), value(torch)
    if isinstance(want, bool):
        assert got == want
    else:
        assert got[0] == want[0]
        np.testing.assert_allclose(np.array(got[1]), np.array(want[1]), atol=1e-6)


@needs_torch
@pytest.mark.parametrize("f", [
    lambda T, x, y, r: ((x * x).exp().abs()).sum() + (x.conj() * x).real.sum(),
    lambda T, x, y, r: (x @ y).abs().pow(2).sum() + x.angle().sin().sum(),
    lambda T, x, y, r: T.fft.fft(x * x).abs().pow(2).sum(),
    lambda T, x, y, r: T.fft.irfft(T.fft.rfft(r * r) * T.fft.rfft(r), n=8).pow(2).sum(),
    lambda T, x, y, r: T.view_as_real(T.polar(r.abs() + 0.1, r) * y.sum()).pow(2).sum(),
], ids=["mul-exp-abs", "matmul-angle", "fft", "rfft-irfft", "polar"])
def test_second_order_gradients_match_torch(f):
    """The backward of each complex op is made of ops that are right for complex numbers
    too, so a gradient of a gradient (create_graph) is torch's."""
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((3, 4)) + 1j * rng.standard_normal((3, 4)),
              rng.standard_normal((4, 2)) + 1j * rng.standard_normal((4, 2)),
              rng.standard_normal((3, 8))]

    def second(T):
        xs = [T.tensor(v, requires_grad=True) for v in arrays]
        grads = T.autograd.grad(f(T, *xs), xs, create_graph=True, allow_unused=True)
        total = sum((g.real * 1.3 + g.imag * 0.7 if g.is_complex() else g * 1.3).sum()
                    for g in grads if g is not None)
        return [None if g is None else g.detach().resolve_conj().numpy()
                for g in T.autograd.grad(total, xs, allow_unused=True)]

    for got, want in zip(second(disthook), second(torch)):
        assert (got is None) == (want is None)
        if got is not None:
            np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)


@needs_torch
def test_module_to_a_complex_dtype_and_back_as_torch():
    def session(t):
        m = t.nn.Linear(2, 2)
        m.register_buffer("steps", t.tensor(3))  # (an integer buffer stays as it is)
        with pytest.warns(UserWarning, match="Complex modules"):
            m.to(t.cfloat)
        kinds = [str(v.dtype) for v in m.state_dict().values()]
        m.weight.data.imag.fill_(0.5)
        with warnings.catch_warnings():  # (torch says "discards the imaginary part" once)
            warnings.simplefilter("ignore")
            m.to(t.float64)
        return kinds, [str(v.dtype) for v in m.state_dict().values()]

    assert session(disthook) == session(torch)


@needs_torch
@pytest.mark.parametrize("expr", [
    "complex(t.tensor(1 + 2j))", "float(t.tensor(1 + 2j))", "int(t.tensor(2j))",
    "t.ones(2).add_(1j)", "t.tensor(2 + 0j).item()",
])
def test_python_numbers_from_complex_tensors_as_torch(expr):
    def outcome(t):
        try:
            return repr(eval(expr, {"t": t}))
        except RuntimeError as e:
            return f"RuntimeError: {e}"

    assert outcome(disthook) == outcome(torch)


def _changed_part(z):
    w = z * 1
    w.real.mul_(2)
    return w


def _changed_pairs(z):
    w = z * 1
    disthook.view_as_real(w)[0, 1] = 5.0
    return w


def _changed_complex_view(z):
    x = disthook.view_as_real(z * 1).clone()
    disthook.view_as_complex(x).mul_(2j)
    return x


def _base_changed_under_a_view(z):
    w = z * 1
    pairs = disthook.view_as_real(w)
    w.mul_(2)
    return pairs * 1


@pytest.mark.parametrize("program", [_changed_part, _changed_pairs, _changed_complex_view,
                                     _base_changed_under_a_view])
def test_in_place_through_a_view_of_another_dtype_is_an_error_not_a_wrong_gradient(program):
    """The history of a view whose elements are not its base's (a real view of a complex
    tensor, a complex view of a real one) is not rebuilt after an in-place change while a
    graph is recorded: it raises, saying so (its gradient came out wrong before)."""
    z = disthook.tensor([[1 + 2j, 3 - 1j]], dtype=disthook.cdouble, requires_grad=True)
    with pytest.raises(RuntimeError, match="another dtype than its base"):
        program(z).abs().sum().backward()
    with disthook.no_grad():  # without a graph it is only a write, as torch's
        program(z)


def test_gradcheck_counts_a_complex_input_as_its_two_parts():
    """A backward that forgets the conjugate fails gradcheck (it passed: only the real part
    of each element was perturbed); right ones pass, complex and real outputs alike."""
    class Square(disthook.autograd.Function):
        @staticmethod
        def forward(ctx, z):
            ctx.save_for_backward(z)
            return z * z

        @staticmethod
        def backward(ctx, g):
            (z,) = ctx.saved_tensors
            return g * 2 * z  # should be g * conj(2 z)

    z = disthook.tensor([1 + 2j, 0.5 - 1j], dtype=disthook.cdouble, requires_grad=True)
    assert not disthook.autograd.gradcheck(Square.apply, (z,), raise_exception=False)
    assert disthook.autograd.gradcheck(lambda z: z * z.exp(), (z,))
    assert disthook.autograd.gradcheck(lambda z: z.abs() * z.angle(), (z,))
    x = z.real.detach().requires_grad_()
    assert disthook.autograd.gradcheck(lambda x: disthook.fft.rfft(x), (x,))
