"""``torch.special``: the special functions, numpy only (see ``disthook.ops.math``), each
differentiable where torch's is."""
from __future__ import annotations

import math

import numpy as np

from disthook import _dtype
from disthook.ops import math as M
from disthook.tensor import Tensor


def expit(input: Tensor) -> Tensor:
    return input.sigmoid()


def logit(input: Tensor, eps=None) -> Tensor:
    return input.logit(eps)


def erf(input: Tensor) -> Tensor:
    return input.erf()


def erfc(input: Tensor) -> Tensor:
    return input.erfc()


def erfcx(input: Tensor) -> Tensor:
    """exp(x^2) * erfc(x), one op: finite where exp(x^2) overflows, as torch's."""
    return M.Erfcx.apply(input._floating())


def erfinv(input: Tensor) -> Tensor:
    return input.erfinv()


def xlogy(input, other) -> Tensor:
    return input.xlogy(other) if isinstance(input, Tensor) else other.new_tensor(input).xlogy(
        other)


def xlog1py(input, other) -> Tensor:
    """x * log1p(y), 0 where x is 0 (unless y is nan)."""
    x = input if isinstance(input, Tensor) else other.new_tensor(input)
    y = other if isinstance(other, Tensor) else x.new_tensor(other)
    return x.xlogy(y + 1)


def i0(input: Tensor) -> Tensor:
    return input.i0()


def i0e(input: Tensor) -> Tensor:
    """i0(x) exp(-|x|), one op: finite where i0 overflows, as torch's."""
    return M.I0e.apply(input._floating())


def i1(input: Tensor) -> Tensor:
    return M.I1.apply(input._floating())


def i1e(input: Tensor) -> Tensor:
    """i1(x) exp(-|x|), one op: finite where i1 overflows, as torch's."""
    return M.I1e.apply(input._floating())


def gammaln(input: Tensor) -> Tensor:
    return input.lgamma()


def digamma(input: Tensor) -> Tensor:
    return input.digamma()


psi = digamma


def polygamma(n: int, input: Tensor) -> Tensor:
    return input.polygamma(n)


def multigammaln(input: Tensor, p: int) -> Tensor:
    return input.mvlgamma(p)


def sinc(input: Tensor) -> Tensor:
    return input.sinc()


def round(input: Tensor, decimals: int = 0) -> Tensor:
    return input.round(decimals=decimals)


def log1p(input: Tensor) -> Tensor:
    return input.log1p()


def expm1(input: Tensor) -> Tensor:
    return input.expm1()


def exp2(input: Tensor) -> Tensor:
    return input.exp2()


def logsumexp(input: Tensor, dim, keepdim: bool = False) -> Tensor:
    return input.logsumexp(dim, keepdim)


def softmax(input: Tensor, dim: int, *, dtype=None) -> Tensor:
    return input.softmax(dim, dtype)


def log_softmax(input: Tensor, dim: int, *, dtype=None) -> Tensor:
    return input.log_softmax(dim, dtype)


def entr(input: Tensor) -> Tensor:
    """-x log x; 0 at 0 and -inf below."""
    return M.SpecialEntr.apply(input._floating())


def ndtr(input: Tensor) -> Tensor:
    """The standard normal's cumulative distribution."""
    return (-input._floating() / math.sqrt(2)).erfc() * 0.5


def ndtri(input: Tensor) -> Tensor:
    """The inverse of ndtr, one op: exact in both tails, as torch's."""
    return M.Ndtri.apply(input._floating())


def log_ndtr(input: Tensor) -> Tensor:
    """log(ndtr(x)), one op: finite far left, where ndtr underflows, as torch's."""
    return M.LogNdtr.apply(input._floating())


def gammainc(input: Tensor, other: Tensor) -> Tensor:
    """The regularized lower incomplete gamma function P(a, x)."""
    return input.igamma(other)


def gammaincc(input: Tensor, other: Tensor) -> Tensor:
    """The regularized upper incomplete gamma function Q(a, x)."""
    return input.igammac(other)


def modified_bessel_i0(input: Tensor) -> Tensor:
    return input.i0()


def modified_bessel_i1(input: Tensor) -> Tensor:
    return i1(input)


def spherical_bessel_j0(input: Tensor) -> Tensor:
    """sin(x) / x (1 at 0)."""
    return (input._floating() / math.pi).sinc()


