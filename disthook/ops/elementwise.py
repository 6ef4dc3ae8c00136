"""Elementwise ops: arithmetic, unary math, activations, clamp, where, comparisons.

Binary ops broadcast; the engine sums each gradient back to its input's shape.
"""
from __future__ import annotations

import cmath
import functools
import math

import numpy as np

from disthook import _dtype
from disthook.ops._bf16 import half_in_float32, half_up
from disthook.ops.base import (
    _NO_CTX,
    OUTPUT,
    Op,
    floating_kernel,
    plain_float,
    plain_tensor,
    save_crossed,
)


def _needs(ctx, i: int) -> bool:
    return ctx.needs_input_grad[i]


# ---- arithmetic -------------------------------------------------------------------------

class Add(Op):
    complex_ok = True  # linear: the same rule for complex
    alpha = 1

    @staticmethod
    def forward(ctx, a, b, alpha=1):
        if alpha != 1:
            ctx.alpha = alpha
        return a._data + b._data if alpha == 1 else a._data + alpha * b._data

    @staticmethod
    def backward(ctx, g):
        return g, (g if ctx.alpha == 1 else g * ctx.alpha)


def refuse_bool_subtraction(a, b) -> None:
    """torch's RuntimeError for a subtraction with a bool operand (a tensor, or a Python bool
    beside a tensor), checked before the operands are promoted (``b - 1`` was int64 here)."""
    a_bool, b_bool = (isinstance(x, (bool, np.bool_)) or getattr(x, "_data", None) is not None
                      and x._data.dtype == np.bool_ for x in (a, b))
    if a_bool and b_bool:
        raise RuntimeError("Subtraction, the `-` operator, with two bool tensors is not "
                           "supported. Use the `^` or `logical_xor()` operator instead.")
    if a_bool or b_bool:
        raise RuntimeError(
            "Subtraction, the `-` operator, with a bool tensor is not supported. If you are "
            "trying to invert a mask, use the `~` or `logical_not()` operator instead.")


def refuse_bool_kernel(kernel: str, *arrays: np.ndarray) -> None:
    """torch's NotImplementedError for bool operands only (a bool result) of an op whose
    kernel, named ``kernel``, takes no bool (``b // b``, ``b % b``, ``b ** b``, ``b.abs()``;
    numpy gave int8 or bool)."""
    if all(x.dtype == np.bool_ for x in arrays):
        raise NotImplementedError(f'"{kernel}" not implemented for \'Bool\'')


class Sub(Op):
    complex_ok = True  # linear: the same rule for complex
    alpha = 1

    @staticmethod
    def forward(ctx, a, b, alpha=1):
        if alpha != 1:
            ctx.alpha = alpha
        return a._data - b._data if alpha == 1 else a._data - alpha * b._data

    @staticmethod
    def backward(ctx, g):
        return g, (-g if ctx.alpha == 1 else g * -ctx.alpha)


class Rsub(Sub):
    """``scalar - tensor``: torch records it as its own node."""

    node_name = "RsubBackward1"


class RsubScalar(Op):
    complex_ok = True  # linear: the same rule for complex
    """``number - tensor``: the number is no input, so the node has one edge, to the tensor
    (torch's ``RsubBackward1``: ``(2 - x).grad_fn.next_functions[0]`` is x's node)."""

    node_name = "RsubBackward1"

    @staticmethod
    def forward(ctx, a, other):
        if a._data.dtype.kind == "b" or isinstance(other, (bool, np.bool_)):
            raise RuntimeError(
                "Subtraction, the `-` operator, with a bool tensor is not supported. If you are "
                "trying to invert a mask, use the `~` or `logical_not()` operator instead.")
        return np.asarray(other, a._data.dtype) - a._data

    @staticmethod
    def backward(ctx, g):
        return -g


class Mul(Op):
    saved_names = ("self", "other")
    complex_ok = True  # each gradient is g times the other operand's conjugate

    @staticmethod
    def forward(ctx, a, b):
        save_crossed(ctx, a, b)
        return a._data * b._data

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        return ((_times(g, b) if _needs(ctx, 0) else None),
                (_times(g, a) if _needs(ctx, 1) else None))


def _times(g, other):
    """``g * other.conj()``, a product's gradient; with no graph of it (``plain_float``), of
    one dtype, ``other`` a number or of ``g``'s shape, the product of the arrays wrapped once
    (2.3 us against the op layer's 2.7 at 16 elements)."""
    if (plain_float(g, other) and g._data.dtype == other._data.dtype
            and (not other._data.ndim or other._data.shape == g._data.shape)):
        return plain_tensor(g._data * other._data)
    return g * other.conj()


class Div(Op):
    saved_names = ("self", "other")
    complex_ok = True  # the gradients are conjugated (a no-op for real operands)

    @staticmethod
    def forward(ctx, a, b):
        # a's gradient reads b; b's reads both
        need = ctx.needs_input_grad
        if need:
            ctx.save_for_backward(a if need[1] else None, b)
        return a._data / b._data

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        ga = g / b.conj() if _needs(ctx, 0) else None
        gb = -g * (a / (b * b)).conj() if _needs(ctx, 1) else None
        return ga, gb


def times_conj(g, d):
    """``g * conj(d)``: the gradient through an elementwise f with derivative ``d`` (a
    Tensor), by torch's convention for complex numbers (for a holomorphic f the gradient is
    the output's gradient times the conjugate of f'); ``g * d`` for real ``d``."""
    return g * d.conj() if d._data.dtype.kind == "c" else g * d


class Reciprocal(Op):
    saved_names = ("result",)
    complex_ok = True

    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(OUTPUT)
        return np.reciprocal(a._data)

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved_tensors
        return times_conj(-g, out * out)


