"""VonMises(loc, concentration): the circular normal on angles.

Densities use log I0(kappa) = log(i0e(kappa)) + kappa (the exponentially scaled Bessel
function keeps large concentrations finite). Draws are numpy's von Mises sampler on
disthook's stream, in [-pi, pi); like torch's, they carry no gradient.
"""
from __future__ import annotations

import math
from typing import ClassVar

from disthook.distributions import constraints
from disthook.distributions.distribution import (
    Distribution,
    LocationMean,
    broadcast_all,
    from_numpy,
)

__all__ = ["VonMises"]


def _log_i0(x):
    from disthook import special

    return special.i0e(x).log() + x


class VonMises(LocationMean, Distribution):
    arg_constraints: ClassVar[dict] = {"loc": constraints.real,
                                       "concentration": constraints.positive}
    support = constraints.real
    _expand_params: ClassVar[tuple] = ("loc", "concentration")

    def __init__(self, loc, concentration, validate_args: bool | None = None) -> None:
        self.loc, self.concentration = broadcast_all(loc, concentration)
        super().__init__(self.loc.shape, (), validate_args)

    @property
    def variance(self):
        """The circular variance 1 - I1(kappa) / I0(kappa)."""
        from disthook import special

        kappa = self.concentration
        return 1 - (special.i1e(kappa).log() - special.i0e(kappa).log()).exp()

    def sample(self, sample_shape=()):
        import numpy as np

        from disthook.random import gen

        shape = self._extended_shape(sample_shape)
        loc = np.broadcast_to(self.loc.detach()._data.astype(np.float64), shape)
        kappa = np.broadcast_to(self.concentration.detach()._data.astype(np.float64), shape)
        draws = gen().vonmises(0.0, kappa) + loc
        return from_numpy((draws + math.pi) % (2 * math.pi) - math.pi, self.loc)

    def log_prob(self, value):
        self._check_sample(value)
        return (self.concentration * (value - self.loc).cos() - math.log(2 * math.pi)
                - _log_i0(self.concentration))
