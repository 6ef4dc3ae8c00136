"""Tensor methods for elementwise math, bitwise and comparison ops, and the in-place ``_``
form of every out-of-place method: one-liners over the ops in ``disthook.ops.math``.

``Tensor`` inherits ``MathMethods``; the methods reach the Tensor machinery through ``self``.
"""
from __future__ import annotations

import builtins
import math

import numpy as np

from disthook import _dtype
from disthook.autograd import grad_mode
from disthook.ops import complex as C
from disthook.ops import elementwise as E
from disthook.ops import math as M
from disthook.ops.base import refuse_complex


def _is_tensor(x) -> bool:
    return isinstance(x, MathMethods)


def _nograd_op(name: str, fn) -> type:
    return E._nograd_op(name, fn)


BitwiseLeftShift = _nograd_op("BitwiseLeftShift", np.left_shift)
BitwiseRightShift = _nograd_op("BitwiseRightShift", np.right_shift)
Gcd = _nograd_op("Gcd", np.gcd)
Lcm = _nograd_op("Lcm", np.lcm)
Signbit = _nograd_op("Signbit", np.signbit)
IsPosInf = _nograd_op("IsPosInf", np.isposinf)
IsNegInf = _nograd_op("IsNegInf", np.isneginf)


def _integral(t, name: str) -> None:
    if _dtype.kind(t._data.dtype) == "f":
        raise RuntimeError(f"\"{name}_cpu\" not implemented for '{_dtype.scalar_type_name(t.dtype)}'")


