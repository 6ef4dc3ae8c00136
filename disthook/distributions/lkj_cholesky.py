"""Correlation matrices: CorrCholeskyTransform (unconstrained vectors to Cholesky factors of
correlation matrices) and LKJCholesky(dim, concentration), the LKJ distribution over those
factors (Lewandowski, Kurowicka and Joe, 2009), drawn by the onion method."""
from __future__ import annotations

import math
from typing import ClassVar

import numpy as np

from disthook.distributions import constraints
from disthook.distributions.distribution import Distribution, as_float_tensor, finfo, from_numpy
from disthook.distributions.transforms import Transform
from disthook.distributions.utils import tril_matrix_to_vec, vec_to_tril_matrix

__all__ = ["CorrCholeskyTransform", "LKJCholesky"]


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
        from disthook.nn.functional import pad

        eps = finfo(x, "eps")
        r = vec_to_tril_matrix(x.tanh().clamp(min=-1 + eps, max=1 - eps), -1)
        # each entry keeps the share of its row's unit norm that the entries before it left
        left = (1 - r.pow(2)).sqrt().cumprod(-1)
        return (r + eye(r.shape[-1], dtype=r.dtype)) * pad(left[..., :-1], (1, 0), value=1.0)

    def _inverse(self, y):
        from disthook.nn.functional import pad

        left = pad((1 - (y * y).cumsum(-1))[..., :-1], (1, 0), value=1.0)
        t = tril_matrix_to_vec(y, -1) / tril_matrix_to_vec(left, -1).sqrt()
        return ((t).log1p() - (-t).log1p()) / 2

    def log_abs_det_jacobian(self, x, y):
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


class LKJCholesky(Distribution):
    """The Cholesky factor L of a correlation matrix with density proportional to
    det(L L^T) ** (concentration - 1)."""

    arg_constraints: ClassVar[dict] = {"concentration": constraints.positive}
    support = constraints.corr_cholesky
    _expand_params: ClassVar[tuple] = ("concentration",)

    def __init__(self, dim: int, concentration=1.0, validate_args: bool | None = None) -> None:
        if dim < 2:
            raise ValueError(f"Expected dim to be an integer greater than or equal to 2. "
                             f"Found dim={dim}.")
        self.dim = dim
        self.concentration = as_float_tensor(concentration)
        super().__init__(self.concentration.shape, (dim, dim), validate_args)

    def sample(self, sample_shape=()):
        from disthook.random import gen

        shape = tuple(self._extended_shape(sample_shape))
        batch = shape[:-2]
        conc = np.broadcast_to(self.concentration.detach()._data.astype(np.float64), batch)
        # onion method (LKJ 2009, sec. 3.2): row i >= 1 of the factor is sqrt(y) times a
        # uniform direction in its i entries, y ~ Beta(i / 2, c + (d - 1 - i) / 2); row 0 is
        # e_0 (its draw below is discarded). torch 2.13 draws Beta(i - 1/2, ...) instead,
        # which is right only for i = 1: its correlations in rows 2.. are too spread.
        rows = np.arange(self.dim, dtype=np.float64)
        a = np.maximum(rows, 1.0) / 2
        b = (conc + 0.5 * (self.dim - 1))[..., None] - rows / 2
        b = np.maximum(b, 0.5)  # row 0 only, whose draw is unused
        rng = gen()
        y = rng.beta(np.broadcast_to(a, b.shape), b)[..., None]
        normal = np.tril(rng.standard_normal(shape), -1)
        norms = np.linalg.norm(normal, axis=-1, keepdims=True)
        direction = np.divide(normal, norms, out=np.zeros_like(normal), where=norms > 0)
        direction[..., 0, :] = 0.0
        w = np.sqrt(y) * direction
        tiny = finfo(self.concentration, "tiny")
        diag = np.sqrt(np.maximum(1 - (w ** 2).sum(-1), tiny))
        w = w + diag[..., None] * np.eye(self.dim)
        return from_numpy(w, self.concentration)

    def log_prob(self, value):
        from disthook import arange, mvlgamma

        self._check_sample(value)
        diag = value.diagonal(dim1=-1, dim2=-2)[..., 1:]
        order = (2 * (self.concentration - 1).unsqueeze(-1) + self.dim
                 - arange(2, self.dim + 1, dtype=self.concentration.dtype))
        unnormalized = (order * diag.log()).sum(-1)
        d1 = self.dim - 1
        alpha = self.concentration + 0.5 * d1
        normalizer = (0.5 * d1 * math.log(math.pi) + mvlgamma(alpha - 0.5, d1)
                      - alpha.lgamma() * d1)
        return unnormalized - normalizer
