"""Wishart(df, covariance_matrix | precision_matrix | scale_tril): the law of sum x x^T over
df Gaussian vectors x ~ N(0, Sigma) (for whole df), over positive definite matrices.

Draws use Bartlett's decomposition (L A)(L A)^T, A lower triangular with sqrt(Chi2(df - i))
on its diagonal and standard normals below it. torch differentiates them through the Chi2's
implicit gradient, which disthook does not reproduce: ``rsample`` raises, as Gamma's does.
"""
from __future__ import annotations

import math
import numbers
import warnings

import numpy as np

from disthook.distributions import constraints
from disthook.distributions.distribution import as_float_tensor, from_numpy, text
from disthook.distributions.exp_family import ExponentialFamily
from disthook.distributions.gamma import _no_rsample
from disthook.distributions.multivariate_normal import (
    ScaleTrilMatrices,
    _cholesky,
    precision_to_scale_tril,
)

__all__ = ["Wishart"]

_LOG_2 = math.log(2)


def _mvdigamma(x, p: int):
    """d/dx of the multivariate log gamma: sum over i < p of digamma(x - i / 2)."""
    return sum((x - i / 2).digamma() for i in range(p))


class Wishart(ScaleTrilMatrices, ExponentialFamily):
    support = constraints.positive_definite
    has_rsample = False
    _mean_carrier_measure = 0

    @property
    def arg_constraints(self):
        return {"covariance_matrix": constraints.positive_definite,
                "precision_matrix": constraints.positive_definite,
                "scale_tril": constraints.lower_cholesky,
                "df": constraints.greater_than(self.event_shape[-1] - 1)}

    def __init__(self, df, covariance_matrix=None, precision_matrix=None, scale_tril=None,
                 validate_args: bool | None = None) -> None:
        from disthook import broadcast_shapes, tensor
        from disthook.tensor import Size

        given = [(name, m) for name, m in (("covariance_matrix", covariance_matrix),
                                           ("precision_matrix", precision_matrix),
                                           ("scale_tril", scale_tril)) if m is not None]
        if len(given) != 1:
            raise AssertionError("Exactly one of covariance_matrix or precision_matrix or "
                                 "scale_tril may be specified.")
        name, param = given[0][0], as_float_tensor(given[0][1])
        if param.dim() < 2:
            raise ValueError("scale_tril must be at least two-dimensional, with optional "
                             "leading batch dimensions")
        if isinstance(df, numbers.Number):
            batch_shape = Size(param.shape[:-2])
            self.df = tensor(float(df), dtype=param.dtype)
        else:
            batch_shape = broadcast_shapes(param.shape[:-2], df.shape)
            self.df = as_float_tensor(df, param).expand(batch_shape)
        p = param.shape[-1]
        if bool((self.df <= p - 1).any()):
            raise ValueError(f"Value of df={text(df)} expected to be greater than ndim - 1 "
                             f"= {p - 1}.")
        setattr(self, name, param.expand(tuple(batch_shape) + (p, p)))
        if bool((self.df < p).any()):
            warnings.warn("Low df values detected. Singular samples are highly likely to "
                          "occur for ndim - 1 < df < ndim.", stacklevel=2)
        super().__init__(batch_shape, param.shape[-2:], validate_args)
        if name == "scale_tril":
            self._unbroadcasted_scale_tril = param
        elif name == "covariance_matrix":
            self._unbroadcasted_scale_tril = _cholesky(param)
        else:
            self._unbroadcasted_scale_tril = precision_to_scale_tril(param)

    def expand(self, batch_shape, _instance=None):
        new = type(self).__new__(type(self)) if _instance is None else _instance
        shape = tuple(batch_shape) + tuple(self.event_shape)
        new._unbroadcasted_scale_tril = self._unbroadcasted_scale_tril.expand(shape)
        new.df = self.df.expand(tuple(batch_shape))
        for name in ("covariance_matrix", "precision_matrix", "scale_tril"):
            if name in self.__dict__:
                new.__dict__[name] = self.__dict__[name].expand(shape)
        return self._expanded(new, batch_shape)

    def _df_matrix(self):
        """df shaped to scale a batch of matrices."""
        return self.df.reshape(tuple(self._batch_shape) + (1, 1))

    @property
    def mean(self):
        return self._df_matrix() * self.covariance_matrix

    @property
    def mode(self):
        from disthook import full_like, where

        factor = self.df - self.covariance_matrix.shape[-1] - 1
        factor = where(factor > 0, factor, full_like(factor, math.nan))
        return factor.reshape(tuple(self._batch_shape) + (1, 1)) * self.covariance_matrix

    @property
    def variance(self):
        cov = self.covariance_matrix
        diag = cov.diagonal(dim1=-2, dim2=-1)
        return self._df_matrix() * (cov.pow(2) + diag.unsqueeze(-1) * diag.unsqueeze(-2))

    def rsample(self, sample_shape=()):
        raise _no_rsample(self)

    def sample(self, sample_shape=()):
        from disthook.random import gen

        shape = tuple(self._extended_shape(sample_shape))
        p = shape[-1]
        rng = gen()
        df = np.broadcast_to(self.df.detach()._data.astype(np.float64), shape[:-2])
        chi2 = rng.chisquare(df[..., None] - np.arange(p))  # df - i for row i
        bartlett = np.tril(rng.standard_normal(shape), -1)
        bartlett += np.sqrt(chi2)[..., None] * np.eye(p)
        lower = self._unbroadcasted_scale_tril.detach()._data.astype(np.float64) @ bartlett
        return from_numpy(lower @ np.swapaxes(lower, -1, -2), self.df)

    def _half_log_det(self):
        return self._unbroadcasted_scale_tril.diagonal(dim1=-2, dim2=-1).log().sum(-1)

    def log_prob(self, value):
        from disthook import cholesky_solve, linalg, mvlgamma

        self._check_sample(value)
        nu, p = self.df, self._event_shape[-1]
        trace = cholesky_solve(value, self._unbroadcasted_scale_tril).diagonal(
            dim1=-2, dim2=-1).sum(-1)
        return (-nu * (p * _LOG_2 / 2 + self._half_log_det()) - mvlgamma(nu / 2, p)
                + (nu - p - 1) / 2 * linalg.slogdet(value).logabsdet - trace / 2)

    def entropy(self):
        from disthook import mvlgamma

        nu, p = self.df, self._event_shape[-1]
        return ((p + 1) * (p * _LOG_2 / 2 + self._half_log_det()) + mvlgamma(nu / 2, p)
                - (nu - p - 1) / 2 * _mvdigamma(nu / 2, p) + nu * p / 2)

    @property
    def _natural_params(self):
        p = self._event_shape[-1]
        return -self.precision_matrix / 2, (self.df - p - 1) / 2

    def _log_normalizer(self, x, y):
        from disthook import linalg, mvlgamma

        p = self._event_shape[-1]
        return ((y + (p + 1) / 2) * (-linalg.slogdet(-2 * x).logabsdet + _LOG_2 * p)
                + mvlgamma(y + (p + 1) / 2, p))
