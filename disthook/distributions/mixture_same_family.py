"""MixtureSameFamily(Categorical, components): a mixture of k distributions of one family,
the components being the rightmost batch dim of ``component_distribution``."""
from __future__ import annotations

from typing import ClassVar

from disthook.distributions import constraints
from disthook.distributions.categorical import Categorical
from disthook.distributions.distribution import Distribution

__all__ = ["MixtureSameFamily"]


class MixtureSameFamily(Distribution):
    arg_constraints: ClassVar[dict] = {}
    has_rsample = False

    def __init__(self, mixture_distribution, component_distribution,
                 validate_args: bool | None = None) -> None:
        if not isinstance(mixture_distribution, Categorical):
            raise ValueError(  # noqa: TRY004 (torch's type and text)
                " The Mixture distribution needs to be an  instance of "
                             "torch.distributions.Categorical")
        if not isinstance(component_distribution, Distribution):
            raise ValueError(  # noqa: TRY004 (torch's type and text)
                "The Component distribution needs to be an instance of "
                             "torch.distributions.Distribution")
        mixture_batch = mixture_distribution.batch_shape
        component_batch = component_distribution.batch_shape[:-1]
        for a, b in zip(reversed(mixture_batch), reversed(component_batch)):
            if a != 1 and b != 1 and a != b:
                raise ValueError(f"`mixture_distribution.batch_shape` ({mixture_batch}) is "
                                 f"not compatible with `component_distribution.batch_shape`"
                                 f"({component_batch})")
        k_mixture = mixture_distribution.logits.shape[-1]
        k_component = component_distribution.batch_shape[-1]
        if k_mixture != k_component:
            raise ValueError(f"`mixture_distribution component` ({k_mixture}) does not equal "
                             f"`component_distribution.batch_shape[-1]` ({k_component})")
        self._mixture_distribution = mixture_distribution
        self._component_distribution = component_distribution
        self._num_component = k_mixture
        self._event_ndims = len(component_distribution.event_shape)
        super().__init__(component_batch, component_distribution.event_shape, validate_args)

    def expand(self, batch_shape, _instance=None):
        from disthook.tensor import Size

        batch_shape = Size(batch_shape)
        new = type(self).__new__(type(self)) if _instance is None else _instance
        new._component_distribution = self._component_distribution.expand(
            batch_shape + (self._num_component,))
        new._mixture_distribution = self._mixture_distribution.expand(batch_shape)
        new._num_component, new._event_ndims = self._num_component, self._event_ndims
        return self._expanded(new, batch_shape)

    @constraints.dependent_property
    def support(self):
        return constraints.MixtureSameFamilyConstraint(self._component_distribution.support)

    @property
    def mixture_distribution(self):
        return self._mixture_distribution

    @property
    def component_distribution(self):
        return self._component_distribution

    def _pad(self, x):
        """``x`` with a component dim before its event dims."""
        return x.unsqueeze(-1 - self._event_ndims)

    def _mixture_weights(self):
        """The mixture's probs shaped to multiply the components' per-component values."""
        probs = self._mixture_distribution.probs
        missing = len(self.batch_shape) - len(self._mixture_distribution.batch_shape)
        shape = (tuple(probs.shape[:-1]) + (1,) * missing + tuple(probs.shape[-1:])
                 + (1,) * self._event_ndims)
        return probs.reshape(shape)

    @property
    def mean(self):
        component_dim = -1 - self._event_ndims
        return (self._mixture_weights() * self._component_distribution.mean).sum(component_dim)

    @property
    def variance(self):
        # total variance: the mean of the variances plus the variance of the means
        component_dim = -1 - self._event_ndims
        weights = self._mixture_weights()
        within = (weights * self._component_distribution.variance).sum(component_dim)
        spread = self._component_distribution.mean - self._pad(self.mean)
        return within + (weights * spread.pow(2)).sum(component_dim)

    def cdf(self, x):
        cdf = self._component_distribution.cdf(self._pad(x))
        return (cdf * self._mixture_distribution.probs).sum(-1)

    def log_prob(self, x):
        self._check_sample(x)
        per_component = self._component_distribution.log_prob(self._pad(x))
        log_weights = self._mixture_distribution.logits.log_softmax(-1)
        return (per_component + log_weights).logsumexp(-1)

    def sample(self, sample_shape=()):
        import numpy as np

        from disthook.tensor import Tensor

        sample_shape = (sample_shape,) if isinstance(sample_shape, int) else tuple(sample_shape)
        which = self._mixture_distribution.sample(sample_shape)._data
        draws = self._component_distribution.sample(sample_shape)._data
        missing = len(self.batch_shape) - len(self._mixture_distribution.batch_shape)
        lead = len(sample_shape)
        which = which.reshape(which.shape[:lead] + (1,) * missing + which.shape[lead:])
        which = np.broadcast_to(which, sample_shape + tuple(self.batch_shape))
        axis = which.ndim  # the component dim of the draws
        index = which.reshape(which.shape + (1,) * (1 + self._event_ndims))
        chosen = np.take_along_axis(draws, np.broadcast_to(
            index, which.shape + (1,) + draws.shape[axis + 1:]), axis=axis)
        return Tensor._make(np.squeeze(chosen, axis=axis), None, 0)

    def __repr__(self) -> str:
        return (f"MixtureSameFamily(\n  {self._mixture_distribution},\n"
                f"  {self._component_distribution})")
