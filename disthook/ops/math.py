"""More elementwise math: inverse trig and hyperbolic functions, exp2/expm1/log1p, the gamma
family (lgamma, digamma, polygamma), erfc/erfinv, i0, sinc, frac, logit, and the binary ops
atan2, hypot, copysign, fmod, remainder, xlogy, logaddexp(2).

Numpy only: the special functions are computed here (series, recurrences and asymptotic
expansions) rather than taken from scipy. Each op's forward and backward sit side by side;
the backward is written in Tensor ops, so it is itself differentiable.
"""
from __future__ import annotations

import math

import numpy as np

from disthook import _dtype
from disthook.ops.base import OUTPUT, Op
from disthook.ops.elementwise import (
    NoDerivative,
    floored_remainder,
    refuse_bool_kernel,
    sign_array,
    times_conj,
)


def _needs(ctx, i: int) -> bool:
    return ctx.needs_input_grad[i]


def _same(x: np.ndarray, out) -> np.ndarray:
    """``out`` in ``x``'s (floating) dtype: numpy computes some of these in float64."""
    return np.asarray(out).astype(x.dtype, copy=False)


# ---- special functions on numpy arrays ----------------------------------------------------

# (inf at 0 and the negative integers; -inf gives inf and nan nan, as torch's, not an error)
_vec_lgamma = np.vectorize(lambda v: math.inf if v <= 0 and float(v).is_integer()
                           else math.lgamma(v), otypes=[np.float64])
_vec_erfc = np.vectorize(math.erfc, otypes=[np.float64])
_vec_erf = np.vectorize(math.erf, otypes=[np.float64])

# Bernoulli numbers B_2k for the asymptotic and Euler-Maclaurin tails
_B2K = (1 / 6, -1 / 30, 1 / 42, -1 / 30, 5 / 66, -691 / 2730, 7 / 6, -3617 / 510)
_SHIFT_TO = 12.0  # recurrences move the argument up to here, where the tails converge fast


def lgamma_np(x: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):  # (a nan in: nan out, without numpy's warning)
        return _same(x, _vec_lgamma(np.asarray(x, np.float64)))


def digamma_np(x: np.ndarray) -> np.ndarray:
    """psi(x): psi(x) = psi(x + 1) - 1/x up to 12, then the asymptotic series; -inf at 0 and
    nan at the negative integers, as torch."""
    v = np.asarray(x, np.float64).copy()
    acc = np.zeros_like(v)
    pole = (v <= 0) & (v == np.floor(v))
    v[pole] = 1.0
    while True:
        low = v < _SHIFT_TO
        if not low.any():
            break
        acc[low] -= 1.0 / v[low]
        v[low] += 1.0
    inv2 = 1.0 / (v * v)
    tail = np.zeros_like(v)
    for k, b in reversed(list(enumerate(_B2K, 1))):
        tail = (tail + b / (2 * k)) * inv2
    out = np.asarray(acc + np.log(v) - 0.5 / v - tail)  # 0-d stays an array
    at = np.asarray(x, np.float64)[pole]  # -inf at 0 and inf at -0 (torch's sign), else nan
    out[pole] = np.where(at == 0, np.copysign(np.inf, -at), np.nan)
    return _same(x, out)


def polygamma_np(n: int, x: np.ndarray) -> np.ndarray:
    """The n-th derivative of digamma, n >= 1: (-1)^(n+1) n! zeta(n + 1, x), the Hurwitz zeta
    summed directly below 12 and by Euler-Maclaurin above."""
    if n == 0:
        return digamma_np(x)
    s = n + 1
    v = np.asarray(x, np.float64).copy()
    acc = np.zeros_like(v)
    pole = (v <= 0) & (v == np.floor(v))
    v[pole] = 1.0
    while True:
        low = v < _SHIFT_TO
        if not low.any():
            break
        acc[low] += v[low] ** -s
        v[low] += 1.0
    tail = v ** (1 - s) / (s - 1) + 0.5 * v ** -s
    rising = float(s)  # s (s+1) ... (s+2k-2)
    power = v ** (-s - 1)
    for k, b in enumerate(_B2K, 1):
        tail += b / math.factorial(2 * k) * rising * power
        rising *= (s + 2 * k - 1) * (s + 2 * k)
        power = power / (v * v)
    out = np.asarray((-1) ** (n + 1) * math.factorial(n) * (acc + tail))  # 0-d: an array
    out[pole] = np.inf if n % 2 else np.nan
    if n == 1 and pole.any():
        # trigamma at a pole (and -inf): torch's reflection, pi^2 / sin(pi x)^2 - trigamma(1 - x)
        # with sin(pi x) as rounded (~6.6e32 at -1, nan at -inf) where the exact value is inf
        # (in float32 for float32, as torch's: its rounding of pi x is what sets the value)
        ft = np.float32 if np.asarray(x).dtype == np.float32 else np.float64
        at, pi = np.asarray(x)[pole].astype(ft), ft(np.pi)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            out[pole] = pi * pi / np.sin(pi * at) ** 2 - polygamma_np(1, 1 - at)
    return _same(x, out)


