"""Activation ops beyond the common ones in ``elementwise``: clipping and shrinking, the
scaled ELU family, log-sigmoid, GLU, PReLU and randomized leaky ReLU.

Each is one graph node under torch's name; its backward is written with Tensor ops so that
it is differentiable again.
"""
from __future__ import annotations

import numpy as np

from disthook.ops.base import Op, floating_kernel, sum_to
from disthook.ops.elementwise import LeakyRelu, MaskedGrad


def _keep(g, mask):
    """``g`` where ``mask`` holds, zero elsewhere (``mask`` a bool Tensor), even where ``g``
    is inf or NaN, as torch's kernels (a product with the mask would give NaN there)."""
    return g.where(mask, g.new_zeros(()))


class Hardtanh(Op):
    """``x`` clipped to ``[min_val, max_val]``; the gradient passes strictly inside."""

    saved_names = ("self",)

    @staticmethod
    def forward(ctx, a, min_val=-1.0, max_val=1.0):
        ctx.save_for_backward(a)
        ctx.bounds = (min_val, max_val)
        x = a._data
        return np.clip(x, min_val, max_val).astype(x.dtype, copy=False)

    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved_tensors
        low, high = ctx.bounds
        return HardtanhGrad.apply(g, a, low=low, high=high)


class HardtanhGrad(MaskedGrad):
    node_name = "HardtanhBackwardBackward0"

    @staticmethod
    def forward(ctx, g, a, low=-1.0, high=1.0):
        x = a._data
        return MaskedGrad.masked(ctx, g, a, {"low": low, "high": high}, (x > low) & (x < high))


class Threshold(Op):
    """``x`` where ``x > threshold``, ``value`` elsewhere."""

    saved_names = ("self",)

    @staticmethod
    def forward(ctx, a, threshold=0.0, value=0.0):
        ctx.save_for_backward(a)
        ctx.threshold = threshold
        x = a._data
        return np.where(x > threshold, x, np.asarray(value, dtype=x.dtype)).astype(x.dtype,
                                                                                   copy=False)

    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved_tensors
        return ThresholdGrad.apply(g, a, threshold=ctx.threshold)


class ThresholdGrad(MaskedGrad):
    node_name = "ThresholdBackwardBackward0"

    @staticmethod
    def forward(ctx, g, a, threshold=0.0):
        return MaskedGrad.masked(ctx, g, a, {"threshold": threshold}, a._data > threshold)


class Hardsigmoid(Op):
    """``relu6(x + 3) / 6``."""

    saved_names = ("self",)

    @staticmethod
    def forward(ctx, a):
        floating_kernel(a, "hardsigmoid_cpu")
        ctx.save_for_backward(a)
        x = a._data
        return (np.clip(x + 3, 0, 6) / 6).astype(x.dtype, copy=False)

    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved_tensors
        return _keep(g, (a > -3) & (a < 3)) / 6


class Hardshrink(Op):
    """``x`` where ``|x| > lambd``, zero elsewhere."""

    saved_names = ("self",)

    @staticmethod
    def forward(ctx, a, lambd=0.5):
        floating_kernel(a, "hardshrink_cpu")
        ctx.save_for_backward(a)
        ctx.lambd = lambd
        x = a._data
        return np.where(np.abs(x) > lambd, x, 0).astype(x.dtype, copy=False)

    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved_tensors
        return _keep(g, (a > ctx.lambd) | (a < -ctx.lambd))


class Softshrink(Op):
    """``x`` moved ``lambd`` towards zero, zero within ``[-lambd, lambd]``."""

    saved_names = ("self",)

    @staticmethod
    def forward(ctx, a, lambd=0.5):
        floating_kernel(a, "softshrink_check")
        ctx.save_for_backward(a)
        ctx.lambd = lambd
        x = a._data
        out = np.where(x > lambd, x - lambd, np.where(x < -lambd, x + lambd, 0))
        return out.astype(x.dtype, copy=False)

    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved_tensors
        return _keep(g, (a > ctx.lambd) | (a < -ctx.lambd))


class LogSigmoid(Op):
    """``log(sigmoid(x)) = -softplus(-x)``, computed without overflow."""

    saved_names = ("self",)

    @staticmethod
    def forward(ctx, a):
        floating_kernel(a, "log_sigmoid_cpu")
        ctx.save_for_backward(a)
        x = a._data
        return (-np.logaddexp(0, -x)).astype(x.dtype, copy=False)

    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved_tensors
        return g * (-a).sigmoid()


