"""``torch.distributions.constraints``: the set a parameter or a value must lie in.

A constraint's ``check(value)`` is a bool tensor over the value's batch (an event-level
constraint reduces its ``event_dim`` rightmost dims); its ``repr`` is torch's, since
validation errors quote it. ``support`` and ``arg_constraints`` of every distribution are
made of these.
"""
from __future__ import annotations

import numpy as np

from disthook.distributions.distribution import text

__all__ = [
    "Constraint", "MixtureSameFamilyConstraint", "boolean", "cat", "corr_cholesky",
    "dependent", "dependent_property", "greater_than", "greater_than_eq",
    "half_open_interval", "independent", "integer_interval", "interval", "is_dependent",
    "less_than", "lower_cholesky", "lower_triangular", "multinomial", "nonnegative",
    "nonnegative_integer", "one_hot", "positive", "positive_definite", "positive_integer",
    "positive_semidefinite", "real", "real_vector", "simplex", "square", "stack", "symmetric",
    "unit_interval",
]


class Constraint:
    """A region; ``is_discrete`` for integer sets, ``event_dim`` dims make one point."""

    is_discrete = False
    event_dim = 0
    _name = "Constraint"

    def check(self, value):
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{self._name}()"


class _Dependent(Constraint):
    """A region given by other parameters: never checked (``is_dependent``)."""

    _name = "Dependent"

    def __init__(self, *, is_discrete=NotImplemented, event_dim=NotImplemented) -> None:
        self._is_discrete, self._event_dim = is_discrete, event_dim

    @property
    def is_discrete(self):
        if self._is_discrete is NotImplemented:
            raise NotImplementedError(".is_discrete cannot be determined statically")
        return self._is_discrete

    @property
    def event_dim(self):
        if self._event_dim is NotImplemented:
            raise NotImplementedError(".event_dim cannot be determined statically")
        return self._event_dim

    def __call__(self, *, is_discrete=NotImplemented, event_dim=NotImplemented):
        return _Dependent(is_discrete=is_discrete, event_dim=event_dim)

    def check(self, value):
        raise ValueError("Cannot determine validity of dependent constraint")


def is_dependent(constraint) -> bool:
    """Whether ``constraint`` depends on other parameters (and so is not checked)."""
    return isinstance(constraint, _Dependent)


class dependent_property(property, _Dependent):
    """A property of a distribution whose value is a constraint made from its parameters
    (``Uniform.support`` is ``interval(low, high)``); on the class it reads as dependent."""

    def __init__(self, fn=None, *, is_discrete=NotImplemented, event_dim=NotImplemented):
        property.__init__(self, fn)
        _Dependent.__init__(self, is_discrete=is_discrete, event_dim=event_dim)

    def __call__(self, fn):
        return dependent_property(fn, is_discrete=self._is_discrete,
                                  event_dim=self._event_dim)


class _Boolean(Constraint):
    is_discrete = True
    _name = "Boolean"

    def check(self, value):
        return (value == 0) | (value == 1)


class _OneHot(Constraint):
    is_discrete = True
    event_dim = 1
    _name = "OneHot"

    def check(self, value):
        return ((value == 0) | (value == 1)).all(-1) & (value.sum(-1) == 1)


class _IntegerInterval(Constraint):
    is_discrete = True
    _name = "IntegerInterval"

    def __init__(self, lower_bound, upper_bound) -> None:
        self.lower_bound, self.upper_bound = lower_bound, upper_bound

    def check(self, value):
        return (value % 1 == 0) & (self.lower_bound <= value) & (value <= self.upper_bound)

    def __repr__(self) -> str:
        return (f"{self._name}(lower_bound={text(self.lower_bound)}, "
                f"upper_bound={text(self.upper_bound)})")


class _IntegerGreaterThan(Constraint):
    is_discrete = True
    _name = "IntegerGreaterThan"

    def __init__(self, lower_bound) -> None:
        self.lower_bound = lower_bound

    def check(self, value):
        return (value % 1 == 0) & (value >= self.lower_bound)

    def __repr__(self) -> str:
        return f"{self._name}(lower_bound={text(self.lower_bound)})"


class _Multinomial(Constraint):
    """Nonnegative counts along the last dim summing to at most ``upper_bound``."""

    is_discrete = True
    event_dim = 1
    _name = "Multinomial"

    def __init__(self, upper_bound) -> None:
        self.upper_bound = upper_bound

    def check(self, value):
        return (value >= 0).all(-1) & (value.sum(-1) <= self.upper_bound)


class _Real(Constraint):
    _name = "Real"

    def check(self, value):
        return value == value  # noqa: PLR0124 (False only for NaN)