def zeta_np(s: np.ndarray, q: np.ndarray) -> np.ndarray:
    """The Hurwitz zeta function sum over k >= 0 of (q + k)^-s, for s > 1: direct terms
    until q reaches 12, then Euler-Maclaurin; inf at s = 1, nan below, as torch."""
    sv, qv = np.broadcast_arrays(np.asarray(s, np.float64), np.asarray(q, np.float64))
    sv, qv = sv.copy(), qv.copy()
    pole = (qv <= 0) & (qv == np.floor(qv))
    bad = (sv < 1) | np.isnan(sv) | np.isnan(qv)
    one = sv == 1
    safe = bad | one | pole
    sv[safe], qv[safe] = 2.0, 1.0
    acc = np.zeros_like(sv)
    while True:
        low = qv < _SHIFT_TO
        if not low.any():
            break
        acc[low] += qv[low] ** -sv[low]
        qv[low] += 1.0
    tail = qv ** (1 - sv) / (sv - 1) + 0.5 * qv ** -sv
    rising = sv.copy()
    power = qv ** (-sv - 1)
    for k, b in enumerate(_B2K, 1):
        tail += b / math.factorial(2 * k) * rising * power
        rising = rising * (sv + 2 * k - 1) * (sv + 2 * k)
        power = power / (qv * qv)
    out = acc + tail
    out[one | pole] = np.inf
    out[bad] = np.nan
    return out