class MathMethods:
    """Elementwise math, bitwise and comparison methods of Tensor."""

    __slots__ = ()

    # ---- unary math ------------------------------------------------------------------------
    def _unary_float(self, op, **params):
        return op.apply(self._floating(), **params)

    def asin(self):
        return self._unary_float(M.Asin)

    def acos(self):
        return self._unary_float(M.Acos)

    def atan(self):
        return self._unary_float(M.Atan)

    def sinh(self):
        return self._unary_float(M.Sinh)

    def cosh(self):
        return self._unary_float(M.Cosh)

    def asinh(self):
        return self._unary_float(M.Asinh)

    def acosh(self):
        return self._unary_float(M.Acosh)

    def atanh(self):
        return self._unary_float(M.Atanh)

    arcsin, arccos, arctan = asin, acos, atan
    arcsinh, arccosh, arctanh = asinh, acosh, atanh

    def exp2(self):
        return self._unary_float(M.Exp2)

    def erfc(self):
        return self._unary_float(M.Erfc)

    def erfinv(self):
        return self._unary_float(M.Erfinv)

    def lgamma(self):
        return self._unary_float(M.Lgamma)

    def digamma(self):
        return self._unary_float(M.Digamma)

    def polygamma(self, n):
        if n < 0:
            raise RuntimeError("polygamma(n, x) does not support negative n.")
        return self._unary_float(M.Polygamma, n=int(n))

    def mvlgamma(self, p):
        if p < 1:
            raise RuntimeError("p has to be greater than or equal to 1")
        x = self._floating()
        if bool((x._data <= (p - 1) / 2).any()):
            raise RuntimeError(f"All elements must be greater than (p-1)/2 = {(p - 1) / 2}")
        terms = [(x - j / 2).lgamma() for j in range(p)]
        return sum(terms[1:], terms[0]) + p * (p - 1) / 4 * math.log(math.pi)

    def i0(self):
        return self._unary_float(M.I0)

    def sinc(self):
        return self._unary_float(M.Sinc)

    def logit(self, eps=None):
        return self._unary_float(M.Logit, eps=eps)

    def deg2rad(self):
        return self._unary_float(M.Deg2Rad)

    def rad2deg(self):
        return self._unary_float(M.Rad2Deg)

    def frac(self):
        if _dtype.kind(self._data.dtype) != "f":
            raise RuntimeError(f"\"frac_cpu\" not implemented for "
                               f"'{_dtype.scalar_type_name(self.dtype)}'")
        return M.Frac.apply(self)

    def sgn(self):
        return M.Sgn.apply(self)

    def fix(self):
        return self.trunc()

    def positive(self):
        if self._data.dtype.kind == "b":
            raise RuntimeError("The `+` operator, on a bool tensor is not supported.")
        return self

    def nan_to_num(self, nan=0.0, posinf=None, neginf=None):
        if self._data.dtype.kind == "c":
            refuse_complex("nan_to_num", self)
        if _dtype.kind(self._data.dtype) != "f":
            return self.clone()
        return M.NanToNum.apply(self, nan=nan, posinf=posinf, neginf=neginf)

    def signbit(self):
        return Signbit.apply(self)

    def isposinf(self):
        return IsPosInf.apply(self)

    def isneginf(self):
        return IsNegInf.apply(self)

    def isreal(self):
        if self._data.dtype.kind == "c":
            return self._make(self._data.imag == 0, None, 0)
        return self._make(np.ones(self._data.shape, dtype=bool), None, 0)

    def is_signed(self) -> bool:
        return _dtype.kind(self._data.dtype) in "fic"

    def frexp(self):
        from disthook.tensor import _ValuesIndices

        mantissa, exponent = np.frexp(self._data)
        out = _ValuesIndices(self._make(mantissa, None, 0),
                             self._make(exponent.astype(np.int32), None, 0), "frexp")
        return out

    def conj(self):
        return C.Conj.apply(self) if self._data.dtype.kind == "c" else self

    conj_physical = conj

    def resolve_conj(self):
        return self  # (no tensor here is lazily conjugated or negated)

    resolve_neg = resolve_conj

    def is_conj(self) -> bool:
        return False  # conj() gives a copy here, never a lazily conjugated view

    is_neg = is_conj

    @property
    def real(self):
        return C.Real.apply(self) if self._data.dtype.kind == "c" else self

    @real.setter
    def real(self, value) -> None:
        self.real.copy_(value)

    @property
    def imag(self):
        return C.Imag.apply(self)

    @imag.setter
    def imag(self, value) -> None:
        self.imag.copy_(value)

    def angle(self):
        if self._data.dtype.kind == "c":
            return C.AngleComplex.apply(self)
        x = self._floating()
        return (x < 0).to(x.dtype) * math.pi + x * 0  # pi where negative, 0 elsewhere

    # ---- binary math -----------------------------------------------------------------------
    def atan2(self, other):
        return self._binary_float(M.Atan2, other)

    arctan2 = atan2

    def hypot(self, other):
        return self._binary_float(M.Hypot, other)

    def copysign(self, other):
        return self._binary_float(M.Copysign, other)

    def fmod(self, other):
        return self._binary(M.Fmod, M.wrapped_divisor(self, other))

    def remainder(self, other):
        return self._binary(M.Remainder, M.wrapped_divisor(self, other))

    def floor_divide(self, other):
        return self // other

    def xlogy(self, other):
        return self._binary_float(M.Xlogy, other)

    def logaddexp(self, other):
        return self._binary_float(M.Logaddexp, other)

    def logaddexp2(self, other):
        return self._binary_float(M.Logaddexp2, other)

    def float_power(self, exponent):
        if self._data.dtype.kind == "c" or _is_tensor(exponent) and exponent.is_complex():
            refuse_complex("float_power", self)
        e = exponent.double() if _is_tensor(exponent) else exponent
        return self.double().pow(e)

    def fmax(self, other):
        return self.where((self >= other) | other.isnan(), other)

    def fmin(self, other):
        return self.where((self <= other) | other.isnan(), other)

    def ldexp(self, other):
        return self._floating() * (other.exp2() if _is_tensor(other) else 2.0 ** other)

    def igamma(self, other):
        return self._binary_float(M.Igamma, other)

    def igammac(self, other):
        return self._binary_float(M.Igammac, other)

    def heaviside(self, values):
        if self._data.dtype != values._data.dtype:
            raise RuntimeError(f"heaviside is not yet implemented for tensors with different "
                               f"dtypes, got {self.dtype} and {values.dtype}")
        return self._binary(M.Heaviside, values)

    def nextafter(self, other):
        return self._binary(M.Nextafter, other)

    def gcd(self, other):
        _integral(self, "gcd")
        return self._binary(Gcd, other)

    def lcm(self, other):
        _integral(self, "lcm")
        return self._binary(Lcm, other)

    # ---- bitwise and comparison ------------------------------------------------------------
    def bitwise_and(self, other):
        return self & other

    def bitwise_or(self, other):
        return self | other

    def bitwise_xor(self, other):
        return self ^ other

    def bitwise_not(self):
        return ~self

    def bitwise_left_shift(self, other):
        return self._binary(BitwiseLeftShift, other)

    def bitwise_right_shift(self, other):
        return self._binary(BitwiseRightShift, other)

    __lshift__ = bitwise_left_shift
    __rshift__ = bitwise_right_shift

    def __rlshift__(self, other):
        return self._binary(BitwiseLeftShift, other, reverse=True)

    def __rrshift__(self, other):
        return self._binary(BitwiseRightShift, other, reverse=True)

    def greater(self, other):
        return self > other

    def greater_equal(self, other):
        return self >= other

    def less(self, other):
        return self < other

    def less_equal(self, other):
        return self <= other

    def not_equal(self, other):
        return self != other

    def is_nonzero(self) -> bool:
        if self._data.size != 1:
            if self._data.size == 0:
                raise RuntimeError("Boolean value of Tensor with no values is ambiguous")
            raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")
        return builtins.bool(self._data.reshape(()))

    def is_same_size(self, other) -> bool:
        return self.shape == other.shape


    # ---- random fills ------------------------------------------------------------------------
    def _fill_random(self, draw, generator):
        return self._inplace(M.RandomFill, draw=draw, generator=generator)

    def bernoulli_(self, p=0.5, *, generator=None):
        probs = p._data if _is_tensor(p) else p
        return self._fill_random(lambda rng, shape: rng.random(shape) < probs, generator)

    def bernoulli(self, p=None, *, generator=None):
        if self._data.dtype.kind == "c":
            refuse_complex("bernoulli", self)
        probs = self._data if p is None else p
        out = self.detach().clone()
        return out.bernoulli_(self._make(np.asarray(probs), None, 0) if p is None else p,
                              generator=generator)

    def cauchy_(self, median=0.0, sigma=1.0, *, generator=None):
        return self._fill_random(lambda rng, shape: median + sigma * rng.standard_cauchy(shape),
                                 generator)

    def exponential_(self, lambd=1.0, *, generator=None):
        return self._fill_random(lambda rng, shape: rng.exponential(1 / lambd, shape), generator)

    def geometric_(self, p, *, generator=None):
        return self._fill_random(lambda rng, shape: rng.geometric(p, shape), generator)

    def log_normal_(self, mean=1.0, std=2.0, *, generator=None):
        return self._fill_random(lambda rng, shape: rng.lognormal(mean, std, shape), generator)

    def random_(self, from_=0, to=None, *, generator=None):
        if to is None:
            if _dtype.kind(self._data.dtype) == "f":
                to = 2 ** np.finfo(self._data.dtype).nmant + 1
            elif self._data.dtype.kind == "b":
                to = 2
            else:
                to = int(np.iinfo(self._data.dtype).max) + 1
            if from_ != 0:
                from_, to = 0, from_
        if from_ >= to:
            raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got "
                               f"from={from_} >= to={to}")
        return self._fill_random(lambda rng, shape: rng.integers(from_, to, shape), generator)

    def conj_physical_(self):
        return self.copy_(self.conj()) if self._data.dtype.kind == "c" else self

    def hardshrink(self, lambd=0.5):
        return self.where(self.abs() > lambd, self.new_zeros(()))

    def prelu(self, weight):
        """max(0, x) + weight * min(0, x), ``weight`` one value or one per channel (dim 1)."""
        w = weight
        if weight.numel() != 1:
            if self.ndim < 2 or self.shape[1] != weight.numel():
                raise RuntimeError(f"Mismatch of parameter numbers and input channel size. "
                                   f"Found parameter numbers = {weight.numel()} and channel "
                                   f"size = {self.shape[1] if self.ndim >= 2 else 1}.")
            w = weight.reshape((1, -1) + (1,) * (self.ndim - 2))
        return self.where(self >= 0, w * self)

    def renorm(self, p, dim, maxnorm):
        d = self._dim(dim)
        others = tuple(k for k in range(self.ndim) if k != d)
        norms = self.norm(p, others, keepdim=True) if others else self.abs()
        scale = (maxnorm / (norms + 1e-7)).where(norms > maxnorm, norms.new_ones(()))
        return self * scale


