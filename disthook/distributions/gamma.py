"""Gamma(concentration, rate), Beta(concentration1, concentration0), Dirichlet(concentration).

Draws come from disthook's stream without gradient. torch differentiates them by an
implicit reparameterization whose derivative it approximates with its own series; disthook
does not reproduce that series, so ``rsample`` raises instead of giving another gradient
(``has_rsample`` is False here).
"""
from __future__ import annotations

from typing import ClassVar

from disthook.distributions import constraints
from disthook.distributions.distribution import as_float_tensor, broadcast_all, finfo, from_numpy
from disthook.distributions.exp_family import ExponentialFamily

__all__ = ["Gamma"]


def _no_rsample(dist) -> NotImplementedError:
    return NotImplementedError(
        f"{type(dist).__name__}.rsample is not implemented in disthook: torch differentiates "
        "its draws by an implicit reparameterization that disthook does not reproduce; use "
        "sample() (no gradient) with a score-function estimator such as log_prob(x) * reward")


def _standard_gamma(concentration, shape):
    """Gamma(concentration, 1) draws of ``shape`` as numpy, kept above the dtype's tiny."""
    import numpy as np

    from disthook.random import gen

    alpha = np.broadcast_to(concentration.detach()._data.astype(np.float64), shape)
    return np.maximum(gen().standard_gamma(alpha), finfo(concentration, "tiny"))


class Gamma(ExponentialFamily):
    _mean_carrier_measure = 0

    @property
    def _natural_params(self):
        return (self.concentration - 1, -self.rate)

    def _log_normalizer(self, x, y):
        return (x + 1).lgamma() + (x + 1) * (-y.reciprocal()).log()

    arg_constraints: ClassVar[dict] = {"concentration": constraints.positive,
                                       "rate": constraints.positive}
    support = constraints.nonnegative
    _expand_params: ClassVar[tuple] = ("concentration", "rate")

    def __init__(self, concentration, rate, validate_args: bool | None = None) -> None:
        self.concentration, self.rate = broadcast_all(concentration, rate)
        super().__init__(self.concentration.shape, (), validate_args)

    @property
    def mean(self):
        return self.concentration / self.rate

    @property
    def mode(self):
        return ((self.concentration - 1) / self.rate).clamp(min=0)

    @property
    def variance(self):
        return self.concentration / self.rate.pow(2)

    def rsample(self, sample_shape=()):
        raise _no_rsample(self)

    def sample(self, sample_shape=()):
        import numpy as np

        draws = _standard_gamma(self.concentration, self._extended_shape(sample_shape))
        draws = draws / self.rate.detach()._data.astype(np.float64)
        return from_numpy(np.maximum(draws, finfo(self.rate, "tiny")), self.rate)

    def log_prob(self, value):
        self._check_sample(value)
        value = as_float_tensor(value, self.rate)
        return (_xlogy(self.concentration, self.rate) + _xlogy(self.concentration - 1, value)
                - self.rate * value - self.concentration.lgamma())

    def cdf(self, value):
        from disthook import special

        self._check_sample(value)
        return special.gammainc(self.concentration, self.rate * value)

    def entropy(self):
        c = self.concentration
        return c - self.rate.log() + c.lgamma() + (1.0 - c) * c.digamma()


def _xlogy(x, y):
    from disthook import special

    return special.xlogy(x, y)
