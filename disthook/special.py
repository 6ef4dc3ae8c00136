"""``torch.special``: the special functions, numpy only (see ``disthook.ops.math``), each
differentiable where torch's is."""
from __future__ import annotations

import math

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
    """exp(x^2) * erfc(x)."""
    return (input * input).exp() * input.erfc()


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
    return input.i0() * (-input.abs()).exp()


def i1(input: Tensor) -> Tensor:
    return M.I1.apply(input._floating())


def i1e(input: Tensor) -> Tensor:
    return i1(input) * (-input.abs()).exp()


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
    x = input._floating()
    out = -x.xlogy(x)
    return out.where(x >= 0, x.new_full((), -math.inf))


def ndtr(input: Tensor) -> Tensor:
    """The standard normal's cumulative distribution."""
    return (-input._floating() / math.sqrt(2)).erfc() * 0.5


def ndtri(input: Tensor) -> Tensor:
    """The inverse of ndtr."""
    return (input._floating() * 2 - 1).erfinv() * math.sqrt(2)


def log_ndtr(input: Tensor) -> Tensor:
    return ndtr(input).log()


def gammainc(input: Tensor, other: Tensor) -> Tensor:
    """The regularized lower incomplete gamma function P(a, x)."""
    return input.igamma(other)


def gammaincc(input: Tensor, other: Tensor) -> Tensor:
    """The regularized upper incomplete gamma function Q(a, x)."""
    return input.igammac(other)