class Neg(Op):
    complex_ok = True  # linear: the same rule for complex
    @staticmethod
    def forward(ctx, a):
        if a._data.dtype.kind == "b":
            raise RuntimeError(
                "Negation, the `-` operator, on a bool tensor is not supported. If you are "
                "trying to invert a mask, use the `~` or `logical_not()` operator instead.")
        return -a._data

    @staticmethod
    def backward(ctx, g):
        if plain_float(g):  # no graph of it: the negation of the array, wrapped once
            return plain_tensor(np.negative(g._data))
        return -g


class PowScalar(Op):
    node_name = "PowBackward0"
    saved_names = ("self",)
    complex_ok = True

    @staticmethod
    def forward(ctx, a, exponent):
        ctx.save_for_backward(a)
        ctx.exponent = exponent
        out = a._data ** exponent
        return out.astype(a._data.dtype, copy=False)

    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved_tensors
        e = ctx.exponent
        if e == 0:
            return g * 0
        return times_conj(g, e * a ** (e - 1) if e != 2 else 2 * a)


def _complex_power(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a ** b`` for complex arrays as torch computes it: numpy's power, but exp(b log a)
    where a is 0 or either is not finite (torch's 0 ** 0 is nan, 0 ** -1 is inf + nan j)."""
    out = np.power(a, b)
    edge = (a == 0) | ~np.isfinite(a) | ~np.isfinite(b)
    if edge.any():
        with np.errstate(all="ignore"):
            out = np.where(edge, np.exp(b * np.log(a)), out)
    return out


class Pow(Op):
    node_name = "PowBackward1"
    saved_names = ("self", "exponent", "result")
    complex_ok = True  # the gradients are conjugated, as torch's

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b, OUTPUT)
        if a._data.dtype.kind == "c":
            return _complex_power(a._data, b._data)
        refuse_bool_kernel("pow", a._data, b._data)
        return np.power(a._data, b._data)

    @staticmethod
    def backward(ctx, g):
        a, b, out = ctx.saved_tensors
        # torch's: 0 where the exponent is 0 (not 0 * inf at a = 0), and for the exponent,
        # 0 where a = 0 and b is real and >= 0; a negative real base's log is nan, as torch's
        ga = times_conj(g, b * a ** (b - 1)).where(b != 0, 0.0) if _needs(ctx, 0) else None
        gb = None
        if _needs(ctx, 1):
            real_b = b if b._data.dtype.kind != "c" else b.real.where(b.imag == 0, -1.0)
            gb = times_conj(g, out * a.log()).where((a != 0) | (real_b < 0), 0.0)
        return ga, gb


class RPowScalar(Op):
    """``scalar ** tensor``."""

    node_name = "PowBackward2"
    saved_names = ("exponent", "result")
    complex_ok = True

    @staticmethod
    def forward(ctx, b, base, exact_base=None):
        """``exact_base``: the number as written, where ``base`` is it rounded to bfloat16
        (torch's bfloat16 kernel takes it so; its gradient, the log of the written one)."""
        ctx.save_for_backward(b, OUTPUT)
        log_of = base if exact_base is None else exact_base
        if isinstance(log_of, complex) or b._data.dtype.kind == "c":
            ctx.log_base = cmath.log(log_of) if log_of != 0 else -math.inf
        else:
            ctx.log_base = math.log(log_of) if log_of > 0 else -math.inf if log_of == 0 \
                else math.nan
        x = b._data
        if x.dtype.kind in "iu" and (x < 0).any():
            # an integer to a negative power truncates toward zero, as in torch
            return np.trunc(np.power(float(base), x)).astype(x.dtype)
        return np.power(np.asarray(base, dtype=x.dtype), x)

    @staticmethod
    def backward(ctx, g):
        b, out = ctx.saved_tensors
        grad = times_conj(g, out * ctx.log_base)
        if ctx.log_base == -math.inf:
            grad = grad.where(b < 0, 0.0)  # 0 ** b: torch takes the gradient as 0 where b >= 0
        return grad


# ---- unary math -------------------------------------------------------------------------

class Abs(Op):
    saved_names = ("self",)

    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        if a._data.dtype == np.bool_:
            refuse_bool_kernel("abs_cpu", a._data)
        return np.abs(a._data)

    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved_tensors
        return g * a.sign()


def sign_array(x: np.ndarray) -> np.ndarray:
    """sign as torch's: a bool tensor's is itself, and nan's is 0 (numpy's: an error, nan)."""
    if x.dtype.kind == "b":
        return x.copy()
    out = np.sign(x)
    if x.dtype.kind == "f" and np.isnan(out).any():
        out[np.isnan(out)] = 0
    return out


class Sign(Op):
    @staticmethod
    def forward(ctx, a):
        return sign_array(a._data)

    @staticmethod
    def backward(ctx, g):
        return g * 0


class _ZeroGrad(Op):
    """Piecewise-constant ops (floor, ceil, round, trunc): gradient zero."""

    fn = None

    @classmethod
    def forward(cls, ctx, a):
        return cls.fn(a._data)

    @staticmethod
    def backward(ctx, g):
        return g * 0


class ZeroGradTie(Op):
    """``a`` unchanged, with ``b`` wired into the graph at gradient zero: where torch's op
    gives an input a gradient of zeros, not none (nearest ``grid_sample``'s grid, ``cdist``'s
    points at p = 0), so ``autograd.grad`` of it is zeros, not "not used in the graph"."""

    @staticmethod
    def forward(ctx, a, b):
        ctx.b_shape, ctx.b_dtype = b.shape, b._data.dtype
        return a._data

    @staticmethod
    def backward(ctx, g):
        from disthook.tensor import Tensor

        return g, Tensor._make(np.zeros(ctx.b_shape, dtype=ctx.b_dtype), None, 0)


class Floor(_ZeroGrad):
    fn = staticmethod(np.floor)
    node_name = "FloorBackward0"


class Ceil(_ZeroGrad):
    fn = staticmethod(np.ceil)
    node_name = "CeilBackward0"


class Round(_ZeroGrad):
    fn = staticmethod(np.round)
    node_name = "RoundBackward0"


class Trunc(_ZeroGrad):
    fn = staticmethod(np.trunc)
    node_name = "TruncBackward0"


class Exp(Op):
    saved_names = ("result",)
    complex_ok = True

    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(OUTPUT)
        return np.exp(a._data)

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved_tensors
        return g * out.conj()


class Log(Op):
    saved_names = ("self",)
    complex_ok = True

    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        return np.log(a._data)

    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved_tensors
        return g / a.conj() if a._data.dtype.kind == "c" else g / a


class Sqrt(Op):
    saved_names = ("result",)
    complex_ok = True

    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(OUTPUT)
        return np.sqrt(a._data)

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved_tensors
        return g / (2 * (out.conj() if out._data.dtype.kind == "c" else out))


class Sin(Op):
    saved_names = ("self",)
    complex_ok = True

    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        return np.sin(a._data)

    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved_tensors
        return times_conj(g, a.cos())


class Cos(Op):
    saved_names = ("self",)
    complex_ok = True

    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        return np.cos(a._data)

    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved_tensors
        return times_conj(-g, a.sin())


class Tanh(Op):
    saved_names = ("result",)
    complex_ok = True

    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(OUTPUT)
        return np.tanh(a._data)

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved_tensors
        return half_in_float32(lambda g, out: times_conj(g, 1 - out * out), g, out)


class Sigmoid(Op):
    saved_names = ("result",)
    complex_ok = True

    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(OUTPUT)
        x = a._data
        if x.dtype.kind == "c":
            return 1 / (1 + np.exp(-x))
        x = half_up(x)
        # stable in both tails: exp of a non-positive number only
        e = np.exp(-np.abs(x))
        return np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(a._data.dtype, copy=False)

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved_tensors
        if out._data.dtype == np.float16:  # torch's float16 kernel: two products in float16
            return g * (1 - out) * out
        return half_in_float32(lambda g, out: times_conj(g, out * (1 - out)), g, out)


def _erf(x: np.ndarray) -> np.ndarray:
    """erf to about 1e-7 (Abramowitz & Stegun 7.1.26), float32's precision; numpy has none.
    In float64, in place: a GELU's erf over a (16, 64, 512) activation was 7% of a GPT step's
    CPU. A float64 array gets float64's precision (``_erf_float64``)."""
    if np.ndim(x) == 0:  # numpy answers a 0-d array's ops with scalars, which take no out=
        return _erf(np.reshape(x, 1)).reshape(())
    if x.dtype == np.float64:
        return _erf_float64(x)
    a = np.abs(x, dtype=np.float64)
    t = a * 0.3275911
    t += 1.0
    np.reciprocal(t, out=t)
    poly = t * 1.061405429
    for c in (-1.453152027, 1.421413741, -0.284496736, 0.254829592):  # Horner, inside out
        poly += c
        poly *= t
    np.multiply(a, a, out=a)
    np.negative(a, out=a)
    poly *= np.exp(a, out=a)
    np.subtract(1.0, poly, out=poly)
    poly *= np.sign(x)
    return poly.astype(x.dtype, copy=False)


# erf(x) / x below 1: its Taylor series in x^2, Horner's order (18 terms: 1/(17! 35) < 1e-16)
_ERF_SERIES = [2 / math.sqrt(math.pi) * (-1) ** n / (math.factorial(n) * (2 * n + 1))
               for n in reversed(range(18))]


def _scaled_erfc(low: float, high: float):
    """erfc(x) exp(x^2) on [low, high], smooth and slowly varying there: its Chebyshev
    interpolant of degree 20, from math.erfc at the Chebyshev points (to 5e-15 relative), as
    a polynomial in u = (2x - low - high) / (high - low), highest power first (its
    coefficients stay below 1: Horner's rule loses nothing, and runs in place)."""
    def scaled(u):
        return np.array([math.erfc(v) * math.exp(v * v) for v in (low + high + (high - low) * u) / 2])

    cheb = np.polynomial.chebyshev.chebinterpolate(scaled, 20)
    return low, high, np.polynomial.chebyshev.cheb2poly(cheb)[::-1].tolist()


_ERFC_PIECES = [_scaled_erfc(low, high) for low, high in ((1.0, 2.0), (2.0, 3.5), (3.5, 6.0))]


def _erf_float64(x: np.ndarray) -> np.ndarray:
    """erf of float64 ``x`` to a few units in the last place: the series below 1, then
    ``1 - erfc`` by pieces, and 1 from 6 on (erfc(6) < 2e-17); the sign of ``x`` (-0.0 too),
    NaN as NaN."""
    a = np.abs(x)
    out = np.ones_like(a)
    small = a < 1.0
    s = a[small]
    t = s * s
    acc = np.full_like(t, _ERF_SERIES[0])
    for c in _ERF_SERIES[1:]:
        acc *= t
        acc += c
    out[small] = s * acc
    for low, high, coef in _ERFC_PIECES:
        inside = (a >= low) & (a < high)
        s = a[inside]
        u = (2 * s - (low + high)) / (high - low)
        scaled = np.full_like(u, coef[0])
        for c in coef[1:]:
            scaled *= u
            scaled += c
        np.multiply(s, s, out=s)
        np.negative(s, out=s)
        scaled *= np.exp(s, out=s)
        out[inside] = 1.0 - scaled
    out[np.isnan(a)] = np.nan
    return np.copysign(out, x)


class Erf(Op):
    saved_names = ("self",)

    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        return _erf(a._data)

    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved_tensors
        return g * (2 / math.sqrt(math.pi)) * (-(a * a)).exp()


# ---- activations ------------------------------------------------------------------------

# rows of zeros, by (dtype, length), that ReLU takes its maximum with: numpy's loop for an
# array against a scalar is about twice as slow as against a broadcast row
_ZERO_ROWS: dict = {}
_ZERO_ROW_MAX = 1 << 16
_LONG_ROW, _LONG_ROW_MIN = 1 << 14, 1 << 8


def _zeros_first_is_relu(dtype) -> bool:
    """Does ``np.maximum(zeros, x)`` give torch's ReLU, ``x < 0 ? 0 : x`` (-0.0 and NaNs of
    either sign kept), bit for bit, for ``dtype``, over lengths that take numpy's vector and
    scalar loops?"""
    special = [-0.0, np.nan, -np.nan, -np.inf, np.inf, 1.0, -1.0, 5e-324, -5e-324]
    for n in (1, 5, 16, 37, 130):
        x = np.array((special * 15)[:n], dtype)
        want = x.copy()
        want[x < 0] = 0
        for zeros in (np.zeros(n, dtype), dtype(0)):
            if not np.array_equal(np.maximum(zeros, x).view(np.uint8), want.view(np.uint8)):
                return False
    return True


_ZEROS_FIRST = {np.dtype(t) for t in (np.float32, np.float64) if _zeros_first_is_relu(t)}


def _relu(x: np.ndarray) -> np.ndarray:
    if x.dtype not in _ZEROS_FIRST:  # float16 keeps -0.0 the other way round
        return np.maximum(x, 0, dtype=x.dtype)
    n = x.shape[-1] if x.ndim else 0
    rows = 0
    if x.size and x.flags.c_contiguous:
        # numpy's loop runs once per row of zeros: the elements of a C-ordered array in rows
        # of the longest power of two up to _LONG_ROW that divides their count, where that
        # is longer (a conv's output, rows of 24, took 1.6x torch's time; in rows of
        # thousands, torch's)
        long = math.gcd(x.size, _LONG_ROW)
        if long >= _LONG_ROW_MIN and (long > n or n > _ZERO_ROW_MAX):
            n, rows = long, x.size // long
    if 8 <= n <= _ZERO_ROW_MAX:
        key = (x.dtype, n)
        zeros = _ZERO_ROWS.get(key)
        if zeros is None:
            if len(_ZERO_ROWS) > 64:
                _ZERO_ROWS.clear()
            zeros = _ZERO_ROWS[key] = np.zeros(n, x.dtype)
            zeros.flags.writeable = False
        if not rows:
            return np.maximum(zeros, x)
        out = np.empty(x.shape, x.dtype)  # (a new array of its own, in x's shape)
        np.maximum(zeros, x.reshape(rows, n), out=out.reshape(rows, n))
        return out
    return np.asarray(np.maximum(x.dtype.type(0), x))


class Relu(Op):
    saved_names = ("result",)

    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(OUTPUT)
        return _relu(a._data)

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved_tensors
        if plain_float(g, out):  # no graph of it: the op's pass alone
            return plain_tensor(ReluGrad.forward(_NO_CTX, g, out))
        return ReluGrad.apply(g, out)


class ReluGrad(Op):
    """ReLU's gradient, torch's ``threshold_backward``: ``g`` where the output is not <= 0
    (a NaN output passes it), and 0 elsewhere even where ``g`` is inf or NaN."""

    node_name = "ThresholdBackwardBackward0"

    @staticmethod
    def forward(ctx, g, out):
        need = ctx.needs_input_grad
        if need:  # g's gradient is this op again; the output's is zeros (an edge, as torch)
            ctx.save_for_backward(None, out if need[0] else None)
        # The gradient's bits ANDed with a mask of all ones or all zeros: g itself (inf and
        # NaN too) or +0, in one branch-free pass with no check for NaN (float times bool
        # would give NaN for inf x 0, and a masked write is several times slower on a random
        # mask). "<= 0", not "== 0": a saved-tensor hook may hand back an output changed in
        # place since (negated), which torch's threshold_backward compares as it is
        data = g._data
        mask = np.asarray(np.less_equal(out._data, 0)).view(np.int8)  # 0-d: a scalar
        np.subtract(mask, 1, out=mask)  # 1 -> 0, 0 -> -1: every bit set where out > 0 or NaN
        bits = np.dtype(f"i{data.dtype.itemsize}")
        if mask.shape != data.shape:  # (a gradient broadcast against the output)
            return np.bitwise_and(data.view(bits), mask).view(data.dtype)
        # the mask widened to the gradient's width (sign-extended: -1 stays every bit) in
        # one pass of its own, then ANDed into that new array: two unbuffered passes, where
        # ANDing the narrow mask in took numpy's cast buffers (at 128 x 1024 float32: 102
        # against 119 us alone, 2-4% less inside the MLP bench's step)
        wide = mask.astype(bits)
        return np.bitwise_and(data.view(bits), wide, out=wide).view(data.dtype)

    @staticmethod
    def backward(ctx, h):
        _, out = ctx.saved_tensors
        return ((None if out is None else ReluGrad.apply(h, out)),
                h.new_zeros(h.shape) if ctx.needs_input_grad[1] else None)


class MaskedGrad(Op):
    """An activation's gradient where its derivative is piecewise constant (torch's
    ``leaky_relu_backward``, ``hardtanh_backward``, ``threshold_backward``): ``g`` times the
    derivative at ``a``, +0 where that is 0 (even where ``g`` is inf or NaN). Differentiated
    again it is linear in ``g`` and of zero derivative in ``a``, an edge torch keeps: what
    lies before the activation gets zeros from a gradient penalty, not None. A subclass's
    forward gives ``masked`` the derivative at ``a``."""

    @staticmethod
    def masked(ctx, g, a, params: dict, passes, otherwise: float = 0.0) -> np.ndarray:
        """``g`` where ``passes``, ``otherwise`` times ``g`` elsewhere (+0 for 0)."""
        need = ctx.needs_input_grad
        if need:
            ctx.save_for_backward(a if need[0] else None)
            ctx.params = params
        d = g._data
        rest = d * np.asarray(otherwise, d.dtype) if otherwise else np.zeros((), d.dtype)
        return np.where(passes, d, rest)

    @staticmethod
    def backward(ctx, h):
        (a,) = ctx.saved_tensors
        gg = None if a is None else type(ctx).apply(h, a, **ctx.params)
        return gg, h.new_zeros(h.shape) if ctx.needs_input_grad[1] else None


class LeakyReluGrad(MaskedGrad):
    node_name = "LeakyReluBackwardBackward0"

    @staticmethod
    def forward(ctx, g, a, negative_slope=0.01):
        return MaskedGrad.masked(ctx, g, a, {"negative_slope": negative_slope}, a._data > 0,
                                 negative_slope)


class LeakyRelu(Op):
    saved_names = ("self",)

    @staticmethod
    def forward(ctx, a, negative_slope=0.01):
        floating_kernel(a, "leaky_relu_cpu")
        ctx.save_for_backward(a)
        ctx.slope = negative_slope
        x = a._data
        return np.where(x > 0, x, x * np.asarray(negative_slope, dtype=x.dtype))

    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved_tensors
        return LeakyReluGrad.apply(g, a, negative_slope=ctx.slope)


class Gelu(Op):
    saved_names = ("self",)

    @staticmethod
    def forward(ctx, a, approximate="none"):
        floating_kernel(a, "GeluKernelImpl")
        ctx.save_for_backward(a)
        ctx.approximate = approximate
        x = half_up(a._data)
        if approximate == "tanh":
            inner = math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)
            return (0.5 * x * (1 + np.tanh(inner))).astype(a._data.dtype, copy=False)
        return (0.5 * x * (1 + _erf(x / math.sqrt(2)))).astype(a._data.dtype, copy=False)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return half_in_float32(lambda g, x: Gelu._grad(g, x, ctx.approximate), g, x)

    @staticmethod
    def _grad(g, x, approximate):
        if approximate == "tanh":
            k = math.sqrt(2 / math.pi)
            inner = k * (x + 0.044715 * x ** 3)
            th = inner.tanh()
            d_inner = k * (1 + 3 * 0.044715 * x * x)
            return g * (0.5 * (1 + th) + 0.5 * x * (1 - th * th) * d_inner)
        cdf = 0.5 * (1 + (x * (1 / math.sqrt(2))).erf())
        pdf = (-0.5 * x * x).exp() * (1 / math.sqrt(2 * math.pi))
        return g * (cdf + x * pdf)


