"""LowRankMultivariateNormal(loc, cov_factor, cov_diag): covariance W W^T + diag(D).

Densities never form the n x n covariance: by the Woodbury identity they need only the
m x m capacitance matrix C = I + W^T D^-1 W and its Cholesky factor, so an n-dimensional
Gaussian with a rank-m correction costs O(n m^2). Draws are loc + W e1 + sqrt(D) e2.
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
from disthook.distributions.multivariate_normal import _cholesky, _solve_lower

__all__ = ["LowRankMultivariateNormal"]


def capacitance_tril(cov_factor, cov_diag):
    """The lower Cholesky factor of I + W^T D^-1 W."""
    from disthook import eye

    m = cov_factor.shape[-1]
    scaled = cov_factor / cov_diag.unsqueeze(-1)
    capacitance = cov_factor.mT @ scaled
    return _cholesky(capacitance + eye(m, dtype=cov_factor.dtype))


def woodbury_mahalanobis(cov_factor, cov_diag, capacitance, diff):
    """diff^T (W W^T + D)^-1 diff = diff^T D^-1 diff - |L_C^-1 W^T D^-1 diff|^2."""
    scaled = diff / cov_diag
    plain = (diff * scaled).sum(-1)
    projected = (cov_factor.mT @ scaled.unsqueeze(-1))  # (..., m, 1)
    correction = _solve_lower(capacitance, projected).squeeze(-1).pow(2).sum(-1)
    return plain - correction


def log_det(cov_diag, capacitance):
    """log det(W W^T + D) = 2 sum log diag(L_C) + sum log D."""
    return (2 * capacitance.diagonal(dim1=-2, dim2=-1).log().sum(-1)
            + cov_diag.log().sum(-1))


class LowRankMultivariateNormal(LocationMean, Distribution):
    arg_constraints: ClassVar[dict] = {
        "loc": constraints.real_vector,
        "cov_factor": constraints.independent(constraints.real, 2),
        "cov_diag": constraints.independent(constraints.positive, 1)}
    support = constraints.real_vector
    has_rsample = True

    def __init__(self, loc, cov_factor, cov_diag, validate_args: bool | None = None) -> None:
        from disthook import broadcast_tensors

        loc = as_float_tensor(loc)
        cov_factor, cov_diag = as_float_tensor(cov_factor, loc), as_float_tensor(cov_diag, loc)
        if loc.dim() < 1:
            raise ValueError("loc must be at least one-dimensional.")
        n = loc.shape[-1]
        if cov_factor.dim() < 2:
            raise ValueError("cov_factor must be at least two-dimensional, with optional "
                             "leading batch dimensions")
        if cov_factor.shape[-2] != n:
            raise ValueError(f"cov_factor must be a batch of matrices with shape {n} x m")
        if tuple(cov_diag.shape[-1:]) != (n,):
            raise ValueError(f"cov_diag must be a batch of vectors with shape "
                             f"{loc.shape[-1:]}")
        try:
            loc_, self.cov_factor, diag_ = broadcast_tensors(
                loc.unsqueeze(-1), cov_factor, cov_diag.unsqueeze(-1))
        except (RuntimeError, ValueError) as error:
            raise ValueError(f"Incompatible batch shapes: loc {loc.shape}, cov_factor "
                             f"{cov_factor.shape}, cov_diag {cov_diag.shape}") from error
        self.loc, self.cov_diag = loc_[..., 0], diag_[..., 0]
        self._unbroadcasted_cov_factor = cov_factor
        self._unbroadcasted_cov_diag = cov_diag
        self._capacitance_tril = capacitance_tril(cov_factor, cov_diag)
        super().__init__(self.loc.shape[:-1], loc.shape[-1:], validate_args)

    def expand(self, batch_shape, _instance=None):
        new = type(self).__new__(type(self)) if _instance is None else _instance
        new.__dict__.update({k: v for k, v in self.__dict__.items()
                             if k not in ("scale_tril", "covariance_matrix",
                                          "precision_matrix")})
        n, m = self.event_shape[0], self.cov_factor.shape[-1]
        new.loc = self.loc.expand(tuple(batch_shape) + (n,))
        new.cov_diag = self.cov_diag.expand(tuple(batch_shape) + (n,))
        new.cov_factor = self.cov_factor.expand(tuple(batch_shape) + (n, m))
        return self._expanded(new, batch_shape)

    def _matrix_shape(self) -> tuple:
        return tuple(self._batch_shape) + tuple(self._event_shape) * 2

    @lazy_property
    def covariance_matrix(self):
        from disthook import diag_embed

        w = self._unbroadcasted_cov_factor
        full = w @ w.mT + diag_embed(self._unbroadcasted_cov_diag)
        return full.expand(self._matrix_shape())

    @lazy_property
    def scale_tril(self):
        return _cholesky(self.covariance_matrix)

    @lazy_property
    def precision_matrix(self):
        """D^-1 - D^-1 W C^-1 W^T D^-1 (Woodbury)."""
        from disthook import diag_embed

        w, d = self._unbroadcasted_cov_factor, self._unbroadcasted_cov_diag
        inverse_diag = d.reciprocal()
        a = _solve_lower(self._capacitance_tril, (w * inverse_diag.unsqueeze(-1)).mT)
        precision = diag_embed(inverse_diag) - a.mT @ a
        return precision.expand(self._matrix_shape())

    @property
    def variance(self):
        w = self._unbroadcasted_cov_factor
        value = w.pow(2).sum(-1) + self._unbroadcasted_cov_diag
        return value.expand(tuple(self._batch_shape) + tuple(self._event_shape))

    def rsample(self, sample_shape=()):
        from disthook.random import gen

        shape = self._extended_shape(sample_shape)
        m = self.cov_factor.shape[-1]
        e_factor = from_numpy(gen().standard_normal(tuple(shape[:-1]) + (m,)), self.loc)
        e_diag = from_numpy(gen().standard_normal(shape), self.loc)
        low_rank = (self._unbroadcasted_cov_factor @ e_factor.unsqueeze(-1)).squeeze(-1)
        return self.loc + low_rank + self._unbroadcasted_cov_diag.sqrt() * e_diag

    def log_prob(self, value):
        self._check_sample(value)
        mahalanobis = woodbury_mahalanobis(self._unbroadcasted_cov_factor,
                                           self._unbroadcasted_cov_diag,
                                           self._capacitance_tril, value - self.loc)
        n = self._event_shape[0]
        return -0.5 * (n * math.log(2 * math.pi) + mahalanobis
                       + log_det(self._unbroadcasted_cov_diag, self._capacitance_tril))

    def entropy(self):
        n = self._event_shape[0]
        value = 0.5 * (n * (1.0 + math.log(2 * math.pi))
                       + log_det(self._unbroadcasted_cov_diag, self._capacitance_tril))
        return value.expand(self._batch_shape) if len(self._batch_shape) else value
