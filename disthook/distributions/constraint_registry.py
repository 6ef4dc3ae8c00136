"""``biject_to(constraint)`` and ``transform_to(constraint)``: a transform from the reals
(unconstrained parameters) onto the set a constraint describes. ``biject_to`` gives a
bijection (for HMC-style reparameterization), ``transform_to`` any covering map (for
optimizing constrained parameters); both take ``register(constraint, factory)``.
"""
from __future__ import annotations

import numbers

from disthook.distributions import constraints, transforms

__all__ = ["ConstraintRegistry", "biject_to", "transform_to"]


class ConstraintRegistry:
    """Constraint classes to factories ``factory(constraint) -> Transform``."""

    def __init__(self) -> None:
        self._registry: dict = {}

    def register(self, constraint, factory=None):
        """Register ``factory`` for ``constraint`` (an instance or a Constraint subclass);
        without ``factory``, a decorator."""
        if factory is None:
            return lambda factory: self.register(constraint, factory)
        if isinstance(constraint, constraints.Constraint):
            constraint = type(constraint)
        if not isinstance(constraint, type) or not issubclass(constraint,
                                                              constraints.Constraint):
            raise TypeError("Expected constraint to be either a Constraint subclass or "
                            f"instance, but got {constraint}")
        self._registry[constraint] = factory
        return factory

    def __call__(self, constraint):
        for cls in type(constraint).__mro__:
            if cls in self._registry:
                return self._registry[cls](constraint)
        raise NotImplementedError(f"Cannot transform {type(constraint).__name__} constraints")


biject_to = ConstraintRegistry()
transform_to = ConstraintRegistry()


def _real(constraint):
    return transforms.identity_transform


def _greater_than(constraint):
    return transforms.ComposeTransform([transforms.ExpTransform(),
                                        transforms.AffineTransform(constraint.lower_bound, 1)])


def _less_than(constraint):
    return transforms.ComposeTransform([transforms.ExpTransform(),
                                        transforms.AffineTransform(constraint.upper_bound, -1)])


def _interval(constraint):
    low, high = constraint.lower_bound, constraint.upper_bound
    if isinstance(low, numbers.Number) and isinstance(high, numbers.Number) \
            and low == 0 and high == 1:
        return transforms.SigmoidTransform()
    return transforms.ComposeTransform([transforms.SigmoidTransform(),
                                        transforms.AffineTransform(low, high - low)])


def _independent(registry):
    def factory(constraint):
        return transforms.IndependentTransform(registry(constraint.base_constraint),
                                               constraint.reinterpreted_batch_ndims)
    return factory


for _registry in (biject_to, transform_to):
    _registry.register(constraints.real, _real)
    _registry.register(constraints.greater_than, _greater_than)
    _registry.register(constraints.less_than, _less_than)
    _registry.register(constraints.interval, _interval)
    _registry.register(constraints.independent, _independent(_registry))
def _cat(registry):
    def factory(constraint):
        return transforms.CatTransform([registry(c) for c in constraint.cseq],
                                       constraint.dim, constraint.lengths)
    return factory


def _stack(registry):
    def factory(constraint):
        return transforms.StackTransform([registry(c) for c in constraint.cseq],
                                         constraint.dim)
    return factory


def _corr_cholesky(constraint):
    return transforms.CorrCholeskyTransform()


for _registry in (biject_to, transform_to):
    _registry.register(constraints.corr_cholesky, _corr_cholesky)
    _registry.register(constraints.cat, _cat(_registry))
    _registry.register(constraints.stack, _stack(_registry))
biject_to.register(constraints.simplex, lambda constraint: transforms.StickBreakingTransform())
transform_to.register(constraints.simplex, lambda constraint: transforms.SoftmaxTransform())
# covering maps without an inverse on the whole set: transform_to only, as in torch
transform_to.register(constraints.lower_cholesky,
                      lambda constraint: transforms.LowerCholeskyTransform())
transform_to.register(constraints.positive_definite,
                      lambda constraint: transforms.PositiveDefiniteTransform())