class Silu(Op):
    saved_names = ("self",)

    @staticmethod
    def forward(ctx, a):
        floating_kernel(a, "silu_cpu")
        ctx.save_for_backward(a)
        x = half_up(a._data)
        e = np.exp(-np.abs(x))
        sig = np.where(x >= 0, 1 / (1 + e), e / (1 + e))
        return (x * sig).astype(a._data.dtype, copy=False)

    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved_tensors
        return half_in_float32(Silu._grad, g, a)

    @staticmethod
    def _grad(g, a):
        s = a.sigmoid()
        return g * (s * (1 + a * (1 - s)))


class Elu(Op):
    """``x`` where positive, ``alpha * (exp(x) - 1)`` elsewhere."""

    saved_names = ("self",)

    @staticmethod
    def forward(ctx, a, alpha=1.0):
        floating_kernel(a, "elu_cpu")
        ctx.save_for_backward(a)
        ctx.alpha = alpha
        x = a._data
        return np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0))).astype(x.dtype,
                                                                            copy=False)

    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved_tensors
        return g * a.new_ones(()).where(a > 0, a.exp() * ctx.alpha)


class EluInplace(Elu):
    """``elu_``: torch records the in-place form under its own node."""

    node_name = "EluBackward1"


class Softplus(Op):
    """``log(1 + exp(beta * x)) / beta``; ``x`` itself where ``beta * x > threshold``."""

    saved_names = ("self",)

    @staticmethod
    def forward(ctx, a, beta=1.0, threshold=20.0):
        floating_kernel(a, "softplus_cpu")
        ctx.save_for_backward(a)
        ctx.beta, ctx.threshold = beta, threshold
        x = a._data
        bx = x * beta
        soft = np.logaddexp(0, bx) / beta
        return np.where(bx > threshold, x, soft).astype(x.dtype, copy=False)

    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved_tensors
        bx = a * ctx.beta
        return g * a.new_ones(()).where(bx > ctx.threshold, bx.sigmoid())


