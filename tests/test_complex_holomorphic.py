"""Elementwise functions of complex tensors (sqrt, log, pow, tanh, sigmoid, sin, ...): torch's
values, and its gradients (the output's gradient times the conjugate of the derivative),
first and second order; a complex power of a real tensor is complex, as in torch, and the
in-place forms refuse what torch refuses."""
import numpy as np
import pytest

import disthook

torch = pytest.importorskip("torch")

Z = [1 + 2j, -0.5 + 0.3j, 0.25 - 1.5j, -2.0 - 0.1j]
W = [0.3 - 0.7j, 1.1 + 0.2j, -0.4 + 0.9j, 0.6 - 0.05j]
UNARY = ["sqrt", "log", "tanh", "sigmoid", "sin", "cos", "reciprocal", "rsqrt", "sinh",
         "cosh", "tan", "log1p", "expm1", "log2", "log10", "exp2"]
POWERS = [2, 3, 2.5, -1, -0.5, 0.5 + 1j, 1j]


def run(lib, fn, dtype_name, double=False):
    dtype = getattr(lib, dtype_name)
    z = lib.tensor(Z, dtype=dtype, requires_grad=True)
    w = lib.tensor(W, dtype=dtype)
    out = fn(lib, z)
    loss = (out * w).real.sum() + out.abs().sum()
    (grad,) = lib.autograd.grad(loss, z, create_graph=double)
    second = None
    if double:
        (second,) = lib.autograd.grad((grad * w.conj()).real.sum(), z)
    return [t.detach().numpy() for t in (out, grad, *(() if second is None else (second,)))]


def same(fn, dtype_name="complex128", double=False):
    ours, theirs = run(disthook, fn, dtype_name, double), run(torch, fn, dtype_name, double)
    tol = dict(rtol=1e-10, atol=1e-12) if dtype_name == "complex128" else dict(rtol=2e-4,
                                                                                 atol=2e-5)
    for name, a, b in zip(("value", "gradient", "second-order gradient"), ours, theirs):
        assert a.dtype == b.dtype, name
        np.testing.assert_allclose(a, b, err_msg=name, **tol)


@pytest.mark.parametrize("name", UNARY)
@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_a_function_of_a_complex_tensor_gives_torchs_values_and_gradients(name, dtype):
    same(lambda lib, z: getattr(z, name)(), dtype)


@pytest.mark.parametrize("name", ["sqrt", "log", "tanh", "sigmoid", "sin", "reciprocal",
                                  "tan", "log1p"])
def test_their_second_order_gradients_are_torchs(name):
    same(lambda lib, z: getattr(z, name)(), double=True)


@pytest.mark.parametrize("exponent", POWERS)
def test_a_power_of_a_complex_tensor(exponent):
    same(lambda lib, z: z ** exponent)
    same(lambda lib, z: z.pow(exponent), "complex64")


@pytest.mark.parametrize("base", [2.0, 1 + 1j, -0.5j])
def test_a_number_to_a_complex_power(base):
    same(lambda lib, z: base ** z)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
def test_a_complex_power_of_a_real_tensor_is_complex(dtype):
    def values(lib):
        x = lib.tensor([1, 2, 3], dtype=getattr(lib, dtype))
        return [(x ** (0.5 + 1j)).numpy(), ((1 + 1j) ** x).numpy(), (x ** 1j).numpy()]

    for ours, theirs in zip(values(disthook), values(torch)):
        assert ours.dtype == theirs.dtype
        np.testing.assert_allclose(ours, theirs, rtol=1e-6)


def test_an_integer_tensors_complex_power_takes_the_default_complex_dtype():
    def dtypes(lib):
        before = lib.get_default_dtype()
        lib.set_default_dtype(lib.float64)
        try:
            x = lib.tensor([1, 2])
            return [str((x ** 1j).dtype), str(((1 + 1j) ** x).dtype),
                    str((x.float() ** 1j).dtype)]
        finally:
            lib.set_default_dtype(before)

    assert dtypes(disthook) == dtypes(torch)


def test_the_gradient_of_a_real_tensor_through_a_complex_power_is_real_and_torchs():
    def grads(lib):
        x = lib.tensor([2.0, 3.0, 0.5], requires_grad=True)
        ((x ** (0.5 + 1j)).abs().sum() + ((1 + 1j) ** x).real.sum()).backward()
        return x.grad.numpy()

    ours, theirs = grads(disthook), grads(torch)
    assert ours.dtype == theirs.dtype == np.float32
    np.testing.assert_allclose(ours, theirs, rtol=1e-5)


IN_PLACE = {
    "complex.pow_(2.5)": ("complex", lambda x: x.pow_(2.5)),
    "complex.div_(2)": ("complex", lambda x: x.div_(2)),
    "float.pow_(1j)": ("float", lambda x: x.pow_(1j)),
    "long.pow_(1j)": ("long", lambda x: x.pow_(1j)),
    "float.div_(1j)": ("float", lambda x: x.div_(1j)),
}


@pytest.mark.parametrize("case", sorted(IN_PLACE))
def test_in_place_forms_take_or_refuse_what_torch_does(case):
    kind, call = IN_PLACE[case]

    def outcome(lib):
        x = {"complex": lib.tensor([1 + 2j, -0.5j]), "float": lib.tensor([2.0, 0.5]),
             "long": lib.tensor([2, 3])}[kind]
        try:
            return call(x).numpy()
        except RuntimeError as exc:
            return str(exc)

    ours, theirs = outcome(disthook), outcome(torch)
    if isinstance(theirs, str):
        assert ours == theirs
    else:
        np.testing.assert_allclose(ours, theirs, rtol=1e-6)
