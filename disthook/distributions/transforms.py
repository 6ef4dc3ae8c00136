"""``torch.distributions.transforms``: invertible maps with a log |det Jacobian|.

A transform maps ``x`` in its ``domain`` to ``y`` in its ``codomain``; ``inv`` is the
inverse transform; ``log_abs_det_jacobian(x, y)`` is what TransformedDistribution subtracts
from the base density. With ``cache_size=1`` the last pair (x, y) is remembered, so that the
inverse of a value just drawn is the exact x it came from.
"""
from __future__ import annotations

import math
import numbers

from disthook.distributions import constraints
from disthook.distributions.distribution import finfo, sum_rightmost

__all__ = [
    "AbsTransform",
    "AffineTransform",
    "CatTransform",
    "ComposeTransform",
    "CumulativeDistributionTransform",
    "ExpTransform",
    "IndependentTransform",
    "LowerCholeskyTransform",
    "PositiveDefiniteTransform",
    "PowerTransform",
    "ReshapeTransform",
    "SigmoidTransform",
    "SoftmaxTransform",
    "SoftplusTransform",
    "StackTransform",
    "StickBreakingTransform",
    "TanhTransform",
    "Transform",
    "identity_transform",
]


def _softplus(x):
    from disthook.nn.functional import softplus

    return softplus(x)


class Transform:
    """The base: ``__call__`` (x to y), ``inv``, ``sign``, shapes and the cache."""

    bijective = False
    domain = constraints.real
    codomain = constraints.real

    def __init__(self, cache_size: int = 0) -> None:
        if cache_size not in (0, 1):
            raise ValueError("cache_size must be 0 or 1")
        self._cache_size = cache_size
        self._cached_x_y = (None, None)
        self._inverse_transform = None

    @property
    def event_dim(self) -> int:
        if self.domain.event_dim == self.codomain.event_dim:
            return self.domain.event_dim
        raise ValueError("Please use either .domain.event_dim or .codomain.event_dim")

    @property
    def inv(self) -> Transform:
        """The inverse transform (one object, kept while this one lives)."""
        inverse = self._inverse_transform
        if inverse is None:
            inverse = _InverseTransform(self)
            self._inverse_transform = inverse
        return inverse

    @property
    def sign(self):
        raise NotImplementedError(f"{type(self).__name__} has no sign: it is not monotone")

    def with_cache(self, cache_size: int = 1):
        if self._cache_size == cache_size:
            return self
        if type(self).__init__ is Transform.__init__:
            return type(self)(cache_size=cache_size)
        raise NotImplementedError(f"{type(self)}.with_cache is not implemented")

    def __eq__(self, other) -> bool:
        return self is other

    def __ne__(self, other) -> bool:
        return not self.__eq__(other)

    __hash__ = object.__hash__

    def __call__(self, x):
        if not self._cache_size:
            return self._call(x)
        x_old, y_old = self._cached_x_y
        if x is x_old:
            return y_old
        y = self._call(x)
        self._cached_x_y = (x, y)
        return y

    def _inv_call(self, y):
        if not self._cache_size:
            return self._inverse(y)
        x_old, y_old = self._cached_x_y
        if y is y_old:
            return x_old
        x = self._inverse(y)
        self._cached_x_y = (x, y)
        return x

    def _call(self, x):
        raise NotImplementedError(f"{type(self).__name__} does not implement its forward map")

    def _inverse(self, y):
        raise NotImplementedError(f"{type(self).__name__} does not implement its inverse")

    def log_abs_det_jacobian(self, x, y):
        raise NotImplementedError(f"{type(self).__name__} does not implement "
                                  "log_abs_det_jacobian")

    def forward_shape(self, shape):
        return shape

    def inverse_shape(self, shape):
        return shape

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class _InverseTransform(Transform):
    """``t.inv``: the same map run backwards, sharing ``t``'s cache."""

    def __init__(self, transform: Transform) -> None:
        super().__init__(cache_size=transform._cache_size)
        self._inv = transform

    @property
    def domain(self):
        return self._inv.codomain

    @property
    def codomain(self):
        return self._inv.domain

    @property
    def bijective(self):
        return self._inv.bijective

    @property
    def sign(self):
        return self._inv.sign

    @property
    def inv(self) -> Transform:
        return self._inv

    def with_cache(self, cache_size: int = 1):
        return self._inv.with_cache(cache_size).inv

    def __eq__(self, other) -> bool:
        return isinstance(other, _InverseTransform) and self._inv == other._inv

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._inv!r})"

    def __call__(self, x):
        return self._inv._inv_call(x)

    def log_abs_det_jacobian(self, x, y):
        return -self._inv.log_abs_det_jacobian(y, x)

    def forward_shape(self, shape):
        return self._inv.inverse_shape(shape)

    def inverse_shape(self, shape):
        return self._inv.forward_shape(shape)