class Mish(Op):
    """``x * tanh(softplus(x))``."""

    saved_names = ("self",)

    @staticmethod
    def forward(ctx, a):
        floating_kernel(a, "mish_cpu")
        ctx.save_for_backward(a)
        x = a._data
        return (x * np.tanh(np.logaddexp(0, x))).astype(x.dtype, copy=False)

    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved_tensors
        t = Softplus.apply(a).tanh()
        return g * (t + a * a.sigmoid() * (1 - t * t))


class Hardswish(Op):
    """``x * relu6(x + 3) / 6``."""

    saved_names = ("self",)

    @staticmethod
    def forward(ctx, a):
        floating_kernel(a, "hardswish_cpu")
        ctx.save_for_backward(a)
        x = a._data
        return (x * np.clip(x + 3, 0, 6) / 6).astype(x.dtype, copy=False)

    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved_tensors
        zero, one = a.new_zeros(()), a.new_ones(())
        # torch's kernel: 0 up to -3 whatever g is (inf or NaN times 0 would be NaN), g from 3
        middle = (a / 3 + 0.5).where(a < 3, one)
        return (g * zero.where(a <= -3, middle)).where(a > -3, zero)


def clamp_operand(x, bounds, kernel: str, refuse_bool: bool = True):
    """``x`` in the dtype torch's clamp family computes in with these bounds (None skipped):
    torch's promotion of the input with the bounds, Python numbers included (a bool tensor
    with an int bound is int64, an integer one with a float bound the default float), or
    tensors (a 0-dim bound counts only with a higher category than the others); a bool
    result is torch's NotImplementedError for ``kernel`` where ``refuse_bool``."""
    from disthook.ops.base import _category, result_dtype
    from disthook.tensor import Tensor

    bounds = [b for b in bounds if b is not None]
    if x._data.dtype.kind == "f" and all(type(b) in (int, float) for b in bounds):
        return x  # (the hot path: a float tensor keeps its dtype with real numbers)
    if bounds and isinstance(bounds[0], Tensor):
        tiers = [[t._data.dtype for t in (x, *bounds) if (t.ndim != 0) == dimensioned]
                 for dimensioned in (True, False)]
        shaped, scalar = (functools.reduce(_promote_torch, t) if t else None for t in tiers)
        dt = scalar if shaped is None or (
            scalar is not None and _category(scalar) > _category(shaped)) else shaped
    else:
        dt = x._data.dtype
        for b in bounds:
            dt = result_dtype(x if x._data.dtype == dt else x.to(dt), b)
    if dt == np.bool_ and refuse_bool:
        raise NotImplementedError(f'"{kernel}" not implemented for \'Bool\'')
    return x if x._data.dtype == dt else x.to(dt)