def erfinv_np(y: np.ndarray) -> np.ndarray:
    """The inverse of erf on (-1, 1): Giles' approximation, refined by two Newton steps
    against math.erf (so the result is good to float64 rounding)."""
    v = np.asarray(y, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        w = -np.log((1.0 - v) * (1.0 + v))
        central = w < 5.0
        wc = w - 2.5
        pc = np.polyval([2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06,
                         0.00021858087, -0.00125372503, -0.00417768164, 0.246640727,
                         1.50140941], wc)
        wt = np.sqrt(np.where(central, 5.0, w)) - 3.0
        pt = np.polyval([-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844,
                         0.00573950773, -0.0076224613, 0.00943887047, 1.00167406,
                         2.83297682], wt)
        x = np.where(central, pc, pt) * v
        for _ in range(2):
            fine = np.isfinite(x)
            err = _vec_erf(np.where(fine, x, 0.0)) - v
            x = np.where(fine, x - err / (2 / math.sqrt(math.pi) * np.exp(-x * x)), x)
    x = np.where(v == 1, np.inf, np.where(v == -1, -np.inf, x))
    return _same(y, np.where(np.abs(v) > 1, np.nan, x))


def gammainc_np(a: np.ndarray, x: np.ndarray, upper: bool = False) -> np.ndarray:
    """The regularized incomplete gamma P(a, x) (Q = 1 - P with ``upper``): its power series
    where x < a + 1, the continued fraction for Q (modified Lentz) elsewhere."""
    av, xv = np.broadcast_arrays(np.asarray(a, np.float64), np.asarray(x, np.float64))
    av, xv = av.copy(), xv.copy()
    bad = (av <= 0) | (xv < 0) | np.isnan(av) | np.isnan(xv)  # a = 0 is set below
    av[bad], xv[bad] = 1.0, 1.0
    with np.errstate(divide="ignore", over="ignore", invalid="ignore", under="ignore"):
        log_front = av * np.log(np.where(xv > 0, xv, 1.0)) - xv - _vec_lgamma(av)
        front = np.where(xv > 0, np.exp(log_front), 0.0)
        term = 1.0 / av
        total = term.copy()
        for n in range(1, 500):
            term = term * xv / (av + n)
            total += term
        p_series = front * total
        tiny = 1e-300
        b = xv + 1.0 - av
        c = np.full_like(b, 1.0 / tiny)
        d = 1.0 / np.where(np.abs(b) < tiny, tiny, b)
        h = d.copy()
        for i in range(1, 500):
            an = -i * (i - av)
            b = b + 2.0
            d = an * d + b
            d = 1.0 / np.where(np.abs(d) < tiny, tiny, d)
            c = b + an / c
            c = np.where(np.abs(c) < tiny, tiny, c)
            h = h * d * c
        q_fraction = front * h
    use_series = xv < av + 1
    p = np.where(use_series, p_series, 1.0 - q_fraction)
    q = np.where(use_series, 1.0 - p_series, q_fraction)
    out = q if upper else p
    out = np.where(xv == 0, 1.0 if upper else 0.0, out)
    out[bad] = np.nan
    # a = 0: all the mass at 0, so P(0, x) = 1 for x > 0 (and 0 at x = 0, as above)
    zero_a = (np.broadcast_to(np.asarray(a, np.float64), out.shape) == 0) & (
        np.broadcast_to(np.asarray(x, np.float64), out.shape) > 0)
    out[zero_a] = 0.0 if upper else 1.0
    return _same(np.asarray(x) if _dtype.kind(np.asarray(x).dtype) == "f" else np.asarray(a), out)


def _bessel_i(order: int, x: np.ndarray, scaled: bool = False) -> np.ndarray:
    """Modified Bessel function of the first kind, order 0 or 1: the power series below 30
    and the asymptotic expansion above; ``scaled``, times exp(-|x|) (i0e, i1e), which the
    expansion gives without the exponential, finite where i0 overflows."""
    v = np.asarray(x, np.float64)
    a = np.abs(v)
    small = a <= 30
    q = (np.where(small, a, 0.0) / 2) ** 2
    term = np.ones_like(a) if order == 0 else np.where(small, a, 0.0) / 2
    series = term.copy()
    for k in range(1, 120):
        term = term * q / (k * (k + order))
        series += term
    big = np.where(small, 31.0, a)
    mu = 4.0 * order * order
    asym = np.ones_like(a)
    coeff = np.ones_like(a)
    for k in range(1, 12):
        coeff = -coeff * (mu - (2 * k - 1) ** 2) / (k * 8 * big)
        asym += coeff
    with np.errstate(over="ignore"):
        asym = asym * (1.0 if scaled else np.exp(big)) / np.sqrt(2 * math.pi * big)
    if scaled:
        series = series * np.exp(-np.where(small, a, 0.0))
    out = np.where(small, series, asym)
    if order == 1:
        out = np.sign(v) * out
    return _same(x, out)


def i0_np(x):
    return _bessel_i(0, x)


def i1_np(x):
    return _bessel_i(1, x)


# ---- unary ops: one class each --------------------------------------------------------------

class _Unary(Op):
    """f(x) for an elementwise f whose derivative ``deriv(x)`` is written in Tensor ops."""

    saved_names = ("self",)
    fn = None

    @classmethod
    def forward(cls, ctx, a):
        ctx.save_for_backward(a)
        return _same(a._data, cls.fn(a._data))

    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved_tensors
        return times_conj(g, ctx.deriv(a))


class Asin(_Unary):
    node_name = "AsinBackward0"
    fn = staticmethod(np.arcsin)
    deriv = staticmethod(lambda a: (1 - a * a).rsqrt())


class Acos(_Unary):
    node_name = "AcosBackward0"
    fn = staticmethod(np.arccos)
    deriv = staticmethod(lambda a: -(1 - a * a).rsqrt())


class Atan(_Unary):
    node_name = "AtanBackward0"
    fn = staticmethod(np.arctan)
    deriv = staticmethod(lambda a: (1 + a * a).reciprocal())


class Sinh(_Unary):
    node_name = "SinhBackward0"
    complex_ok = True  # holomorphic: fn and deriv hold for complex
    fn = staticmethod(np.sinh)
    deriv = staticmethod(lambda a: a.cosh())


class Cosh(_Unary):
    node_name = "CoshBackward0"
    complex_ok = True  # holomorphic: fn and deriv hold for complex
    fn = staticmethod(np.cosh)
    deriv = staticmethod(lambda a: a.sinh())


class Asinh(_Unary):
    node_name = "AsinhBackward0"
    fn = staticmethod(np.arcsinh)
    deriv = staticmethod(lambda a: (a * a + 1).rsqrt())


class Acosh(_Unary):
    node_name = "AcoshBackward0"
    fn = staticmethod(np.arccosh)
    deriv = staticmethod(lambda a: (a * a - 1).rsqrt())


class Atanh(_Unary):
    node_name = "AtanhBackward0"
    fn = staticmethod(np.arctanh)
    deriv = staticmethod(lambda a: (1 - a * a).reciprocal())


class Tan(_Unary):
    node_name = "TanBackward0"
    complex_ok = True  # holomorphic: fn and deriv hold for complex
    fn = staticmethod(np.tan)
    deriv = staticmethod(lambda a: 1 + a.tan() ** 2)


class Log1P(_Unary):
    node_name = "Log1PBackward0"
    complex_ok = True  # holomorphic: fn and deriv hold for complex
    fn = staticmethod(np.log1p)
    deriv = staticmethod(lambda a: (a + 1).reciprocal())


class Log2(_Unary):
    node_name = "Log2Backward0"
    complex_ok = True  # holomorphic: fn and deriv hold for complex
    fn = staticmethod(np.log2)
    deriv = staticmethod(lambda a: (a * math.log(2)).reciprocal())


class Log10(_Unary):
    node_name = "Log10Backward0"
    complex_ok = True  # holomorphic: fn and deriv hold for complex
    fn = staticmethod(np.log10)
    deriv = staticmethod(lambda a: (a * math.log(10)).reciprocal())


class Expm1(_Unary):
    node_name = "Expm1Backward0"
    complex_ok = True  # holomorphic: fn and deriv hold for complex
    fn = staticmethod(np.expm1)
    deriv = staticmethod(lambda a: a.exp())


class Exp2(_Unary):
    node_name = "Exp2Backward0"
    complex_ok = True  # holomorphic: fn and deriv hold for complex
    fn = staticmethod(np.exp2)
    deriv = staticmethod(lambda a: a.exp2() * math.log(2))


class Erfc(_Unary):
    node_name = "ErfcBackward0"
    fn = staticmethod(lambda x: _vec_erfc(x.astype(np.float64)))
    deriv = staticmethod(lambda a: (-(a * a)).exp() * (-2 / math.sqrt(math.pi)))


class Erfinv(_Unary):
    node_name = "ErfinvBackward0"
    fn = staticmethod(erfinv_np)
    deriv = staticmethod(lambda a: (a.erfinv() ** 2).exp() * (math.sqrt(math.pi) / 2))


class Lgamma(_Unary):
    node_name = "LgammaBackward0"
    fn = staticmethod(lgamma_np)
    deriv = staticmethod(lambda a: a.digamma())


class Digamma(_Unary):
    node_name = "DigammaBackward0"
    fn = staticmethod(digamma_np)
    deriv = staticmethod(lambda a: a.polygamma(1))


class I0(_Unary):
    node_name = "I0Backward0"
    fn = staticmethod(i0_np)
    deriv = staticmethod(lambda a: I1.apply(a))


class I1(_Unary):
    """The derivative of i0; its own derivative is i0(x) - i1(x) / x (1/2 at 0 and nan)."""

    node_name = "SpecialI1Backward0"
    fn = staticmethod(i1_np)

    @staticmethod
    def deriv(a):
        away = a.abs() > 0  # (false at 0 and at nan: 1/2 there, as torch's)
        safe = a.where(away, a.new_ones(()))
        return (I0.apply(a) - I1.apply(a) / safe).where(away, a.new_full((), 0.5))


class I0e(_Unary):
    """i0(x) exp(-|x|), finite for every finite x; derivative i1e(x) - sign(x) i0e(x)."""

    node_name = "SpecialI0EBackward0"
    fn = staticmethod(lambda x: _bessel_i(0, x, scaled=True))
    deriv = staticmethod(lambda a: I1e.apply(a) - a.sign() * I0e.apply(a))


class I1e(_Unary):
    """i1(x) exp(-|x|); derivative i0e(x) - i1e(x) (sign(x) + 1 / x), 1/2 at 0 and nan."""

    node_name = "SpecialI1EBackward0"
    fn = staticmethod(lambda x: _bessel_i(1, x, scaled=True))

    @staticmethod
    def deriv(a):
        away = a.abs() > 0  # (false at 0 and at nan: 1/2 there, as torch's)
        safe = a.where(away, a.new_ones(()))
        return (I0e.apply(a) - I1e.apply(a) * (a.sign() + 1 / safe)).where(
            away, a.new_full((), 0.5))


def erfcx_np(x: np.ndarray) -> np.ndarray:
    """exp(x^2) erfc(x): the product up to 25, where exp(x^2) is finite, and the asymptotic
    series 1 / (x sqrt(pi)) (1 - 1/(2x^2) + 3/(4x^4) ...) above, where torch's stays finite
    (~0.564 / x) and the product is inf * 0; inf below -26.6, as torch's."""
    v = np.asarray(x, np.float64)
    near = np.where(v < 25, v, 0.0)
    with np.errstate(over="ignore", invalid="ignore"):
        product = np.exp(near * near) * _vec_erfc(near)
    far = np.where(v < 25, 25.0, v)
    inv2 = 1.0 / (2 * far * far)
    series, term = np.ones_like(far), np.ones_like(far)
    for k in range(1, 8):
        term = -term * (2 * k - 1) * inv2
        series += term
    out = np.where(v < 25, product, series / (far * math.sqrt(math.pi)))
    return _same(x, np.where(np.isnan(v), v, out))


class Erfcx(_Unary):
    """erfcx; derivative 2x erfcx(x) - 2/sqrt(pi)."""

    node_name = "SpecialErfcxBackward0"
    fn = staticmethod(erfcx_np)
    deriv = staticmethod(lambda a: 2 * a * Erfcx.apply(a) - 2 / math.sqrt(math.pi))


def log_ndtr_np(x: np.ndarray) -> np.ndarray:
    """log of the normal's cdf: log1p(-erfc(x/sqrt2)/2) from -1 up, and below, where the cdf
    underflows (x < -38) and log(cdf) loses its digits, log(erfcx(-x/sqrt2)/2) - x^2/2."""
    v = np.asarray(x, np.float64)
    low = np.where(v < -1, v, -2.0)
    with np.errstate(divide="ignore"):
        out = np.where(v < -1, np.log(erfcx_np(-low / math.sqrt(2)) / 2) - low * low / 2,
                       np.log1p(-_vec_erfc(np.where(v < -1, 0.0, v) / math.sqrt(2)) / 2))
    return _same(x, np.where(np.isnan(v), v, out))


class LogNdtr(_Unary):
    """log_ndtr; derivative pdf / cdf = sqrt(2/pi) / erfcx(-x/sqrt2): 0 far right, -x far
    left, finite where the quotient of the two is 0 / 0 (nan at -inf, as torch's)."""

    node_name = "SpecialLogNdtrBackward0"
    fn = staticmethod(log_ndtr_np)
    @staticmethod
    def deriv(a):
        quotient = math.sqrt(2 / math.pi) / Erfcx.apply(-a / math.sqrt(2))
        return quotient.where(a != -math.inf, a.new_full((), math.nan))  # torch's nan at -inf


def ndtri_np(p: np.ndarray) -> np.ndarray:
    """The normal's quantile: from the smaller tail q = min(p, 1 - p), a rational start
    (Abramowitz and Stegun 26.2.23) refined by Newton steps on log Q(x) = log q, with Q's
    log and Q / pdf from erfcx, so the far tails stay exact (p = 1e-300 is -37.05, not the
    -inf that erfinv(2p - 1) gives once 2p - 1 rounds to -1)."""
    v = np.asarray(p, np.float64)
    q = np.clip(np.where(v < 0.5, v, 1 - v), 1e-320, 0.5)
    t = np.sqrt(-2 * np.log(q))
    x = t - (2.515517 + t * (0.802853 + t * 0.010328)) / (
        1 + t * (1.432788 + t * (0.189269 + t * 0.001308)))
    for _ in range(4):
        ratio = erfcx_np(x / math.sqrt(2)) * math.sqrt(math.pi / 2)  # Q(x) / pdf(x)
        x = x + (np.log(ratio / math.sqrt(2 * math.pi)) - x * x / 2 - np.log(q)) * ratio
    out = np.where(v < 0.5, -x, x)
    out = np.where(v == 0, -np.inf, np.where(v == 1, np.inf, np.where(v == 0.5, 0.0, out)))
    return _same(np.asarray(p), np.where((v < 0) | (v > 1) | np.isnan(v), np.nan, out))


class Ndtri(Op):
    """ndtri; derivative sqrt(2 pi) exp(ndtri(p)^2 / 2), from the output, as torch's."""

    node_name = "SpecialNdtriBackward0"
    saved_names = ("result",)

    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(OUTPUT)
        return ndtri_np(a._data)

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved_tensors
        return g * ((out * out / 2).exp() * math.sqrt(2 * math.pi))


def entr_np(x: np.ndarray) -> np.ndarray:
    """-x log x: 0 at +-0, -inf below 0 (and at inf), nan at nan, as torch."""
    with np.errstate(divide="ignore", invalid="ignore"):
        out = -x * np.log(x)
    out = np.where(x == 0, np.zeros((), x.dtype), out)
    out = np.where(np.isnan(x), x, out)
    return np.where(x < 0, np.full((), -np.inf, x.dtype), out)


class SpecialEntr(_Unary):
    """entr; its derivative -(1 + log x) is inf at 0 and nan below 0, as torch's."""

    node_name = "SpecialEntrBackward0"
    fn = staticmethod(entr_np)
    deriv = staticmethod(lambda a: -(a.log() + 1))


class Sinc(_Unary):
    node_name = "SincBackward0"
    @staticmethod
    def fn(x):
        with np.errstate(invalid="ignore"):  # sin(inf): nan, as torch's, without numpy's warning
            return np.sinc(x)

    @staticmethod
    def deriv(a):
        px = a * math.pi
        safe = px.where(a != 0, a.new_ones(()))
        d = (px * px.cos() - px.sin()) / (safe * a.where(a != 0, a.new_ones(())))
        return d.where(a != 0, a.new_zeros(()))


class Frac(Op):
    @staticmethod
    def forward(ctx, a):
        return a._data - np.trunc(a._data)

    @staticmethod
    def backward(ctx, g):
        return g


class Sgn(Op):
    """``sgn``: the sign of a real tensor; z / |z| of a complex one (0 at 0)."""

    complex_ok = True

    @staticmethod
    def forward(ctx, a):
        x = a._data
        if x.dtype.kind != "c":
            return sign_array(x)
        ctx.save_for_backward(a, OUTPUT)
        size = np.abs(x)
        return np.where(size == 0, 0, x / np.where(size == 0, 1, size)).astype(x.dtype)

    @staticmethod
    def backward(ctx, g):
        if not ctx.saved_tensors:
            return g * 0
        # torch's: the part of g along the unit circle's tangent, over |z|; 0 where z = 0
        # (divided by |z| itself there, as torch: a second derivative at z = 0 is nan)
        a, out = ctx.saved_tensors
        size = a.abs()
        return ((g - out * out * g.conj()) / (2 * size)).masked_fill(size == 0, 0)


class _Scale(Op):
    """Multiplication by a constant with a node of its own (deg2rad, rad2deg)."""

    factor = 1.0

    @classmethod
    def forward(cls, ctx, a):
        return _same(a._data, a._data * cls.factor)

    @staticmethod
    def backward(ctx, g):
        return g * ctx.factor


class Deg2Rad(_Scale):
    node_name = "Deg2RadBackward0"
    factor = math.pi / 180


class Rad2Deg(_Scale):
    node_name = "Rad2DegBackward0"
    factor = 180 / math.pi


class Polygamma(Op):
    saved_names = ("self",)

    @staticmethod
    def forward(ctx, a, n):
        ctx.save_for_backward(a)
        ctx.n = n
        return polygamma_np(n, a._data)

    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved_tensors
        return g * a.polygamma(ctx.n + 1)


class Logit(Op):
    saved_names = ("self",)

    @staticmethod
    def forward(ctx, a, eps=None):
        ctx.save_for_backward(a)
        ctx.eps = eps
        x = a._data if eps is None else np.clip(a._data, eps, 1 - eps)
        with np.errstate(divide="ignore", invalid="ignore"):
            return _same(a._data, np.log(x / (1 - x)))

    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved_tensors
        d = g / (a * (1 - a))
        if ctx.eps is None:
            return d.where((a >= 0) & (a <= 1), a.new_full((), math.nan))
        return d.where((a >= ctx.eps) & (a <= 1 - ctx.eps), a.new_zeros(()))


class NanToNum(Op):
    saved_names = ("self",)

    @staticmethod
    def forward(ctx, a, nan=0.0, posinf=None, neginf=None):
        ctx.save_for_backward(a)
        return np.nan_to_num(a._data, nan=nan, posinf=posinf, neginf=neginf)

    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved_tensors
        return g * a.isfinite()


# ---- binary ops ------------------------------------------------------------------------------

class Atan2(Op):
    saved_names = ("self", "other")

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return np.arctan2(a._data, b._data)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        squares = a * a + b * b
        scale = (g / squares).where(squares != 0, 0.0)  # 0 at (0, 0), as torch's (not nan)
        return (scale * b if _needs(ctx, 0) else None), (-scale * a if _needs(ctx, 1) else None)


class Hypot(Op):
    saved_names = ("self", "other", "result")

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b, OUTPUT)
        return np.hypot(a._data, b._data)

    @staticmethod
    def backward(ctx, g):
        a, b, out = ctx.saved_tensors
        scale = g / out
        return (scale * a if _needs(ctx, 0) else None), (scale * b if _needs(ctx, 1) else None)


