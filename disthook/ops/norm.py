"""Normalisation: batch norm (per channel, over batch and spatial dims), layer norm (per
sample, over the trailing dims) and group norm (per sample and group of channels), each one
fused op.

The forward is numpy. The backward is written with Tensor ops: without ``create_graph``
it uses the statistics kept from forward; with it, it recomputes them from the saved input
with differentiable ops, so second derivatives are exact.
"""
from __future__ import annotations

import numpy as np

from disthook.autograd import grad_mode
from disthook.ops.base import Op
from disthook.ops.conv import absent
from disthook.ops.reduce import mean_array


def moments(x: np.ndarray, axes: tuple) -> tuple:
    """(mean, biased variance) over ``axes``, kept as size-1 dims."""
    mean = mean_array(x, axes, True)
    centred = x - mean
    var = mean_array(centred * centred, axes, True)
    return mean, var


def _const(array):
    from disthook.tensor import Tensor

    return Tensor._make(array, None, 0)


def affine_operands(x, weight, bias) -> tuple:
    """(weight, bias) as op inputs: like torch's nodes these ops always have three inputs,
    an absent one is an empty placeholder that takes no gradient."""
    return (absent(x) if weight is None else weight, absent(x) if bias is None else bias)


def _normalize_backward(ctx, g, axes: tuple, param_axes: tuple, x=None, w=None):
    """Gradients of ``y = (x - mean) * invstd * w + b`` where mean and invstd are batch
    statistics over ``axes`` (``ctx.batch_stats``) or constants. ``x`` and ``w`` are the
    saved ones unless given (group norm passes them in its grouped shape)."""
    if x is None:
        x, w = ctx.saved_tensors
    need = ctx.needs_input_grad
    if ctx.batch_stats and grad_mode.is_grad_enabled():
        mean = x.mean(dim=axes, keepdim=True)
        var = (x - mean).square().mean(dim=axes, keepdim=True)
        invstd = (var + ctx.eps).rsqrt()
    else:
        mean, invstd = _const(ctx.mean), _const(ctx.invstd)
    xhat = (x - mean) * invstd
    grads = []
    if need[0]:
        gxhat = g if w is None else g * w.reshape(ctx.param_shape)
        if ctx.batch_stats:
            gx = invstd * (gxhat - gxhat.mean(dim=axes, keepdim=True)
                           - xhat * (gxhat * xhat).mean(dim=axes, keepdim=True))
        else:
            gx = gxhat * invstd
        grads.append(gx)
    else:
        grads.append(None)
    grads.append(_sum_to_param(g * xhat, param_axes, w.shape) if need[1] else None)
    grads.append(_sum_to_param(g, param_axes, ctx.bias_shape) if need[2] else None)
    return tuple(grads)


def _sum_to_param(t, axes: tuple, shape):
    return (t.sum(dim=axes) if axes else t).reshape(shape)


class NativeBatchNorm(Op):
    """``(x - mean) * invstd * weight + bias`` per channel (dim 1). ``mean`` and ``invstd``
    are the batch's (``training``) or the running statistics, computed by the caller, which
    also updates the running buffers."""

    @staticmethod
    def forward(ctx, x, weight, bias, mean, invstd, training, eps, has_weight, has_bias):
        xd = x._data
        shape = (1, xd.shape[1]) + (1,) * (xd.ndim - 2)
        mean, invstd = mean.reshape(shape), invstd.reshape(shape)
        if ctx.needs_input_grad:
            ctx.save_for_backward(x, weight if has_weight else None)
            ctx.mean, ctx.invstd, ctx.eps = mean, invstd, eps
            ctx.batch_stats, ctx.param_shape = training, shape
            ctx.bias_shape = bias._data.shape
        y = (xd - mean) * invstd
        if has_weight:
            y *= weight._data.reshape(shape)
        if has_bias:
            y += bias._data.reshape(shape)
        return y.astype(xd.dtype, copy=False)

    @staticmethod
    def backward(ctx, g):
        axes = (0, *range(2, g.ndim))
        return _normalize_backward(ctx, g, axes, axes)


class NativeLayerNorm(Op):
    """``(x - mean) * invstd * weight + bias`` with statistics over the last
    ``normalized_ndim`` dims of each sample; weight and bias have those dims' shape."""

    @staticmethod
    def forward(ctx, x, weight, bias, normalized_ndim, eps, has_weight, has_bias):
        xd = x._data
        axes = tuple(range(xd.ndim - normalized_ndim, xd.ndim))
        mean, var = moments(xd, axes)
        invstd = 1 / np.sqrt(var + eps)
        if ctx.needs_input_grad:
            ctx.save_for_backward(x, weight if has_weight else None)
            ctx.mean, ctx.invstd, ctx.eps = mean, invstd, eps
            ctx.batch_stats = True
            ctx.param_shape = ctx.bias_shape = xd.shape[xd.ndim - normalized_ndim:]
        y = (xd - mean) * invstd
        if has_weight:
            y *= weight._data
        if has_bias:
            y += bias._data
        return y.astype(xd.dtype, copy=False)

    @staticmethod
    def backward(ctx, g):
        n = len(ctx.param_shape)
        axes = tuple(range(g.ndim - n, g.ndim))
        lead = tuple(range(g.ndim - n))
        return _normalize_backward(ctx, g, axes, lead)


class NativeGroupNorm(Op):
    """``(x - mean) * invstd * weight + bias`` with statistics per sample over each group of
    ``C / group`` channels (and all spatial dims); weight and bias per channel."""

    @staticmethod
    def forward(ctx, x, weight, bias, group, eps, has_weight, has_bias):
        xd = x._data
        n, c = xd.shape[:2]
        grouped = (n, group, c // group) + xd.shape[2:]
        param_shape = (1, group, c // group) + (1,) * (xd.ndim - 2)
        xg = xd.reshape(grouped)
        mean, var = moments(xg, tuple(range(2, xg.ndim)))
        invstd = 1 / np.sqrt(var + eps)
        if ctx.needs_input_grad:
            ctx.save_for_backward(x, weight if has_weight else None)
            ctx.mean, ctx.invstd, ctx.eps = mean, invstd, eps
            ctx.batch_stats = True
            ctx.grouped, ctx.param_shape = grouped, param_shape
            ctx.bias_shape = bias._data.shape
        y = (xg - mean) * invstd
        if has_weight:
            y *= weight._data.reshape(param_shape)
        if has_bias:
            y += bias._data.reshape(param_shape)
        return y.reshape(xd.shape).astype(xd.dtype, copy=False)

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        shape = x.shape
        gg = g.reshape(ctx.grouped)
        axes = tuple(range(2, gg.ndim))
        grads = _normalize_backward(ctx, gg, axes, (0, *range(3, gg.ndim)),
                                    x=x.reshape(ctx.grouped), w=w)
        gx = grads[0].reshape(shape) if grads[0] is not None else None
        return (gx, *grads[1:])