_C_NAMES = {"uint8": "uint8_t", "int8": "int8_t", "int16": "int16_t", "int32": "int",
            "int64": "int64_t"}


def _integer_bound(bound, dt):
    """A Python int bound for an integer tensor, as torch converts it: out of the type's
    range is torch's RuntimeError; a negative one for an unsigned type wraps (-1 is 255 for
    uint8) where its magnitude fits."""
    if dt.kind not in "iu" or not isinstance(bound, int) or isinstance(bound, bool):
        return bound
    info = np.iinfo(dt)
    low = -info.max if dt.kind == "u" else info.min
    if not low <= bound <= info.max:
        raise RuntimeError(f"value cannot be converted to type {_C_NAMES.get(dt.name, dt.name)} "
                           "without overflow")
    return bound % (info.max + 1) if bound < 0 and dt.kind == "u" else bound


def _promote_torch(da, db):
    """Two tensors' dtype as torch promotes them: a higher category's, or else the wider."""
    from disthook.ops.base import _category, _promote

    ca, cb = _category(da), _category(db)
    return _promote(da, db) if ca == cb else (da if ca > cb else db)


class Clamp(Op):
    node_name = "ClampBackward1"
    saved_names = ("self",)

    @staticmethod
    def forward(ctx, a, min=None, max=None):
        ctx.save_for_backward(a)
        ctx.bounds = min, max = [_integer_bound(b, a._data.dtype) for b in (min, max)]
        return np.clip(a._data, min, max).astype(a._data.dtype, copy=False)

    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved_tensors
        lo, hi = ctx.bounds
        mask = None
        if lo is not None:
            mask = a >= lo
        if hi is not None:
            mask = (a <= hi) if mask is None else mask.logical_and(a <= hi)
        # zero outside, even where g is inf or NaN (a product with the mask gives NaN there)
        return g if mask is None else g.where(mask, g.new_zeros(()))


