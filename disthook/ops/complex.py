"""Complex numbers: the ops that build complex tensors, take them apart, and the real-valued
ends (abs, angle), forward and backward side by side.

Gradients follow torch's convention: for a real loss L of a complex z = x + iy the gradient
is dL/dx + i dL/dy (the conjugate Wirtinger derivative, times two), so ``z -= lr * z.grad``
descends. For a holomorphic op the rule is g times the conjugate of the derivative; the ops
here are the non-holomorphic ends, each with its own rule.
"""
from __future__ import annotations

import itertools

import numpy as np

from disthook import _dtype
from disthook.ops.base import OUTPUT, Op


def _real_dtype(np_dtype):
    return np.float64 if np_dtype == np.complex128 else np.float32


def _complex_dtype(np_dtype):
    return np.complex128 if np_dtype == np.float64 else np.complex64


class _ComplexOp(Op):
    complex_ok = True


class Real(_ComplexOp):
    """``z.real``: a view of the real parts (writable, as torch's)."""

    node_name = "SelectBackward0"  # torch takes it as view_as_real(z)[..., 0]
    view = True

    @staticmethod
    def forward(ctx, z):
        return z._data.real

    @staticmethod
    def backward(ctx, g):
        return Complex.apply(g, g.new_zeros(()).expand(g.shape))


class Imag(_ComplexOp):
    """``z.imag``: a view of the imaginary parts (writable, as torch's)."""

    node_name = "SelectBackward0"
    view = True

    @staticmethod
    def forward(ctx, z):
        if z._data.dtype.kind != "c":
            raise RuntimeError("imag is not implemented for tensors with non-complex dtypes.")
        return z._data.imag

    @staticmethod
    def backward(ctx, g):
        return Complex.apply(g.new_zeros(()).expand(g.shape), g)


class Conj(_ComplexOp):
    """``z.conj()``: torch's is a lazy view (a bit on the tensor); here it is a copy, so an
    in-place change of the result does not reach ``z``."""

    @staticmethod
    def forward(ctx, z):
        return np.conj(z._data)

    @staticmethod
    def backward(ctx, g):
        return g.conj()


class Complex(_ComplexOp):
    """``torch.complex(real, imag)``."""

    @staticmethod
    def forward(ctx, re, im):
        r, i = re._data, im._data
        if r.dtype != i.dtype or _dtype.kind(r.dtype) != "f" or r.dtype == np.float16:
            raise RuntimeError(
                f"Expected both inputs to be Float or Double tensors but got "
                f"{_name(r.dtype)} and {_name(i.dtype)}")
        out = np.empty(np.broadcast_shapes(r.shape, i.shape), _complex_dtype(r.dtype))
        out.real, out.imag = r, i
        return out

    @staticmethod
    def backward(ctx, g):
        return Real.apply(g), Imag.apply(g)


class Polar(_ComplexOp):
    """``torch.polar(abs, angle)``: abs * (cos(angle) + i sin(angle))."""

    saved_names = ("result",)

    @staticmethod
    def forward(ctx, r, theta):
        Complex.forward(ctx, r, theta)  # the same dtype checks
        ctx.save_for_backward(OUTPUT)
        phase = np.exp(1j * theta._data).astype(_complex_dtype(theta._data.dtype))
        ctx.phase = phase
        return r._data * phase

    @staticmethod
    def backward(ctx, g):
        from disthook.tensor import Tensor

        (out,) = ctx.saved_tensors
        phase = Tensor._make(ctx.phase, None, 0)
        # d out / d r = phase, d out / d angle = i out: each gradient is Re(g conj(d))
        g_r = Real.apply(g * phase.conj())
        g_theta = Imag.apply(g * out.conj())  # Re(g conj(i out)) = Im(g conj(out))
        return g_r, g_theta


