"""TransformedDistribution(base, transforms): draws of ``base`` pushed through the
transforms; densities by the change of variables. LogNormal and HalfNormal are two."""
from __future__ import annotations

import math
from typing import ClassVar

from disthook.distributions import constraints
from disthook.distributions.distribution import Distribution, sum_rightmost
from disthook.distributions.independent import Independent
from disthook.distributions.transforms import AbsTransform, ComposeTransform, Transform

__all__ = ["HalfDistribution", "TransformedDistribution"]


class TransformedDistribution(Distribution):
    arg_constraints: ClassVar[dict] = {}

    def __init__(self, base_distribution, transforms, validate_args: bool | None = None):
        if isinstance(transforms, Transform):
            self.transforms = [transforms]
        elif isinstance(transforms, list):
            if not all(isinstance(t, Transform) for t in transforms):
                raise ValueError("transforms must be a Transform or a list of Transforms")
            self.transforms = transforms
        else:
            raise ValueError(  # noqa: TRY004 (torch raises ValueError)
                f"transforms must be a Transform or list, but was {transforms}")
        base_shape = tuple(base_distribution.batch_shape) + tuple(base_distribution.event_shape)
        base_event_dim = len(base_distribution.event_shape)
        transform = ComposeTransform(self.transforms)
        domain_event_dim = transform.domain.event_dim
        if len(base_shape) < domain_event_dim:
            raise ValueError(f"base_distribution needs to have shape with size at least "
                             f"{domain_event_dim}, but got {base_distribution.batch_shape}.")
        forward_shape = tuple(transform.forward_shape(base_shape))
        expanded = tuple(transform.inverse_shape(forward_shape))
        if expanded != base_shape:  # a transform's parameters widen the batch
            base_distribution = base_distribution.expand(expanded[:len(expanded)
                                                                  - base_event_dim])
        if domain_event_dim > base_event_dim:
            base_distribution = Independent(base_distribution,
                                            domain_event_dim - base_event_dim)
        self.base_dist = base_distribution
        change = transform.codomain.event_dim - domain_event_dim
        event_dim = max(transform.codomain.event_dim, base_event_dim + change)
        cut = len(forward_shape) - event_dim
        super().__init__(forward_shape[:cut], forward_shape[cut:], validate_args)

    def expand(self, batch_shape, _instance=None):
        new = type(self).__new__(type(self)) if _instance is None else _instance
        new.__dict__.update(self.__dict__)
        shape = tuple(batch_shape) + tuple(self.event_shape)
        for transform in reversed(self.transforms):
            shape = tuple(transform.inverse_shape(shape))
        base_batch = shape[:len(shape) - len(self.base_dist.event_shape)]
        new.base_dist = self.base_dist.expand(base_batch)
        for name in self._expand_params:  # a subclass's own parameters
            new.__dict__[name] = self.__dict__[name].expand(tuple(batch_shape))
        return self._expanded(new, batch_shape)

    @constraints.dependent_property(is_discrete=False)
    def support(self):
        if not self.transforms:
            return self.base_dist.support
        support = self.transforms[-1].codomain
        if len(self.event_shape) > support.event_dim:
            support = constraints.independent(support, len(self.event_shape)
                                              - support.event_dim)
        return support

    @property
    def has_rsample(self):
        return self.base_dist.has_rsample

    def sample(self, sample_shape=()):
        from disthook.autograd import grad_mode

        with grad_mode.no_grad():
            x = self.base_dist.sample(sample_shape)
            for transform in self.transforms:
                x = transform(x)
            return x

    def rsample(self, sample_shape=()):
        x = self.base_dist.rsample(sample_shape)
        for transform in self.transforms:
            x = transform(x)
        return x

    def log_prob(self, value):
        """log p(y) = log p_base(x) - sum of log |dy/dx| along the way back to x."""
        self._check_sample(value)
        event_dim = len(self.event_shape)
        log_prob = 0.0
        y = value
        for transform in reversed(self.transforms):
            x = transform.inv(y)
            event_dim += transform.domain.event_dim - transform.codomain.event_dim
            log_prob = log_prob - sum_rightmost(transform.log_abs_det_jacobian(x, y),
                                                event_dim - transform.domain.event_dim)
            y = x
        return log_prob + sum_rightmost(self.base_dist.log_prob(y),
                                        event_dim - len(self.base_dist.event_shape))

    def _monotonize_cdf(self, value):
        """``value`` or ``1 - value`` as the transforms increase or decrease."""
        sign = 1
        for transform in self.transforms:
            sign = sign * transform.sign
        if isinstance(sign, int) and sign == 1:
            return value
        return sign * (value - 0.5) + 0.5

    def cdf(self, value):
        for transform in self.transforms[::-1]:
            value = transform.inv(value)
        if self._validate_args:
            self.base_dist._validate_sample(value)
        return self._monotonize_cdf(self.base_dist.cdf(value))

    def icdf(self, value):
        value = self.base_dist.icdf(self._monotonize_cdf(value))
        for transform in self.transforms:
            value = transform(value)
        return value


class HalfDistribution(TransformedDistribution):
    """|X| for X symmetric about 0 with a ``scale`` (HalfNormal, HalfCauchy): the density
    doubles on the nonnegative half and is zero below it."""

    arg_constraints: ClassVar[dict] = {"scale": constraints.positive}
    support = constraints.nonnegative
    has_rsample = True

    def __init__(self, symmetric_base, validate_args: bool | None = None) -> None:
        super().__init__(symmetric_base, AbsTransform(), validate_args=validate_args)

    @property
    def scale(self):
        return self.base_dist.scale

    @property
    def mode(self):
        from disthook import zeros_like

        return zeros_like(self.scale)

    def log_prob(self, value):
        from disthook import full_like, where

        self._check_sample(value)
        log_prob = self.base_dist.log_prob(value) + math.log(2)
        return where(value >= 0, log_prob, full_like(log_prob, -math.inf))

    def cdf(self, value):
        self._check_sample(value)
        return 2 * self.base_dist.cdf(value) - 1

    def icdf(self, prob):
        return self.base_dist.icdf((prob + 1) / 2)

    def entropy(self):
        return self.base_dist.entropy() - math.log(2)