class ClampMin(Clamp):
    """``clamp_min``: torch names its node apart from ``clamp(min=)``."""

    node_name = "ClampMinBackward0"


class ClampMax(Clamp):
    node_name = "ClampMaxBackward0"


class ClampTensor(Op):
    """``clamp`` with Tensor bounds, either of which may be absent; a bound takes the gradient
    where it binds."""

    node_name = "ClampBackward0"

    @staticmethod
    def forward(ctx, a, *bounds, has_min, has_max):
        ctx.save_for_backward(a, *bounds)
        ctx.has_min, ctx.has_max = has_min, has_max
        out = a._data
        if has_min:
            out = np.maximum(out, bounds[0]._data)
        if has_max:
            out = np.minimum(out, bounds[-1]._data)
        return out

    @staticmethod
    def backward(ctx, g):
        a, *bounds = ctx.saved_tensors
        zero = g.new_zeros(())
        lo = bounds[0] if ctx.has_min else None
        hi = bounds[-1] if ctx.has_max else None
        inside = a >= lo if lo is not None else None
        if hi is not None:
            inside = a <= hi if inside is None else inside.logical_and(a <= hi)
        grads = [g.where(inside, zero)]
        # with min > max the result is max everywhere, as in torch
        if lo is not None:
            binds = a < lo if hi is None else (a < lo).logical_and(lo < hi)
            grads.append(g.where(binds, zero))
        if hi is not None:
            binds = a > hi if lo is None else (a > hi).logical_or(hi < lo)
            grads.append(g.where(binds, zero))
        return tuple(grads)