class Copysign(Op):
    """|a| with b's sign; the gradient reaches ``a`` only (zero where a is zero)."""

    saved_names = ("self", "result")

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, OUTPUT)
        return np.copysign(a._data, b._data)

    @staticmethod
    def backward(ctx, g):
        a, out = ctx.saved_tensors
        nonzero = a != 0
        ratio = (out / a.where(nonzero, a.new_ones(()))).where(nonzero, a.new_zeros(()))
        return (g * ratio if _needs(ctx, 0) else None), (g * 0 if _needs(ctx, 1) else None)


class _Modulus(Op):
    """a - b * round(a / b) for a rounding ``rounding`` of the quotient; the divisor's
    gradient is -round(a / b)."""

    saved_names = ("self", "other")
    fn = rounding = None
    kernel = ""  # torch's kernel's name, for the error of bool operands

    @classmethod
    def forward(cls, ctx, a, b):
        ctx.save_for_backward(a, b)
        x, y = a._data, b._data
        refuse_bool_kernel(cls.kernel, x, y)
        if x.dtype.kind in "iu" and (y == 0).any():
            raise RuntimeError("ZeroDivisionError")
        return cls.fn(x, y)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        # (a // b is torch's floor division: -5 // inf is -1, where floor(-5 / inf) is -0.0)
        quotient = a // b if ctx.rounding == "floor" else getattr(a / b, ctx.rounding)()
        gb = -g * quotient if _needs(ctx, 1) else None
        return g, gb