class _Stateless(Transform):
    """A transform without parameters: all its instances are equal."""

    def __eq__(self, other) -> bool:
        return type(other) is type(self)

    __hash__ = object.__hash__


class ComposeTransform(Transform):
    """``parts`` applied in order; the empty composition is the identity."""

    def __init__(self, parts: list, cache_size: int = 0) -> None:
        if cache_size:
            parts = [part.with_cache(cache_size) for part in parts]
        super().__init__(cache_size=cache_size)
        self.parts = list(parts)

    def __eq__(self, other) -> bool:
        return isinstance(other, ComposeTransform) and self.parts == other.parts

    __hash__ = object.__hash__

    @constraints.dependent_property(is_discrete=False)
    def domain(self):
        if not self.parts:
            return constraints.real
        # the event dim the first part must read so that every later part sees its own
        event_dim = self.parts[-1].codomain.event_dim
        for part in reversed(self.parts):
            event_dim = max(event_dim - part.codomain.event_dim + part.domain.event_dim,
                            part.domain.event_dim)
        domain = self.parts[0].domain
        extra = event_dim - domain.event_dim
        return constraints.independent(domain, extra) if extra > 0 else domain

    @constraints.dependent_property(is_discrete=False)
    def codomain(self):
        if not self.parts:
            return constraints.real
        event_dim = self.parts[0].domain.event_dim
        for part in self.parts:
            event_dim = max(event_dim - part.domain.event_dim + part.codomain.event_dim,
                            part.codomain.event_dim)
        codomain = self.parts[-1].codomain
        extra = event_dim - codomain.event_dim
        return constraints.independent(codomain, extra) if extra > 0 else codomain

    @property
    def bijective(self):
        return all(part.bijective for part in self.parts)

    @property
    def sign(self):
        sign = 1
        for part in self.parts:
            sign = sign * part.sign
        return sign

    @property
    def inv(self) -> Transform:
        inverse = self._inverse_transform
        if inverse is None:
            inverse = ComposeTransform([part.inv for part in reversed(self.parts)])
            self._inverse_transform = inverse
            inverse._inverse_transform = self
        return inverse

    def with_cache(self, cache_size: int = 1):
        if self._cache_size == cache_size:
            return self
        return ComposeTransform(self.parts, cache_size=cache_size)

    def __call__(self, x):
        for part in self.parts:
            x = part(x)
        return x

    def log_abs_det_jacobian(self, x, y):
        from disthook import zeros_like

        if not self.parts:
            return zeros_like(x)
        values = [x]
        for part in self.parts[:-1]:
            values.append(part(values[-1]))
        values.append(y)
        total = 0
        event_dim = self.domain.event_dim
        for part, x_i, y_i in zip(self.parts, values[:-1], values[1:]):
            term = part.log_abs_det_jacobian(x_i, y_i)
            total = total + sum_rightmost(term, event_dim - part.domain.event_dim)
            event_dim += part.codomain.event_dim - part.domain.event_dim
        return total

    def forward_shape(self, shape):
        for part in self.parts:
            shape = part.forward_shape(shape)
        return shape

    def inverse_shape(self, shape):
        for part in reversed(self.parts):
            shape = part.inverse_shape(shape)
        return shape

    def __repr__(self) -> str:
        inner = ",\n    ".join(repr(part) for part in self.parts)
        return f"{type(self).__name__}(\n    {inner}\n)"