class ClampMinTensor(ClampTensor):
    node_name = "ClampMinBackward1"


class ClampMaxTensor(ClampTensor):
    node_name = "ClampMaxBackward1"


class Maximum(Op):
    saved_names = ("self", "other")

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return np.maximum(a._data, b._data)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        # ties share the gradient equally, as torch does
        share = (a > b) + (a == b) * 0.5
        return g * share, g * (1 - share)


class Minimum(Op):
    saved_names = ("self", "other")

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return np.minimum(a._data, b._data)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        share = (a < b) + (a == b) * 0.5
        return g * share, g * (1 - share)


class Addcmul(Op):
    """``a + value * t1 * t2``."""

    @staticmethod
    def forward(ctx, a, t1, t2, value=1):
        ctx.value = value
        need = ctx.needs_input_grad
        if need:
            ctx.save_for_backward(t1 if need[2] else None, t2 if need[1] else None)
        return a._data + value * t1._data * t2._data

    @staticmethod
    def backward(ctx, g):
        t1, t2 = ctx.saved_tensors
        g1 = g * t2 * ctx.value if _needs(ctx, 1) else None
        g2 = g * t1 * ctx.value if _needs(ctx, 2) else None
        return g, g1, g2


class Addcdiv(Op):
    """``a + value * t1 / t2``."""

    @staticmethod
    def forward(ctx, a, t1, t2, value=1):
        ctx.value = value
        need = ctx.needs_input_grad
        if need:
            ctx.save_for_backward(t1 if need[2] else None, t2)
        return a._data + value * t1._data / t2._data

    @staticmethod
    def backward(ctx, g):
        t1, t2 = ctx.saved_tensors
        g1 = g * ctx.value / t2 if _needs(ctx, 1) else None
        g2 = -g * ctx.value * t1 / (t2 * t2) if _needs(ctx, 2) else None
        return g, g1, g2


class Where(Op):
    """``where(cond, a, b)``; cond takes no gradient."""

    complex_ok = True  # each gradient is g where chosen, 0 elsewhere
    saved_names = ("condition",)

    @staticmethod
    def forward(ctx, cond, a, b):
        ctx.save_for_backward(cond)
        return np.where(cond._data, a._data, b._data)

    @staticmethod
    def backward(ctx, g):
        (cond,) = ctx.saved_tensors
        zero = g.new_zeros(())
        ga = g.where(cond, zero) if _needs(ctx, 1) else None
        gb = zero.where(cond, g) if _needs(ctx, 2) else None
        return None, ga, gb


# ---- comparisons and logic: no gradient ----------------------------------------------------

class _NoGrad(Op):
    differentiable = False
    fn = None

    @classmethod
    def forward(cls, ctx, *xs):
        return cls.fn(*[x._data for x in xs])


def _nograd_op(name: str, fn) -> type:
    return type(name, (_NoGrad,), {"fn": staticmethod(fn)})


Eq = _nograd_op("Eq", np.equal)
Ne = _nograd_op("Ne", np.not_equal)
Eq.complex_ok = Ne.complex_ok = True  # (order comparisons are refused, as torch's)
Lt = _nograd_op("Lt", np.less)
Le = _nograd_op("Le", np.less_equal)
Gt = _nograd_op("Gt", np.greater)
Ge = _nograd_op("Ge", np.greater_equal)
LogicalAnd = _nograd_op("LogicalAnd", np.logical_and)
LogicalOr = _nograd_op("LogicalOr", np.logical_or)
LogicalXor = _nograd_op("LogicalXor", np.logical_xor)
LogicalNot = _nograd_op("LogicalNot", np.logical_not)
IsNan = _nograd_op("IsNan", np.isnan)
IsInf = _nograd_op("IsInf", np.isinf)
IsFinite = _nograd_op("IsFinite", np.isfinite)
BitAnd = _nograd_op("BitAnd", np.bitwise_and)
BitOr = _nograd_op("BitOr", np.bitwise_or)
BitXor = _nograd_op("BitXor", np.bitwise_xor)
BitNot = _nograd_op("BitNot", np.invert)


class ComparedInPlace(Op):
    """``t.eq_(other)`` and the other comparisons in place, on a tensor whose graph is
    recorded: torch records a node for them (``EqBackward0`` for a number, ``EqBackward1``
    for a tensor ``other``) that gives every input a zero gradient. ``value``: the
    comparison's result, computed by the out-of-place method."""

    @staticmethod
    def forward(ctx, a, *others, value):
        return value.astype(a._data.dtype)

    @staticmethod
    def backward(ctx, g):
        return tuple(g.new_zeros(shape) if meta else None
                     for meta, shape in ((m, m and m[0]) for m in ctx._input_meta))


_COMPARED = {"eq": "Eq", "ne": "Ne", "not_equal": "Ne", "lt": "Lt", "less": "Lt", "le": "Le",
             "less_equal": "Le", "gt": "Gt", "greater": "Gt", "ge": "Ge",
             "greater_equal": "Ge"}


# one op class per comparison and kind of ``other`` (a number: 0, a tensor: 1), made here
# once, each under a name of its own in this module: a worker finds an op by its name, and
# two classes of one name (made on demand before) stood for one op there
_COMPARED_IN_PLACE: dict[tuple[str, int], type] = {}
for _short in sorted(set(_COMPARED.values())):
    for _other in (0, 1):
        _op = type(f"{_short}InPlace{_other}", (ComparedInPlace,),
                   {"node_name": f"{_short}Backward{_other}", "__module__": __name__})
        globals()[_op.__name__] = _COMPARED_IN_PLACE[_short, _other] = _op
