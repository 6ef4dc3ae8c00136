"""Gamma(concentration, rate), Beta(concentration1, concentration0), Dirichlet(concentration).

Draws come from disthook's stream without gradient. torch differentiates them by an
implicit reparameterization whose derivative it approximates with its own series; disthook
does not reproduce that series, so ``rsample`` raises instead of giving another gradient
(``has_rsample`` is False here).
"""
from __future__ import annotations

from typing import ClassVar

from disthook.distributions import constraints
from disthook.distributions.distribution import (
    as_float_tensor,
    broadcast_all,
    finfo,
    from_numpy,
)
from disthook.distributions.exp_family import ExponentialFamily

__all__ = ["Beta", "Chi2", "Dirichlet", "Gamma"]


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


class Dirichlet(ExponentialFamily):
    @property
    def _natural_params(self):
        return (self.concentration,)

    def _log_normalizer(self, x):
        return x.lgamma().sum(-1) - x.sum(-1).lgamma()

    arg_constraints: ClassVar[dict] = {
        "concentration": constraints.independent(constraints.positive, 1)}
    support = constraints.simplex
    _expand_params: ClassVar[tuple] = ("concentration",)

    def __init__(self, concentration, validate_args: bool | None = None) -> None:
        concentration = as_float_tensor(concentration)
        if concentration.dim() < 1:
            raise ValueError("`concentration` parameter must be at least one-dimensional.")
        self.concentration = concentration
        super().__init__(concentration.shape[:-1], concentration.shape[-1:], validate_args)

    @property
    def mean(self):
        return self.concentration / self.concentration.sum(-1, True)

    @property
    def mode(self):
        from disthook import where
        from disthook.nn.functional import one_hot

        above = (self.concentration - 1).clamp(min=0.0)
        total = above.sum(-1, True)
        mode = above / where(total > 0, total, total + 1)  # rows of zeros: see below
        # every concentration below one: the mass piles on the largest one's corner
        corner = one_hot(mode.argmax(-1), self.concentration.shape[-1]).to(mode.dtype)
        all_below = (self.concentration < 1).all(-1, keepdim=True)
        return where(all_below, corner, mode)

    @property
    def variance(self):
        total = self.concentration.sum(-1, True)
        return self.concentration * (total - self.concentration) / (total.pow(2) * (total + 1))

    def rsample(self, sample_shape=()):
        raise _no_rsample(self)

    def sample(self, sample_shape=()):
        import numpy as np

        gammas = _standard_gamma(self.concentration, self._extended_shape(sample_shape))
        draws = gammas / gammas.sum(-1, keepdims=True)
        eps = finfo(self.concentration, "tiny")
        return from_numpy(np.clip(draws, eps, 1 - finfo(self.concentration, "eps")),
                          self.concentration)

    def log_prob(self, value):
        self._check_sample(value)
        c = self.concentration
        return (_xlogy(c - 1.0, value).sum(-1) + c.sum(-1).lgamma() - c.lgamma().sum(-1))

    def entropy(self):
        c = self.concentration
        k = c.shape[-1]
        total = c.sum(-1)
        return (c.lgamma().sum(-1) - total.lgamma() - (k - total) * total.digamma()
                - ((c - 1.0) * c.digamma()).sum(-1))


class Beta(ExponentialFamily):
    """Beta(concentration1, concentration0): the first coordinate of a two-category
    Dirichlet, which holds the parameters (and validates them, as in torch)."""

    arg_constraints: ClassVar[dict] = {"concentration1": constraints.positive,
                       "concentration0": constraints.positive}
    support = constraints.unit_interval

    @property
    def _natural_params(self):
        return (self.concentration1, self.concentration0)

    def _log_normalizer(self, x, y):
        return x.lgamma() + y.lgamma() - (x + y).lgamma()

    def __init__(self, concentration1, concentration0,
                 validate_args: bool | None = None) -> None:
        from disthook import stack

        concentration1, concentration0 = broadcast_all(concentration1, concentration0)
        self._dirichlet = Dirichlet(stack([concentration1, concentration0], -1),
                                    validate_args=validate_args)
        super().__init__(self._dirichlet.batch_shape, (), validate_args)

    def expand(self, batch_shape, _instance=None):
        new = type(self).__new__(type(self)) if _instance is None else _instance
        new._dirichlet = self._dirichlet.expand(batch_shape)
        return self._expanded(new, batch_shape)

    @property
    def concentration1(self):
        return self._dirichlet.concentration[..., 0]

    @property
    def concentration0(self):
        return self._dirichlet.concentration[..., 1]

    @property
    def mean(self):
        return self.concentration1 / (self.concentration1 + self.concentration0)

    @property
    def mode(self):
        return self._dirichlet.mode[..., 0]

    @property
    def variance(self):
        total = self.concentration1 + self.concentration0
        return self.concentration1 * self.concentration0 / (total.pow(2) * (total + 1))

    def rsample(self, sample_shape=()):
        raise _no_rsample(self)

    def sample(self, sample_shape=()):
        return self._dirichlet.sample(sample_shape)[..., 0]

    def log_prob(self, value):
        from disthook import stack

        self._check_sample(value)
        return self._dirichlet.log_prob(stack([value, 1.0 - value], -1))

    def entropy(self):
        return self._dirichlet.entropy()


class Chi2(Gamma):
    """Chi2(df) = Gamma(df / 2, 1 / 2)."""

    arg_constraints: ClassVar[dict] = {"df": constraints.positive}

    def __init__(self, df, validate_args: bool | None = None) -> None:
        (df,) = broadcast_all(df)
        super().__init__(0.5 * df, 0.5, validate_args=validate_args)

    @property
    def df(self):
        return self.concentration * 2