class _Call:
    """What ``Tensor._inplace`` applies for an in-place method made from its out-of-place
    form: the method on the tensor's old value, checked to fit the tensor."""

    def __init__(self, name: str, method, args: tuple, kwargs: dict):
        self.name, self.method, self.args, self.kwargs = name, method, args, kwargs

    def apply(self, t, *tensors):
        out = self.method(t, *self.args, **self.kwargs)
        if out._grad_fn is None and grad_mode._state.enabled \
                and (t._requires_grad or builtins.any(x._requires_grad for x in tensors)):
            out = self._recorded(t, tensors, out)
        elif isinstance(out._grad_fn, E.NoDerivative):
            out._grad_fn.in_place = True  # its error names the in-place op, as torch's
        if out._data.shape != t._data.shape:
            raise RuntimeError(f"output with shape {list(t.shape)} doesn't match the broadcast "
                               f"shape {list(out.shape)}")
        src, dst = out._data.dtype, t._data.dtype
        if not _dtype.can_cast(src, dst):
            from disthook.tensor import _kind_title

            raise RuntimeError(f"result type {_kind_title(src)} can't be cast to the desired "
                               f"output type {_kind_title(dst)}")
        return out

    def _recorded(self, t, tensors: tuple, out):
        """The node torch records for an in-place op whose out-of-place form records none
        (a comparison's bool result): the comparisons' zero gradients; any other such op is
        refused, since its in-place result would take part in the graph without a node."""
        op = E.compared_in_place(self.name, builtins.bool(tensors))
        if op is None:
            raise RuntimeError(
                f"{self.name}_(): disthook records no gradient for this in-place op on a "
                "tensor that requires grad (torch records one); call it under "
                f"torch.no_grad(), or take {self.name}() out of place into a new tensor")
        return op.apply(t, *tensors, value=out._data)


