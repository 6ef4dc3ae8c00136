"""Fake quantization: a float tensor rounded to the grid of a quantized type and back, as QAT
does it, with the straight-through gradient (passed where the rounded value fell inside
``[quant_min, quant_max]``, zero where it was clamped). Float in, float out: no quantized
tensor is made. torch computes in float32 (float64 for a float64 input) with
``1 / scale`` taken in float32 and rounds half to even (``std::nearbyint``); so does this.
"""
from __future__ import annotations

import numpy as np

from disthook.ops.base import Op


def _fake_quantize(x, scale, zero_point, quant_min, quant_max, float_zero_point: bool):
    """(values, mask) for ``x`` with ``scale`` and ``zero_point`` broadcast against it."""
    work = np.float64 if x.dtype == np.float64 else np.float32
    inv_scale = (np.float32(1.0) / np.asarray(scale, np.float32)).astype(work)
    scale = np.asarray(scale, np.float32).astype(work)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        scaled = x.astype(work, copy=False) * inv_scale
        if float_zero_point:
            zero_point = np.asarray(zero_point, work)
            q = np.rint(scaled + zero_point)
        else:
            zero_point = np.asarray(zero_point, np.int64).astype(work)
            q = np.rint(scaled) + zero_point
        mask = (q >= quant_min) & (q <= quant_max)
        out = (np.clip(q, quant_min, quant_max) - zero_point) * scale
    return out.astype(x.dtype, copy=False), mask


class FakeQuantizePerTensorAffineCachemask(Op):
    """One scale and integer zero point for the whole tensor."""

    @staticmethod
    def forward(ctx, a, scale=1.0, zero_point=0, quant_min=0, quant_max=255):
        out, mask = _fake_quantize(a._data, scale, zero_point, quant_min, quant_max, False)
        ctx.mask = mask
        return out

    @staticmethod
    def backward(ctx, g):
        return g * g.new_tensor(ctx.mask)


class FakeQuantizePerChannelAffineCachemask(Op):
    """A scale and zero point per slice along ``axis`` (arrays shaped to broadcast there);
    a float zero point is added before rounding, an integer one after, as in torch."""

    @staticmethod
    def forward(ctx, a, scale=None, zero_point=None, quant_min=0, quant_max=255,
                float_zero_point=False):
        out, mask = _fake_quantize(a._data, scale, zero_point, quant_min, quant_max,
                                   float_zero_point)
        ctx.mask = mask
        return out

    @staticmethod
    def backward(ctx, g):
        return g * g.new_tensor(ctx.mask)