del _short, _other, _op


def compared_in_place(name: str, tensor_other: bool) -> type | None:
    """The op ``<name>_`` records in place (``ComparedInPlace``, named as torch names its
    node), None when ``name`` is no comparison."""
    short = _COMPARED.get(name)
    return None if short is None else _COMPARED_IN_PLACE[short, int(tensor_other)]


class _RoundedDivision(_NoGrad):
    """a / b rounded as ``fn`` rounds it, exact for integers (no trip through floats, which
    loses the low digits past 2**24 or 2**53); an integer divided by zero is torch's
    ZeroDivisionError, where numpy gives 0."""

    kernel = ""  # torch's kernel's name, for the error of bool operands

    @classmethod
    def forward(cls, ctx, a, b):
        x, y = a._data, b._data
        refuse_bool_kernel(cls.kernel, x, y)
        if x.dtype.kind in "iub" and y.dtype.kind in "iub" and not np.all(y):
            raise RuntimeError("ZeroDivisionError")
        return cls.fn(x, y)


def _trunc_divide(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    # x - fmod(x, y) is a multiple of y, so its floor division by y is exact and truncated
    return np.floor_divide(x - np.fmod(x, y), y)


def floored_remainder(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """torch's remainder: C's fmod moved by one divisor where it is nonzero and its sign is not
    the divisor's; a zero result keeps the dividend's sign (-4 % 2 is -0.0), where numpy's
    gives the divisor's."""
    if _dtype.kind(x.dtype) != "f":
        return np.remainder(x, y)
    with np.errstate(invalid="ignore"):
        mod = np.fmod(x, y)
        return np.where((mod != 0) & ((y < 0) != (mod < 0)), mod + y, mod)


def _floor_divide(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """torch's floor division of floats: (x - fmod(x, y)) / y, one less where the remainder's
    sign is not the divisor's, rounded to the nearest whole; -5 // inf is -1 (numpy: -0.0)."""
    if _dtype.kind(x.dtype) != "f":
        return np.floor_divide(x, y)
    with np.errstate(divide="ignore", invalid="ignore"):
        mod = np.fmod(x, y)
        div = (x - mod) / y
        div = div - ((mod != 0) & ((y < 0) != (mod < 0)))
        whole = np.floor(div)
        whole = whole + (div - whole > 0.5)
        out = np.where(div != 0, whole, np.copysign(np.zeros((), div.dtype), x / y))
        return np.where(y == 0, x / y, out).astype(div.dtype, copy=False)


class NoDerivative(Op):
    """An op torch defines no derivative for: its output takes part in the graph (it
    requires grad when an input does), and backward through it is torch's error: by default
    a ``RuntimeError`` naming the op, ``aten::<torch_name>`` (``<torch_name>_`` for the
    in-place form: ``in_place``); an op whose node torch names (``unique``'s) gives its own
    ``error(message)``. ``fn`` computes the output from the inputs' arrays, or the caller
    passes the output computed already (``result=``)."""

    node_name = "NotImplemented"
    fn = None
    torch_name = ""
    error = RuntimeError
    message = ""

    @classmethod
    def forward(cls, ctx, *xs, result=None):
        return cls.fn(*[x._data for x in xs]) if result is None else result

    @staticmethod
    def backward(ctx, *grads):
        if ctx.message:
            raise ctx.error(ctx.message)
        suffix = "_" if ctx.__dict__.get("in_place") else ""
        raise RuntimeError(f"derivative for aten::{ctx.torch_name}{suffix} is not implemented")


class FloorDiv(_RoundedDivision, NoDerivative):
    """``a // b`` (torch.floor_divide): a float quotient of a tensor that requires grad
    requires grad too, and its backward is torch's error (``div(rounding_mode="floor")``
    is the form with a gradient: zero)."""

    differentiable = True
    node_name = "NotImplemented"  # (each op class names its own node: Op.__init_subclass__)
    torch_name = "floor_divide"
    kernel = "div_floor_cpu"
    fn = staticmethod(_floor_divide)


TruncDiv = type("TruncDiv", (_RoundedDivision,), {"fn": staticmethod(_trunc_divide),
                                                  "kernel": "div_trunc_cpu"})


class _RoundedDivisionGrad(Op):
    """``div(a, b, rounding_mode=...)`` of floats, with torch's node: the quotient rounded
    as ``//``'s (-5 / inf floors to -1, where ``floor(a / b)`` gives -0.0), and zeros for
    both gradients (the rounded quotient is flat), even where ``b`` is 0 or inf (through
    ``floor(a / b)`` they were NaN)."""

    node_name = "DivBackward2"
    fn = None
    kernel = ""  # torch's kernel's name, for the error of bool operands

    @classmethod
    def forward(cls, ctx, a, b):
        refuse_bool_kernel(cls.kernel, a._data, b._data)
        return cls.fn(a._data, b._data)

    @staticmethod
    def backward(ctx, g):
        return g.new_zeros(g.shape), g.new_zeros(g.shape)


FloorDivGrad = type("FloorDivGrad", (_RoundedDivisionGrad,),
                    {"fn": staticmethod(_floor_divide), "kernel": FloorDiv.kernel})
def _trunc_quotient(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """a / b rounded toward zero, as torch's float ``div_trunc``: -5 / inf is -0.0 and x / 0
    is ±inf or NaN (``_trunc_divide``'s exact integer path gave 0.0 and NaN there)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.trunc(x / y)


TruncDivGrad = type("TruncDivGrad", (_RoundedDivisionGrad,),
                    {"fn": staticmethod(_trunc_quotient), "kernel": TruncDiv.kernel})