def inplace_of(name: str):
    """The in-place method ``<name>_``: the out-of-place method's result written into self,
    whose history becomes that result's (as for every in-place op)."""

    def method(self, *args, **kwargs):
        fn = getattr(type(self), name)
        tensors = [a for a in (*args, *kwargs.values()) if _is_tensor(a)]
        return self._inplace(_Call(name, fn, args, kwargs), *tensors)

    method.__name__ = method.__qualname__ = name + "_"
    method.__doc__ = f"In-place form of ``{name}``."
    return method


# every in-place form torch has whose out-of-place method disthook has and that Tensor does not
# define itself (those, like add_, take a faster path)
INPLACE_NAMES = (
    "absolute", "acos", "acosh", "arccos", "arccosh", "arcsin", "arcsinh", "arctan", "arctan2",
    "arctanh", "asin", "asinh", "atan", "atan2", "atanh", "bitwise_and", "bitwise_left_shift",
    "bitwise_not", "bitwise_or", "bitwise_right_shift", "bitwise_xor", "ceil", "clamp_max",
    "clamp_min", "copysign", "cos", "cosh", "deg2rad", "digamma", "divide", "eq", "erf", "erfc",
    "erfinv", "exp2", "expm1", "fix", "float_power", "floor", "floor_divide", "fmod", "frac",
    "gcd", "ge", "greater", "greater_equal", "gt", "heaviside", "hypot", "i0", "igamma",
    "igammac", "lcm", "ldexp",
    "le", "lerp", "less", "less_equal", "lgamma", "log", "log10", "log1p", "log2",
    "logical_and", "logical_not", "logical_or", "logical_xor", "logit", "lt", "multiply",
    "mvlgamma", "nan_to_num", "ne", "negative", "nextafter", "not_equal", "polygamma",
    "rad2deg", "reciprocal", "remainder", "round", "rsqrt", "sgn", "sign", "sin", "sinc",
    "addbmm", "addmm", "addmv", "addr", "baddbmm", "index_add", "index_copy", "index_fill",
    "index_reduce", "masked_scatter", "put", "scatter_reduce", "renorm",
    "sinh", "square", "subtract", "tan", "true_divide", "trunc", "xlogy",
)
