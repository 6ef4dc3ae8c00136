"""ExponentialFamily: densities p(x) = h(x) exp(<theta, t(x)> - F(theta)).

A subclass gives its natural parameters theta (``_natural_params``), the log normalizer F
(``_log_normalizer``) and E[log h(x)] (``_mean_carrier_measure``); the entropy, and the KL
divergence between two members of one family, then follow from F and its gradient (a
Bregman divergence), computed with disthook's autograd.
"""
from __future__ import annotations

from disthook.distributions.distribution import Distribution

__all__ = ["ExponentialFamily"]


def _differentiable(param):
    """``param`` itself when it is in a graph (so gradients reach the parameters it came
    from), else a leaf that requires grad (so grad F(theta) can be taken)."""
    return param if param.requires_grad else param.detach().requires_grad_()


class ExponentialFamily(Distribution):
    @property
    def _natural_params(self):
        raise NotImplementedError(f"{type(self).__name__} does not give its natural "
                                  "parameters (_natural_params)")

    def _log_normalizer(self, *natural_params):
        raise NotImplementedError(f"{type(self).__name__} does not give its log normalizer "
                                  "(_log_normalizer)")

    @property
    def _mean_carrier_measure(self):
        raise NotImplementedError(f"{type(self).__name__} does not give the mean of its "
                                  "carrier measure (_mean_carrier_measure)")

    def entropy(self):
        """H = F(theta) - <theta, grad F(theta)> - E[log h(x)]. Differentiable in the
        parameters (torch's detaches theta here, so its gradient is missing)."""
        from disthook import autograd

        params = [_differentiable(p) for p in self._natural_params]
        log_normalizer = self._log_normalizer(*params)
        grads = autograd.grad(log_normalizer.sum(), params, create_graph=True)
        result = log_normalizer - self._mean_carrier_measure
        for param, grad in zip(params, grads):
            result = result - (param * grad).reshape(tuple(self._batch_shape) + (-1,)).sum(-1)
        return result