class _GreaterThan(Constraint):
    _name = "GreaterThan"
    _strict = True

    def __init__(self, lower_bound) -> None:
        self.lower_bound = lower_bound

    def check(self, value):
        return self.lower_bound < value if self._strict else self.lower_bound <= value

    def __repr__(self) -> str:
        return f"{self._name}(lower_bound={text(self.lower_bound)})"


class _GreaterThanEq(_GreaterThan):
    _name = "GreaterThanEq"
    _strict = False


class _LessThan(Constraint):
    _name = "LessThan"

    def __init__(self, upper_bound) -> None:
        self.upper_bound = upper_bound

    def check(self, value):
        return value < self.upper_bound

    def __repr__(self) -> str:
        return f"{self._name}(upper_bound={text(self.upper_bound)})"


class _Interval(Constraint):
    """``lower <= value <= upper`` (``HalfOpenInterval``: ``value < upper``)."""

    _name = "Interval"
    _closed_above = True

    def __init__(self, lower_bound, upper_bound) -> None:
        self.lower_bound, self.upper_bound = lower_bound, upper_bound

    def check(self, value):
        above = value <= self.upper_bound if self._closed_above else value < self.upper_bound
        return (self.lower_bound <= value) & above

    def __repr__(self) -> str:
        return (f"{self._name}(lower_bound={text(self.lower_bound)}, "
                f"upper_bound={text(self.upper_bound)})")


class _HalfOpenInterval(_Interval):
    _name = "HalfOpenInterval"
    _closed_above = False


class _Simplex(Constraint):
    """Nonnegative entries along the last dim that sum to one (within 1e-6)."""

    event_dim = 1
    _name = "Simplex"

    def check(self, value):
        return (value >= 0).all(-1) & ((value.sum(-1) - 1).abs() < 1e-6)


class _LowerCholesky(Constraint):
    """Lower-triangular square matrices with a positive diagonal."""

    event_dim = 2
    _name = "LowerCholesky"

    def check(self, value):
        lower = (value.tril() == value).all(-1).all(-1)
        return lower & (value.diagonal(dim1=-2, dim2=-1) > 0).all(-1)


class _LowerTriangular(Constraint):
    """Square matrices with zeros above the diagonal."""

    event_dim = 2
    _name = "LowerTriangular"

    def check(self, value):
        return (value.tril() == value).all(-1).all(-1)


class _Square(Constraint):
    """Matrices with as many rows as columns."""

    event_dim = 2
    _name = "Square"

    def check(self, value):
        from disthook import full

        return full(tuple(value.shape[:-2]), value.shape[-2] == value.shape[-1],
                    dtype=bool)


class _Symmetric(_Square):
    """Square matrices equal to their transpose (to 1e-6)."""

    _name = "Symmetric"

    def check(self, value):
        square = super().check(value)
        if not bool(square.all()):
            return square
        return value.isclose(value.mT, atol=1e-6).all(-1).all(-1)


class _PositiveSemidefinite(_Symmetric):
    """Symmetric matrices without negative eigenvalues."""

    _name = "PositiveSemidefinite"

    def check(self, value):
        from disthook import linalg

        symmetric = super().check(value)
        if not bool(symmetric.all()):
            return symmetric
        return (linalg.eigvalsh(value.detach()) >= 0).all(-1)


class _CorrCholesky(Constraint):
    """Lower Cholesky factors of correlation matrices: positive diagonal, unit rows."""

    event_dim = 2
    _name = "CorrCholesky"

    def check(self, value):
        tolerance = float(np.finfo(value._data.dtype).eps) * value.shape[-1] * 10
        row_norm = value.detach().pow(2).sum(-1).sqrt()
        unit_rows = ((row_norm - 1).abs() <= tolerance).all(-1)
        return _LowerCholesky().check(value) & unit_rows


class _PositiveDefinite(Constraint):
    """Symmetric matrices whose Cholesky factorisation succeeds."""

    event_dim = 2
    _name = "PositiveDefinite"

    def check(self, value):
        import numpy as np

        from disthook.tensor import Tensor

        data = np.asarray(value.detach()._data, dtype=np.float64)
        batch = data.shape[:-2]
        flat = data.reshape((-1,) + data.shape[-2:])
        transposed = np.swapaxes(flat, -1, -2)
        ok = np.isclose(flat, transposed, atol=1e-6).all(axis=(-2, -1))
        try:  # all at once; one by one only when some factorisation fails
            np.linalg.cholesky(flat)
        except np.linalg.LinAlgError:
            for i, matrix in enumerate(flat):
                try:
                    np.linalg.cholesky(matrix)
                except np.linalg.LinAlgError:
                    ok[i] = False
        return Tensor._make(ok.reshape(batch), None, 0)