def wrapped_divisor(tensor, other):
    """fmod/remainder's Python int divisor for an integer tensor, cast into the tensor's type
    with wraparound as torch casts it (uint8 by -1 divides by 255, by 300 by 44; one that
    wraps to 0 is torch's division by zero); anything else unchanged."""
    dt = tensor._data.dtype
    if type(other) is not int or dt.kind not in "iu" or not -2**63 <= other < 2**64:
        return other
    return np.array(other % 2**64, dtype=np.uint64).astype(dt).item()


class Fmod(_Modulus):
    """C's fmod (the sign of the dividend): the quotient truncated."""

    node_name = "FmodBackward1"
    kernel = "fmod_cpu"
    fn = staticmethod(np.fmod)
    rounding = "trunc"


class Remainder(_Modulus):
    """Python's modulus (the sign of the divisor): the quotient floored."""

    node_name = "RemainderBackward1"
    kernel = "remainder_cpu"
    fn = staticmethod(floored_remainder)
    rounding = "floor"


class Xlogy(Op):
    """a * log(b), taken as 0 where a is 0 (unless b is nan)."""

    saved_names = ("self", "other")

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        x, y = a._data, b._data
        with np.errstate(divide="ignore", invalid="ignore"):
            out = x * np.log(y)
        return np.where((x == 0) & ~np.isnan(y), np.zeros((), x.dtype), out)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        ga = g * (a != 0).to(a.dtype).xlogy(b) if _needs(ctx, 0) else None
        gb = g * a / b if _needs(ctx, 1) else None
        return ga, gb