identity_transform = ComposeTransform([])


class ExpTransform(_Stateless):
    """y = exp(x)."""

    codomain = constraints.positive
    bijective = True
    sign = +1

    def _call(self, x):
        return x.exp()

    def _inverse(self, y):
        return y.log()

    def log_abs_det_jacobian(self, x, y):
        return x


class SigmoidTransform(_Stateless):
    """y = sigmoid(x), kept strictly inside (0, 1) so that the inverse stays finite."""

    codomain = constraints.unit_interval
    bijective = True
    sign = +1

    def _call(self, x):
        return x.sigmoid().clamp(min=finfo(x, "tiny"), max=1.0 - finfo(x, "eps"))

    def _inverse(self, y):
        y = y.clamp(min=finfo(y, "tiny"), max=1.0 - finfo(y, "eps"))
        return y.log() - (-y).log1p()

    def log_abs_det_jacobian(self, x, y):
        return -_softplus(-x) - _softplus(x)


class TanhTransform(_Stateless):
    """y = tanh(x); log |dy/dx| = 2 (log 2 - x - softplus(-2x)), stable for large |x|."""

    codomain = constraints.interval(-1.0, 1.0)
    bijective = True
    sign = +1

    def _call(self, x):
        return x.tanh()

    def _inverse(self, y):
        return y.atanh()

    def log_abs_det_jacobian(self, x, y):
        return 2.0 * (math.log(2.0) - x - _softplus(-2.0 * x))


class AbsTransform(_Stateless):
    """y = |x| (not bijective; the inverse gives the nonnegative preimage)."""

    codomain = constraints.positive

    def _call(self, x):
        return x.abs()

    def _inverse(self, y):
        return y


class AffineTransform(Transform):
    """y = loc + scale * x, over ``event_dim`` rightmost dims at once."""

    bijective = True

    def __init__(self, loc, scale, event_dim: int = 0, cache_size: int = 0) -> None:
        super().__init__(cache_size=cache_size)
        self.loc, self.scale = loc, scale
        self._event_dim = event_dim

    @property
    def event_dim(self) -> int:
        return self._event_dim

    @constraints.dependent_property(is_discrete=False)
    def domain(self):
        if self._event_dim:
            return constraints.independent(constraints.real, self._event_dim)
        return constraints.real

    @constraints.dependent_property(is_discrete=False)
    def codomain(self):
        return self.domain

    def with_cache(self, cache_size: int = 1):
        if self._cache_size == cache_size:
            return self
        return AffineTransform(self.loc, self.scale, self._event_dim, cache_size=cache_size)

    def __eq__(self, other) -> bool:
        if not isinstance(other, AffineTransform):
            return False
        return _same(self.loc, other.loc) and _same(self.scale, other.scale)

    __hash__ = object.__hash__

    @property
    def sign(self):
        if isinstance(self.scale, numbers.Real):
            return (float(self.scale) > 0) - (float(self.scale) < 0)
        return self.scale.sign()

    def _call(self, x):
        return self.loc + self.scale * x

    def _inverse(self, y):
        return (y - self.loc) / self.scale

    def log_abs_det_jacobian(self, x, y):
        from disthook import full_like

        if isinstance(self.scale, numbers.Real):
            result = full_like(x, math.log(abs(self.scale)))
        else:
            result = self.scale.abs().log()
        shape = tuple(x.shape)
        if self._event_dim:
            result = sum_rightmost(result, self._event_dim)
            shape = shape[:len(shape) - self._event_dim]
        return result.expand(shape)

    def forward_shape(self, shape):
        from disthook import broadcast_shapes

        return broadcast_shapes(shape, getattr(self.loc, "shape", ()),
                                getattr(self.scale, "shape", ()))

    inverse_shape = forward_shape


def _same(a, b) -> bool:
    """Whether two numbers or tensors are equal everywhere."""
    if isinstance(a, numbers.Number) and isinstance(b, numbers.Number):
        return a == b
    return bool((a == b).all())