def zeta(input, other) -> Tensor:
    """The Hurwitz zeta function zeta(x, q), with torch's gradient in ``q``."""
    op = M.Zeta if isinstance(input, Tensor) and isinstance(other, Tensor) else \
        M.ZetaAtNumber if isinstance(input, Tensor) else M.ZetaOfNumber
    x = input if isinstance(input, Tensor) else other.new_tensor(input)
    q = other if isinstance(other, Tensor) else x.new_tensor(other)
    x, q = x._floating(), q._floating()
    dt = _dtype.from_numpy_dtype(np.result_type(x._data.dtype, q._data.dtype))
    return op.apply(x.to(dt), q.to(dt))


def _polynomial(name: str, first, step):
    """A family of orthogonal polynomials by its three-term recurrence: p_0 = 1, p_1 =
    ``first(x)``, p_(k+1) = ``step(k, x, p_k, p_(k-1))``; ``n`` an int or a tensor of
    degrees (elementwise), as torch. No gradient, as in torch."""

    def polynomial(input, n) -> Tensor:
        x = input if isinstance(input, Tensor) else n.new_tensor(input)
        xs = x._floating()._data
        degrees = n._data if isinstance(n, Tensor) else np.asarray(n)
        xs, degrees = np.broadcast_arrays(xs, degrees)
        top = int(degrees.max()) if degrees.size else 0
        prev, cur = np.ones_like(xs), first(xs)
        out = np.where(degrees == 0, prev, np.where(degrees == 1, cur, 0.0))
        for k in range(1, top):
            prev, cur = cur, step(k, xs, cur, prev)
            out = np.where(degrees == k + 1, cur, out)
        out = np.where(degrees < 0, 0.0, out)
        return Tensor._make(np.asarray(out, dtype=xs.dtype), None, 0)

    polynomial.__name__ = name
    polynomial.__doc__ = f"``torch.special.{name}(input, n)``."
    return polynomial


chebyshev_polynomial_t = _polynomial("chebyshev_polynomial_t", lambda x: x,
                                     lambda k, x, p, q: 2 * x * p - q)
chebyshev_polynomial_u = _polynomial("chebyshev_polynomial_u", lambda x: 2 * x,
                                     lambda k, x, p, q: 2 * x * p - q)
chebyshev_polynomial_v = _polynomial("chebyshev_polynomial_v", lambda x: 2 * x - 1,
                                     lambda k, x, p, q: 2 * x * p - q)
chebyshev_polynomial_w = _polynomial("chebyshev_polynomial_w", lambda x: 2 * x + 1,
                                     lambda k, x, p, q: 2 * x * p - q)
shifted_chebyshev_polynomial_t = _polynomial("shifted_chebyshev_polynomial_t",
                                             lambda x: 2 * x - 1,
                                             lambda k, x, p, q: 2 * (2 * x - 1) * p - q)
shifted_chebyshev_polynomial_u = _polynomial("shifted_chebyshev_polynomial_u",
                                             lambda x: 2 * (2 * x - 1),
                                             lambda k, x, p, q: 2 * (2 * x - 1) * p - q)
shifted_chebyshev_polynomial_v = _polynomial("shifted_chebyshev_polynomial_v",
                                             lambda x: 2 * (2 * x - 1) - 1,
                                             lambda k, x, p, q: 2 * (2 * x - 1) * p - q)
shifted_chebyshev_polynomial_w = _polynomial("shifted_chebyshev_polynomial_w",
                                             lambda x: 2 * (2 * x - 1) + 1,
                                             lambda k, x, p, q: 2 * (2 * x - 1) * p - q)
hermite_polynomial_h = _polynomial("hermite_polynomial_h", lambda x: 2 * x,
                                   lambda k, x, p, q: 2 * x * p - 2 * k * q)
hermite_polynomial_he = _polynomial("hermite_polynomial_he", lambda x: x,
                                    lambda k, x, p, q: x * p - k * q)
laguerre_polynomial_l = _polynomial("laguerre_polynomial_l", lambda x: 1 - x,
                                    lambda k, x, p, q: ((2 * k + 1 - x) * p - k * q) / (k + 1))
legendre_polynomial_p = _polynomial("legendre_polynomial_p", lambda x: x,
                                    lambda k, x, p, q: ((2 * k + 1) * x * p - k * q) / (k + 1))