class Logaddexp(Op):
    """log(e^a + e^b) (log2(2^a + 2^b) for Logaddexp2): each input's share of the sum,
    sigmoid((a - b) log base), is its gradient."""

    saved_names = ("self", "other")
    fn = staticmethod(np.logaddexp)
    log_base = 1.0

    @classmethod
    def forward(cls, ctx, a, b):
        ctx.save_for_backward(a, b)
        return cls.fn(a._data, b._data)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        k = ctx.log_base
        ga = g * ((a - b) * k).sigmoid() if _needs(ctx, 0) else None
        gb = g * ((b - a) * k).sigmoid() if _needs(ctx, 1) else None
        return ga, gb


class Logaddexp2(Logaddexp):
    node_name = "Logaddexp2Backward0"
    fn = staticmethod(np.logaddexp2)
    log_base = math.log(2)


class Igamma(Op):
    """P(a, x); its derivative in x is x^(a-1) e^(-x) / Gamma(a), and torch has none in a."""

    saved_names = ("self", "other")
    upper = False

    @classmethod
    def forward(cls, ctx, a, x):
        ctx.save_for_backward(a, x)
        return gammainc_np(a._data, x._data, upper=cls.upper).astype(x._data.dtype)

    @staticmethod
    def backward(ctx, g):
        a, x = ctx.saved_tensors
        if ctx.needs_input_grad[0]:
            raise NotImplementedError(f"the derivative for '{ctx.torch_name}: input' is not "
                                      "implemented.")
        d = (a - 1) * x.log() - x - a.lgamma()
        return None, g * d.exp() * (-1 if ctx.upper else 1)