class ViewAsReal(_ComplexOp):
    """``torch.view_as_real(z)``: the same memory as a real tensor of shape [..., 2]."""

    view = True

    @staticmethod
    def forward(ctx, z):
        data = z._data
        if data.dtype.kind != "c":
            raise RuntimeError("view_as_real is only supported for complex tensors")
        real = data.real  # a view with the parts' dtype; the imaginary part is one item on
        step = real.itemsize
        return np.lib.stride_tricks.as_strided(real, data.shape + (2,), real.strides + (step,))

    @staticmethod
    def backward(ctx, g):
        return ViewAsComplex.apply(g.contiguous())


class ViewAsComplex(_ComplexOp):
    """``torch.view_as_complex(x)``: pairs along a last dim of size 2 (stride 1) as complex
    numbers, in the same memory."""

    view = True

    @staticmethod
    def forward(ctx, x):
        data = x._data
        if data.dtype not in (np.float32, np.float64):
            raise RuntimeError("view_as_complex is only supported for float and double "
                               f"tensors, but got a tensor of scalar type: {_name(data.dtype)}")
        if data.ndim == 0 or data.shape[-1] != 2:
            raise RuntimeError("Tensor must have a last dimension of size 2")
        if data.strides[-1] != data.itemsize:
            raise RuntimeError("Tensor must have a last dimension with stride 1")
        if any(s % (2 * data.itemsize) for s in data.strides[:-1]):
            raise RuntimeError("Tensor must have a stride divisible by 2 for all but last "
                               "dimension")
        return data.view(_complex_dtype(data.dtype))[..., 0]

    @staticmethod
    def backward(ctx, g):
        return ViewAsReal.apply(g)


class _RealOfComplex(_ComplexOp):
    """A real function ``fn`` of a complex z that keeps z for its gradient."""

    fn = None

    @classmethod
    def forward(cls, ctx, z):
        ctx.save_for_backward(z)
        return cls.fn(z._data)


class AbsComplex(_RealOfComplex):
    """``z.abs()`` of a complex z: real; its gradient is g z / |z| (0 where z is 0)."""

    node_name = "AbsBackward0"
    fn = staticmethod(np.abs)

    @staticmethod
    def backward(ctx, g):
        (z,) = ctx.saved_tensors
        return g * _sgn(z)


class AngleComplex(_RealOfComplex):
    """``z.angle()`` of a complex z; its gradient is g i z / |z|^2 (0 where z is 0)."""

    node_name = "AngleBackward0"
    fn = staticmethod(np.angle)

    @staticmethod
    def backward(ctx, g):
        (z,) = ctx.saved_tensors
        d = z.abs() ** 2
        d = d + (d == 0).to(d.dtype)  # where z is 0 the gradient is 0, as torch's
        return g * (z * 1j) / d


def _sgn(z):
    """z / |z|, and 0 where z is 0: the direction a real function of |z| grows in."""
    a = z.abs()
    return z / (a + (a == 0).to(a.dtype))


def _name(np_dtype) -> str:
    from disthook import _dtype

    return _dtype.scalar_type_name(_dtype.from_numpy_dtype(np_dtype))


def product(fn, operands):
    """``fn`` (a real product, linear in each operand: matmul, mm, bmm, mv, dot, an einsum)
    of operands of which one or more is complex, built from real products of their parts:
    (a + ib)(c + id) = (ac - bd) + i(ad + bc), and so on for more operands. Its gradients are
    then those of real products and of ``real``/``imag``/``complex``, each right already."""
    parts = [(t.real, t.imag) if t._data.dtype.kind == "c" else (t, None) for t in operands]
    sums = [None, None]  # the real and the imaginary part
    for picks in itertools.product((0, 1), repeat=len(parts)):
        factors = [part[p] for part, p in zip(parts, picks)]
        if any(f is None for f in factors):
            continue
        k = sum(picks)  # i ** k: +1, +i, -1, -i
        term = fn(*factors)
        acc = sums[k % 2]
        if acc is None:
            sums[k % 2] = -term if k % 4 >= 2 else term
        else:
            sums[k % 2] = acc - term if k % 4 >= 2 else acc + term
    return Complex.apply(sums[0], sums[1])
