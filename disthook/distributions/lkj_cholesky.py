"""LKJCholesky(dim, concentration): the LKJ distribution (Lewandowski, Kurowicka and Joe,
2009) over Cholesky factors of correlation matrices, drawn by the onion method."""
from __future__ import annotations

import math
from typing import ClassVar

import numpy as np

from disthook.distributions import constraints
from disthook.distributions.distribution import Distribution, as_float_tensor, finfo, from_numpy

__all__ = ["LKJCholesky"]


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