class Igammac(Igamma):
    node_name = "IgammacBackward0"
    upper = True
    torch_name = "igammac"


Igamma.torch_name = "igamma"


class Zeta(Op):
    """The Hurwitz zeta function zeta(x, q): torch differentiates it in ``q`` only,
    -x zeta(x + 1, q); backward to ``x`` is torch's error."""

    node_name = "SpecialZetaBackward0"

    @staticmethod
    def forward(ctx, x, q):
        ctx.save_for_backward(x, q)
        with np.errstate(over="ignore", invalid="ignore"):  # (inf and nan silently, as torch)
            return zeta_np(x._data, q._data).astype(x._data.dtype, copy=False)

    @staticmethod
    def backward(ctx, g):
        if ctx.needs_input_grad[0]:
            raise NotImplementedError("the derivative for 'zeta' is not implemented.")
        x, q = ctx.saved_tensors
        return None, g * -x * Zeta.apply(x + 1, q)


# torch's nodes when x (1) or q (2) is a number
ZetaOfNumber = type("ZetaOfNumber", (Zeta,), {"node_name": "SpecialZetaBackward1"})
ZetaAtNumber = type("ZetaAtNumber", (Zeta,), {"node_name": "SpecialZetaBackward2"})


class Heaviside(NoDerivative):
    node_name = "NotImplemented"
    torch_name = "heaviside"
    fn = staticmethod(lambda x, v: np.heaviside(x, v).astype(x.dtype, copy=False))


class Nextafter(Op):
    """The next float after ``a`` toward ``b``: torch passes the gradient to ``a`` unchanged
    and gives ``b`` zeros."""

    @staticmethod
    def forward(ctx, a, b):
        return np.nextafter(a._data, b._data)

    @staticmethod
    def backward(ctx, g):
        return g, g.new_zeros(g.shape) if ctx.needs_input_grad[1] else None


class RandomFill(Op):
    """Fresh random values in the tensor's shape, independent of its old ones: gradient zero.
    ``draw(rng, shape)`` gives them."""

    node_name = "RandomBackward0"

    @staticmethod
    def forward(ctx, a, draw, generator):
        from disthook import random

        return draw(random.gen(generator), a._data.shape).astype(a._data.dtype)

    @staticmethod
    def backward(ctx, g):
        return g * 0