class ScaledElu(Op):
    """``scale * x`` where positive, ``scale * alpha * (exp(input_scale * x) - 1)`` elsewhere:
    torch's one ELU kernel behind ``selu`` (and ``celu``, under its own node)."""

    node_name = "EluBackward0"
    saved_names = ("self",)

    @staticmethod
    def forward(ctx, a, alpha=1.0, scale=1.0, input_scale=1.0):
        floating_kernel(a, "elu_cpu")
        ctx.save_for_backward(a)
        ctx.params = (alpha, scale, input_scale)
        x = a._data
        neg = alpha * np.expm1(np.minimum(x, 0) * input_scale)
        return (scale * np.where(x > 0, x, neg)).astype(x.dtype, copy=False)

    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved_tensors
        alpha, scale, input_scale = ctx.params
        neg = (a * input_scale).exp() * (scale * alpha * input_scale)
        return g * a.new_full((), scale).where(a > 0, neg)


class Celu(ScaledElu):
    node_name = "CeluBackward0"


class Glu(Op):
    """``a * sigmoid(b)`` where ``a`` and ``b`` are the two halves of ``dim``."""

    saved_names = ("self",)

    @staticmethod
    def forward(ctx, x, dim=-1):
        ctx.save_for_backward(x)
        ctx.dim = dim
        first, second = np.split(x._data, 2, axis=dim)
        return (first / (1 + np.exp(-second))).astype(x._data.dtype, copy=False)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        first, second = x.chunk(2, ctx.dim)
        s = second.sigmoid()
        from disthook.tensor import cat

        return cat([g * s, g * first * s * (1 - s)], ctx.dim)


def channel_view(weight_shape: tuple, ndim: int) -> tuple:
    """The shape a per-channel weight takes to broadcast against input of ``ndim`` dims
    (channels on dim 1; a one-element weight broadcasts everywhere)."""
    n = int(np.prod(weight_shape))
    if ndim < 2 or n == 1:
        return (n,) if ndim == 1 and n != 1 else ()
    return (n,) + (1,) * (ndim - 2)


class PreluKernel(Op):
    """``x`` where positive, ``weight * x`` elsewhere; ``weight`` one slope per channel."""

    saved_names = ("self", "weight")

    @staticmethod
    def forward(ctx, a, w):
        ctx.save_for_backward(a, w)
        x = a._data
        slope = w._data.reshape(channel_view(w._data.shape, x.ndim))
        return np.where(x > 0, x, slope * x).astype(x.dtype, copy=False)

    @staticmethod
    def backward(ctx, g):
        a, w = ctx.saved_tensors
        slope = w.reshape(channel_view(tuple(w.shape), a.ndim))
        positive = a > 0
        gx = g * a.new_ones(()).where(positive, slope) if ctx.needs_input_grad[0] else None
        gw = None
        if ctx.needs_input_grad[1]:
            gw = (g * a.new_zeros(()).where(positive, a))
            gw = sum_to(gw, slope.shape) if slope.ndim else gw.sum()
            gw = gw.reshape(w.shape)
        return gx, gw


class RreluWithNoise(Op):
    """``x`` where positive, ``noise * x`` elsewhere: ``noise`` drawn per element in
    training, the mean slope in eval (chosen by the caller)."""

    saved_names = ("self", "noise")

    @staticmethod
    def forward(ctx, a, noise=None):
        ctx.save_for_backward(a)
        ctx.noise = noise
        x = a._data
        return np.where(x > 0, x, noise * x).astype(x.dtype, copy=False)

    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved_tensors
        return g * a.new_ones(()).where(a > 0, a.new_tensor(ctx.noise))


# ---- in-place forms: torch records them under nodes of their own ------------------------------

class ThresholdInplace(Threshold):
    node_name = "ThresholdBackward1"


class ScaledEluInplace(ScaledElu):
    node_name = "EluBackward1"


class CeluInplace(Celu):
    node_name = "CeluBackward1"


class RreluWithNoiseInplace(RreluWithNoise):
    node_name = "RreluWithNoiseBackward1"


class LeakyReluInplace(LeakyRelu):
    node_name = "LeakyReluBackward1"


INPLACE = {Threshold: ThresholdInplace, ScaledElu: ScaledEluInplace, Celu: CeluInplace,
           RreluWithNoise: RreluWithNoiseInplace}