class SoftplusTransform(_Stateless):
    """y = log(1 + exp(x))."""

    codomain = constraints.positive
    bijective = True
    sign = +1

    def _call(self, x):
        return _softplus(x)

    def _inverse(self, y):
        return (-y).expm1().neg().log() + y

    def log_abs_det_jacobian(self, x, y):
        return -_softplus(-x)


class PowerTransform(Transform):
    """y = x ** exponent on the positive reals."""

    domain = constraints.positive
    codomain = constraints.positive
    bijective = True

    def __init__(self, exponent, cache_size: int = 0) -> None:
        super().__init__(cache_size=cache_size)
        from disthook.distributions.distribution import broadcast_all

        (self.exponent,) = broadcast_all(exponent)

    def with_cache(self, cache_size: int = 1):
        if self._cache_size == cache_size:
            return self
        return PowerTransform(self.exponent, cache_size=cache_size)

    @property
    def sign(self):
        return self.exponent.sign()

    def __eq__(self, other) -> bool:
        return isinstance(other, PowerTransform) and _same(self.exponent, other.exponent)

    __hash__ = object.__hash__

    def _call(self, x):
        return x.pow(self.exponent)

    def _inverse(self, y):
        return y.pow(1 / self.exponent)

    def log_abs_det_jacobian(self, x, y):
        return (self.exponent * y / x).abs().log()

    def forward_shape(self, shape):
        from disthook import broadcast_shapes

        return broadcast_shapes(shape, getattr(self.exponent, "shape", ()))

    inverse_shape = forward_shape


class SoftmaxTransform(_Stateless):
    """Real vectors to the simplex by softmax (not bijective: the inverse is the log)."""

    domain = constraints.real_vector
    codomain = constraints.simplex

    def _call(self, x):
        shifted = (x - x.max(-1, keepdim=True)[0]).exp()
        return shifted / shifted.sum(-1, keepdim=True)

    def _inverse(self, y):
        return y.log()

    def forward_shape(self, shape):
        if len(shape) < 1:
            raise ValueError("Too few dimensions on input")
        return shape

    inverse_shape = forward_shape


def _stick_offsets(n: int, like):
    """log(n + 1 - k) for k = 1..n: centres the stick-breaking logits at uniform weights."""
    import numpy as np

    from disthook.distributions.distribution import from_numpy

    return from_numpy(np.log(np.arange(n, 0, -1, dtype=np.float64)), like)


class StickBreakingTransform(_Stateless):
    """Real vectors of length n to the n+1 simplex: each sigmoid takes its share of what
    the previous ones left."""

    domain = constraints.real_vector
    codomain = constraints.simplex
    bijective = True

    def _call(self, x):
        from disthook.nn.functional import pad

        z = (x - _stick_offsets(x.shape[-1], x)).sigmoid()
        left = (1 - z).cumprod(-1)
        return pad(z, (0, 1), value=1.0) * pad(left, (1, 0), value=1.0)

    def _inverse(self, y):
        head = y[..., :-1]
        remaining = (1 - head.cumsum(-1)).clamp(min=finfo(y, "tiny"))
        return head.log() - remaining.log() + _stick_offsets(head.shape[-1], y)

    def log_abs_det_jacobian(self, x, y):
        from disthook.nn.functional import logsigmoid

        x = x - _stick_offsets(x.shape[-1], x)
        return (-x + logsigmoid(x) + y[..., :-1].log()).sum(-1)

    def forward_shape(self, shape):
        if len(shape) < 1:
            raise ValueError("Too few dimensions on input")
        return tuple(shape[:-1]) + (shape[-1] + 1,)

    def inverse_shape(self, shape):
        if len(shape) < 1:
            raise ValueError("Too few dimensions on input")
        return tuple(shape[:-1]) + (shape[-1] - 1,)


class LowerCholeskyTransform(_Stateless):
    """Square matrices to lower-triangular ones with a positive (exponentiated) diagonal."""

    domain = constraints.independent(constraints.real, 2)
    codomain = constraints.lower_cholesky

    def _call(self, x):
        return x.tril(-1) + x.diagonal(dim1=-2, dim2=-1).exp().diag_embed()

    def _inverse(self, y):
        return y.tril(-1) + y.diagonal(dim1=-2, dim2=-1).log().diag_embed()


