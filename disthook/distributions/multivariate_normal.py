"""MultivariateNormal(loc, covariance_matrix | precision_matrix | scale_tril).

Everything is computed from the lower Cholesky factor ``L`` of the covariance, kept at the
batch shape it was given with (``_unbroadcasted_scale_tril``): draws are ``loc + L @ eps``,
densities solve triangular systems, so gradients reach every parameter through disthook's
ops.
"""
from __future__ import annotations

import math
from typing import ClassVar

from disthook.distributions import constraints
from disthook.distributions.distribution import (
    Distribution,
    LocationMean,
    as_float_tensor,
    from_numpy,
    lazy_property,
)

__all__ = ["MultivariateNormal", "ScaleTrilMatrices"]


def _identity_like(matrix):
    from disthook import eye

    return eye(matrix.shape[-1], dtype=matrix.dtype).expand(matrix.shape)


def precision_to_scale_tril(precision):
    """The lower factor L of inverse(precision) = L L^T without inverting precision: with
    J the reversal permutation, chol(J P J) = J U J for the upper factor U of P = U U^T,
    so L = inverse(U^T) is a triangular solve."""
    upper_t = _cholesky(precision.flip((-2, -1))).flip((-2, -1)).mT
    return _solve_lower(upper_t, _identity_like(precision))


def _cholesky(matrix):
    from disthook import linalg

    return linalg.cholesky(matrix)


def _solve_lower(lower, rhs):
    from disthook import broadcast_shapes, linalg

    batch = broadcast_shapes(lower.shape[:-2], rhs.shape[:-2])
    return linalg.solve_triangular(lower.expand(batch + lower.shape[-2:]),
                                   rhs.expand(batch + rhs.shape[-2:]), upper=False)


def batch_mahalanobis(scale_tril, diff):
    """``diff^T (L L^T)^-1 diff`` over broadcast batch dims: the squared norm of
    ``L^-1 diff``."""
    return _solve_lower(scale_tril, diff.unsqueeze(-1)).squeeze(-1).pow(2).sum(-1)


class ScaleTrilMatrices:
    """``scale_tril``, ``covariance_matrix`` and ``precision_matrix`` over the batch, made
    when first read from ``_unbroadcasted_scale_tril`` (MultivariateNormal, Wishart)."""

    def _matrix_shape(self) -> tuple:
        n = self._unbroadcasted_scale_tril.shape[-1]
        return tuple(self._batch_shape) + (n, n)

    @lazy_property
    def scale_tril(self):
        return self._unbroadcasted_scale_tril.expand(self._matrix_shape())

    @lazy_property
    def covariance_matrix(self):
        lower = self._unbroadcasted_scale_tril
        return (lower @ lower.mT).expand(self._matrix_shape())

    @lazy_property
    def precision_matrix(self):
        from disthook import cholesky_inverse

        return cholesky_inverse(self._unbroadcasted_scale_tril).expand(self._matrix_shape())


class MultivariateNormal(ScaleTrilMatrices, LocationMean, Distribution):
    arg_constraints: ClassVar[dict] = {"loc": constraints.real_vector,
                                       "covariance_matrix": constraints.positive_definite,
                                       "precision_matrix": constraints.positive_definite,
                                       "scale_tril": constraints.lower_cholesky}
    support = constraints.real_vector
    has_rsample = True

    def __init__(self, loc, covariance_matrix=None, precision_matrix=None, scale_tril=None,
                 validate_args: bool | None = None) -> None:
        from disthook import broadcast_shapes

        loc = as_float_tensor(loc)
        if loc.dim() < 1:
            raise ValueError("loc must be at least one-dimensional.")
        given = [(name, m) for name, m in (("covariance_matrix", covariance_matrix),
                                           ("precision_matrix", precision_matrix),
                                           ("scale_tril", scale_tril)) if m is not None]
        if len(given) != 1:
            raise ValueError("Exactly one of covariance_matrix or precision_matrix or "
                             "scale_tril may be specified.")
        name, matrix = given[0]
        matrix = as_float_tensor(matrix, loc)
        if matrix.dim() < 2:
            raise ValueError(f"{name} matrix must be at least two-dimensional, with optional "
                             "leading batch dimensions" if name == "scale_tril" else
                             f"{name} must be at least two-dimensional, with optional "
                             "leading batch dimensions")
        batch_shape = broadcast_shapes(matrix.shape[:-2], loc.shape[:-1])
        setattr(self, name, matrix.expand(batch_shape + matrix.shape[-2:]))
        self.loc = loc.expand(batch_shape + loc.shape[-1:])
        super().__init__(batch_shape, loc.shape[-1:], validate_args)
        if name == "scale_tril":
            self._unbroadcasted_scale_tril = matrix
        elif name == "covariance_matrix":
            self._unbroadcasted_scale_tril = _cholesky(matrix)
        else:
            self._unbroadcasted_scale_tril = precision_to_scale_tril(matrix)

    def expand(self, batch_shape, _instance=None):
        new = type(self).__new__(type(self)) if _instance is None else _instance
        n = self.event_shape[0]
        new.loc = self.loc.expand(tuple(batch_shape) + (n,))
        new._unbroadcasted_scale_tril = self._unbroadcasted_scale_tril
        for name in ("covariance_matrix", "precision_matrix", "scale_tril"):
            if name in self.__dict__:
                new.__dict__[name] = self.__dict__[name].expand(tuple(batch_shape) + (n, n))
        return self._expanded(new, batch_shape)

    @property
    def variance(self):
        return self._unbroadcasted_scale_tril.pow(2).sum(-1).expand(
            tuple(self._batch_shape) + tuple(self._event_shape))

    def rsample(self, sample_shape=()):
        from disthook.random import gen

        eps = from_numpy(gen().standard_normal(self._extended_shape(sample_shape)), self.loc)
        return self.loc + (self._unbroadcasted_scale_tril @ eps.unsqueeze(-1)).squeeze(-1)

    def _half_log_det(self):
        return self._unbroadcasted_scale_tril.diagonal(dim1=-2, dim2=-1).log().sum(-1)

    def log_prob(self, value):
        self._check_sample(value)
        mahalanobis = batch_mahalanobis(self._unbroadcasted_scale_tril, value - self.loc)
        n = self._event_shape[0]
        return -0.5 * (n * math.log(2 * math.pi) + mahalanobis) - self._half_log_det()

    def entropy(self):
        n = self._event_shape[0]
        value = 0.5 * n * (1.0 + math.log(2 * math.pi)) + self._half_log_det()
        return value.expand(self._batch_shape) if len(self._batch_shape) else value