class _IndependentConstraint(Constraint):
    """``base_constraint`` over the ``reinterpreted_batch_ndims`` rightmost dims at once."""

    def __init__(self, base_constraint, reinterpreted_batch_ndims: int) -> None:
        if not isinstance(base_constraint, Constraint):
            raise TypeError(f"Expected base_constraint to be a Constraint, "
                            f"got {type(base_constraint).__name__}")
        if not isinstance(reinterpreted_batch_ndims, int) or reinterpreted_batch_ndims < 0:
            raise ValueError("reinterpreted_batch_ndims must be a nonnegative int, "
                             f"got {reinterpreted_batch_ndims!r}")
        self.base_constraint = base_constraint
        self.reinterpreted_batch_ndims = reinterpreted_batch_ndims

    @property
    def is_discrete(self):
        return self.base_constraint.is_discrete

    @property
    def event_dim(self):
        return self.base_constraint.event_dim + self.reinterpreted_batch_ndims

    def check(self, value):
        result = self.base_constraint.check(value)
        if result.dim() < self.reinterpreted_batch_ndims:
            expected = self.base_constraint.event_dim + self.reinterpreted_batch_ndims
            raise ValueError(f"Expected value.dim() >= {expected} but got {value.dim()}")
        if self.reinterpreted_batch_ndims:
            result = result.reshape(result.shape[:result.dim() - self.reinterpreted_batch_ndims]
                                    + (-1,)).all(-1)
        return result

    def __repr__(self) -> str:
        return f"IndependentConstraint({self.base_constraint!r}, " \
               f"{self.reinterpreted_batch_ndims})"


class _OfPieces(Constraint):
    """One constraint per piece of a value along ``dim`` (Cat, Stack)."""

    def __init__(self, cseq, dim: int = 0) -> None:
        self.cseq = list(cseq)
        self.dim = dim

    @property
    def is_discrete(self):
        return any(c.is_discrete for c in self.cseq)


class _Cat(_OfPieces):
    """``cseq[i]`` on the i-th slice (of ``lengths[i]`` entries) along ``dim``."""

    _name = "Cat"

    def __init__(self, cseq, dim: int = 0, lengths=None) -> None:
        super().__init__(cseq, dim)
        self.lengths = [1] * len(self.cseq) if lengths is None else list(lengths)
        if len(self.lengths) != len(self.cseq):
            raise ValueError(f"lengths ({len(self.lengths)}) must match cseq "
                             f"({len(self.cseq)})")

    @property
    def event_dim(self):
        return max(c.event_dim for c in self.cseq)

    def check(self, value):
        from disthook import cat

        checks, start = [], 0
        for constraint, length in zip(self.cseq, self.lengths):
            checks.append(constraint.check(value.narrow(self.dim, start, length)))
            start += length
        return cat(checks, self.dim)


class _Stack(_OfPieces):
    """``cseq[i]`` on the i-th entry along ``dim``."""

    _name = "Stack"

    @property
    def event_dim(self):
        dim = max(c.event_dim for c in self.cseq)
        return dim + 1 if self.dim + dim < 0 else dim

    def check(self, value):
        from disthook import stack

        pieces = [value.select(self.dim, i) for i in range(value.shape[self.dim])]
        return stack([c.check(v) for v, c in zip(pieces, self.cseq)], self.dim)


class MixtureSameFamilyConstraint(Constraint):
    """A value lies in a mixture's support when it lies in its components' support."""

    def __init__(self, base_constraint) -> None:
        self.base_constraint = base_constraint

    @property
    def is_discrete(self):
        return self.base_constraint.is_discrete

    @property
    def event_dim(self):
        return self.base_constraint.event_dim

    def check(self, value):
        return self.base_constraint.check(value)

    def __repr__(self) -> str:
        return f"MixtureSameFamilyConstraint({self.base_constraint!r})"


dependent = _Dependent()
boolean = _Boolean()
one_hot = _OneHot()
nonnegative_integer = _IntegerGreaterThan(0)
positive_integer = _IntegerGreaterThan(1)
integer_interval = _IntegerInterval
multinomial = _Multinomial
real = _Real()
real_vector = _IndependentConstraint(real, 1)
positive = _GreaterThan(0.0)
nonnegative = _GreaterThanEq(0.0)
greater_than = _GreaterThan
greater_than_eq = _GreaterThanEq
less_than = _LessThan
unit_interval = _Interval(0.0, 1.0)
interval = _Interval
half_open_interval = _HalfOpenInterval
simplex = _Simplex()
lower_cholesky = _LowerCholesky()
lower_triangular = _LowerTriangular()
square = _Square()
symmetric = _Symmetric()
positive_semidefinite = _PositiveSemidefinite()
corr_cholesky = _CorrCholesky()
positive_definite = _PositiveDefinite()
independent = _IndependentConstraint
cat = _Cat
stack = _Stack