class PositiveDefiniteTransform(_Stateless):
    """Square matrices to positive definite ones, L L^T of their lower Cholesky transform."""

    domain = constraints.independent(constraints.real, 2)
    codomain = constraints.positive_definite

    def _call(self, x):
        lower = LowerCholeskyTransform()(x)
        return lower @ lower.mT

    def _inverse(self, y):
        from disthook import linalg

        return LowerCholeskyTransform().inv(linalg.cholesky(y))


class IndependentTransform(Transform):
    """``base_transform`` over ``reinterpreted_batch_ndims`` more rightmost dims at once."""

    def __init__(self, base_transform, reinterpreted_batch_ndims: int,
                 cache_size: int = 0) -> None:
        super().__init__(cache_size=cache_size)
        self.base_transform = base_transform.with_cache(cache_size)
        self.reinterpreted_batch_ndims = reinterpreted_batch_ndims

    def with_cache(self, cache_size: int = 1):
        if self._cache_size == cache_size:
            return self
        return IndependentTransform(self.base_transform, self.reinterpreted_batch_ndims,
                                    cache_size=cache_size)

    @constraints.dependent_property(is_discrete=False)
    def domain(self):
        return constraints.independent(self.base_transform.domain,
                                       self.reinterpreted_batch_ndims)

    @constraints.dependent_property(is_discrete=False)
    def codomain(self):
        return constraints.independent(self.base_transform.codomain,
                                       self.reinterpreted_batch_ndims)

    @property
    def bijective(self):
        return self.base_transform.bijective

    @property
    def sign(self):
        return self.base_transform.sign

    def __eq__(self, other) -> bool:
        return (isinstance(other, IndependentTransform)
                and self.base_transform == other.base_transform
                and self.reinterpreted_batch_ndims == other.reinterpreted_batch_ndims)

    __hash__ = object.__hash__

    def _call(self, x):
        if x.dim() < self.domain.event_dim:
            raise ValueError("Too few dimensions on input")
        return self.base_transform(x)

    def _inverse(self, y):
        if y.dim() < self.codomain.event_dim:
            raise ValueError("Too few dimensions on input")
        return self.base_transform.inv(y)

    def log_abs_det_jacobian(self, x, y):
        return sum_rightmost(self.base_transform.log_abs_det_jacobian(x, y),
                             self.reinterpreted_batch_ndims)

    def forward_shape(self, shape):
        return self.base_transform.forward_shape(shape)

    def inverse_shape(self, shape):
        return self.base_transform.inverse_shape(shape)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.base_transform!r}, "
                f"{self.reinterpreted_batch_ndims})")


class ReshapeTransform(Transform):
    """The rightmost dims of shape ``in_shape`` reshaped to ``out_shape`` (volume kept)."""

    bijective = True

    def __init__(self, in_shape, out_shape, cache_size: int = 0) -> None:
        import math as _math

        in_shape, out_shape = tuple(in_shape), tuple(out_shape)
        if _math.prod(in_shape) != _math.prod(out_shape):
            raise ValueError("in_shape, out_shape have different numbers of elements")
        super().__init__(cache_size=cache_size)
        self.in_shape, self.out_shape = in_shape, out_shape

    def with_cache(self, cache_size: int = 1):
        if self._cache_size == cache_size:
            return self
        return ReshapeTransform(self.in_shape, self.out_shape, cache_size=cache_size)

    @constraints.dependent_property
    def domain(self):
        return constraints.independent(constraints.real, len(self.in_shape))

    @constraints.dependent_property
    def codomain(self):
        return constraints.independent(constraints.real, len(self.out_shape))

    def _call(self, x):
        return x.reshape(tuple(x.shape[:x.dim() - len(self.in_shape)]) + self.out_shape)

    def _inverse(self, y):
        return y.reshape(tuple(y.shape[:y.dim() - len(self.out_shape)]) + self.in_shape)

    def log_abs_det_jacobian(self, x, y):
        from disthook import zeros

        return zeros(tuple(x.shape[:x.dim() - len(self.in_shape)]), dtype=x.dtype)

    def forward_shape(self, shape):
        return self._swap_event(shape, self.in_shape, self.out_shape)

    def inverse_shape(self, shape):
        return self._swap_event(shape, self.out_shape, self.in_shape)

    @staticmethod
    def _swap_event(shape, old, new):
        shape = tuple(shape)
        if len(shape) < len(old):
            raise ValueError("Too few dimensions on input")
        cut = len(shape) - len(old)
        if shape[cut:] != old:
            raise ValueError(f"Shape mismatch: expected {shape[cut:]} but got {old}")
        return shape[:cut] + new


class CumulativeDistributionTransform(Transform):
    """x to its CDF under ``distribution`` (onto the unit interval)."""

    bijective = True
    codomain = constraints.unit_interval
    sign = +1

    def __init__(self, distribution, cache_size: int = 0) -> None:
        super().__init__(cache_size=cache_size)
        self.distribution = distribution

    @property
    def domain(self):
        return self.distribution.support

    def with_cache(self, cache_size: int = 1):
        if self._cache_size == cache_size:
            return self
        return CumulativeDistributionTransform(self.distribution, cache_size=cache_size)

    def _call(self, x):
        return self.distribution.cdf(x)

    def _inverse(self, y):
        return self.distribution.icdf(y)

    def log_abs_det_jacobian(self, x, y):
        return self.distribution.log_prob(x)


class _PieceWise(Transform):
    """Transforms applied to pieces of a tensor along ``dim``: ``_pieces`` cuts, ``_join``
    puts back together (CatTransform: slices and cat; StackTransform: entries and stack)."""

    def __init__(self, tseq, dim: int = 0, cache_size: int = 0) -> None:
        if not all(isinstance(t, Transform) for t in tseq):
            raise TypeError("All elements of tseq must be Transform instances")
        if cache_size:
            tseq = [t.with_cache(cache_size) for t in tseq]
        super().__init__(cache_size=cache_size)
        self.transforms = list(tseq)
        self.dim = dim

    @property
    def bijective(self):
        return all(t.bijective for t in self.transforms)

    def _check_dim(self, x) -> None:
        if not -x.dim() <= self.dim < x.dim():
            raise ValueError(f"dim {self.dim} out of range for tensor with {x.dim()} "
                             "dimensions")

    def _call(self, x):
        self._check_dim(x)
        return self._join([t(piece) for t, piece in zip(self.transforms, self._pieces(x))])

    def _inverse(self, y):
        self._check_dim(y)
        return self._join([t.inv(piece)
                           for t, piece in zip(self.transforms, self._pieces(y))])


class CatTransform(_PieceWise):
    """``tseq[i]`` on the i-th slice of ``lengths[i]`` entries along ``dim``."""

    def __init__(self, tseq, dim: int = 0, lengths=None, cache_size: int = 0) -> None:
        super().__init__(tseq, dim, cache_size)
        self.lengths = [1] * len(self.transforms) if lengths is None else list(lengths)
        if len(self.lengths) != len(self.transforms):
            raise ValueError(f"lengths ({len(self.lengths)}) must match transforms "
                             f"({len(self.transforms)})")

    def with_cache(self, cache_size: int = 1):
        if self._cache_size == cache_size:
            return self
        return CatTransform(self.transforms, self.dim, self.lengths, cache_size)

    @property
    def event_dim(self) -> int:
        return max(t.event_dim for t in self.transforms)

    @property
    def length(self) -> int:
        return sum(self.lengths)

    @constraints.dependent_property
    def domain(self):
        return constraints.cat([t.domain for t in self.transforms], self.dim, self.lengths)

    @constraints.dependent_property
    def codomain(self):
        return constraints.cat([t.codomain for t in self.transforms], self.dim,
                               self.lengths)

    def _pieces(self, x):
        if x.shape[self.dim] != self.length:
            raise ValueError(f"x.size({self.dim}) = {x.shape[self.dim]} must equal length "
                             f"{self.length}")
        starts = [sum(self.lengths[:i]) for i in range(len(self.lengths))]
        return [x.narrow(self.dim, start, n) for start, n in zip(starts, self.lengths)]

    def _join(self, pieces):
        from disthook import cat

        return cat(pieces, self.dim)

    def log_abs_det_jacobian(self, x, y):
        from disthook import cat

        self._check_dim(x)
        terms = [sum_rightmost(t.log_abs_det_jacobian(xs, ys), self.event_dim - t.event_dim)
                 for t, xs, ys in zip(self.transforms, self._pieces(x), self._pieces(y))]
        # dim counted from the right, within the batch dims of the result: join there;
        # within the event dims: each piece's term is already a total, so add them up
        dim = (self.dim - x.dim() if self.dim >= 0 else self.dim) + self.event_dim
        return cat(terms, dim) if dim < 0 else sum(terms)


class StackTransform(_PieceWise):
    """``tseq[i]`` on the i-th entry along ``dim``."""

    def with_cache(self, cache_size: int = 1):
        if self._cache_size == cache_size:
            return self
        return StackTransform(self.transforms, self.dim, cache_size)

    @constraints.dependent_property
    def domain(self):
        return constraints.stack([t.domain for t in self.transforms], self.dim)

    @constraints.dependent_property
    def codomain(self):
        return constraints.stack([t.codomain for t in self.transforms], self.dim)

    def _pieces(self, x):
        return [x.select(self.dim, i) for i in range(x.shape[self.dim])]

    def _join(self, pieces):
        from disthook import stack

        return stack(pieces, self.dim)

    def log_abs_det_jacobian(self, x, y):
        from disthook import stack

        self._check_dim(x)
        return stack([t.log_abs_det_jacobian(xs, ys) for t, xs, ys in
                      zip(self.transforms, self._pieces(x), self._pieces(y))], self.dim)


class CorrCholeskyTransform(Transform):
    """tanh of each entry, then per row a signed stick-breaking so that rows have unit norm."""

    domain = constraints.real_vector
    codomain = constraints.corr_cholesky
    bijective = True

    def __eq__(self, other) -> bool:
        return isinstance(other, CorrCholeskyTransform)

    __hash__ = object.__hash__

    def _call(self, x):
        from disthook import eye
        from disthook.distributions.utils import vec_to_tril_matrix
        from disthook.nn.functional import pad

        eps = finfo(x, "eps")
        r = vec_to_tril_matrix(x.tanh().clamp(min=-1 + eps, max=1 - eps), -1)
        # each entry keeps the share of its row's unit norm that the entries before it left
        left = (1 - r.pow(2)).sqrt().cumprod(-1)
        return (r + eye(r.shape[-1], dtype=r.dtype)) * pad(left[..., :-1], (1, 0), value=1.0)

    def _inverse(self, y):
        from disthook.distributions.utils import tril_matrix_to_vec
        from disthook.nn.functional import pad

        left = pad((1 - (y * y).cumsum(-1))[..., :-1], (1, 0), value=1.0)
        t = tril_matrix_to_vec(y, -1) / tril_matrix_to_vec(left, -1).sqrt()
        return ((t).log1p() - (-t).log1p()) / 2

    def log_abs_det_jacobian(self, x, y):
        from disthook.distributions.utils import tril_matrix_to_vec
        from disthook.nn.functional import softplus

        left = 1 - (y * y).cumsum(-1)
        stick = 0.5 * tril_matrix_to_vec(left, -2).log().sum(-1)
        tanh = -2 * (x + softplus(-2 * x) - math.log(2.0)).sum(-1)
        return stick + tanh

    def forward_shape(self, shape):
        if len(shape) < 1:
            raise ValueError("Too few dimensions on input")
        count = shape[-1]
        n = round((0.25 + 2 * count) ** 0.5 + 0.5)
        if n * (n - 1) // 2 != count:
            raise ValueError("Input is not a flattened lower-diagonal number")
        return tuple(shape[:-1]) + (n, n)

    def inverse_shape(self, shape):
        if len(shape) < 2:
            raise ValueError("Too few dimensions on input")
        if shape[-2] != shape[-1]:
            raise ValueError("Input is not square")
        n = shape[-1]
        return tuple(shape[:-2]) + (n * (n - 1) // 2,)
