"""``torch.fake_quantize_per_tensor_affine`` and ``torch.fake_quantize_per_channel_affine``:
the arguments checked as torch checks them, the values by ``disthook/ops/quantize.py``."""
from __future__ import annotations

import numpy as np

from disthook import _dtype
from disthook.autograd import grad_mode
from disthook.ops.quantize import (
    FakeQuantizePerChannelAffineCachemask,
    FakeQuantizePerTensorAffineCachemask,
)
from disthook.tensor import Tensor

__all__ = ["fake_quantize_per_channel_affine", "fake_quantize_per_tensor_affine"]


def _check_input(input: Tensor) -> None:
    if not isinstance(input, Tensor):
        raise TypeError(f"fake quantization expects a Tensor input, got "
                        f"{type(input).__name__}")
    if not input.dtype.is_floating_point:
        raise NotImplementedError(
            f"fake quantization is defined for floating point tensors, not for "
            f"'{_dtype.scalar_type_name(input.dtype)}'; convert the input with .float() first")


def _check_range(quant_min: int, quant_max: int, zp_min, zp_max) -> None:
    if quant_min > quant_max:
        raise RuntimeError("`quant_min` should be less than or equal to `quant_max`.")
    if zp_min < quant_min or zp_max > quant_max:
        raise RuntimeError("`zero_point` must be between `quant_min` and `quant_max`.")


def _check_no_grad(function: str, **qparams) -> None:
    if not grad_mode.is_grad_enabled():
        return
    for name, t in qparams.items():
        if isinstance(t, Tensor) and t.requires_grad:
            raise RuntimeError(
                f"The function '{function}' is not differentiable with respect to argument "
                f"'{name}'. This input cannot have requires_grad True.")


def fake_quantize_per_tensor_affine(input: Tensor, scale, zero_point, quant_min: int,
                                    quant_max: int) -> Tensor:
    """``input`` rounded to ``scale``'s grid around ``zero_point``, clamped to
    ``[quant_min, quant_max]``, mapped back to floats; the gradient passes where the grid value
    was not clamped. ``scale`` and ``zero_point`` are a float and an int, or two one-element
    tensors (a float zero point is truncated to an integer, as torch does)."""
    _check_input(input)
    if isinstance(scale, Tensor) and isinstance(zero_point, Tensor):
        _check_no_grad("_fake_quantize_per_tensor_affine_cachemask_tensor_qparams",
                       scale=scale, zero_point=zero_point)
    for t in (scale, zero_point):
        if isinstance(t, Tensor) and t.numel() != 1:
            raise RuntimeError(f"a Tensor with {t.numel()} elements cannot be converted to "
                               "Scalar")
    if isinstance(zero_point, float):
        raise TypeError("fake_quantize_per_tensor_affine(): zero_point must be an int or a "
                        f"tensor, got float {zero_point}")
    scale = float(scale.item() if isinstance(scale, Tensor) else scale)
    zero_point = int(zero_point.item() if isinstance(zero_point, Tensor) else zero_point)
    _check_range(quant_min, quant_max, zero_point, zero_point)
    return FakeQuantizePerTensorAffineCachemask.apply(
        input, scale=float(scale), zero_point=int(zero_point), quant_min=int(quant_min),
        quant_max=int(quant_max))


def fake_quantize_per_channel_affine(input: Tensor, scale: Tensor, zero_point: Tensor,
                                     axis: int, quant_min: int, quant_max: int) -> Tensor:
    """Fake quantization with one ``scale`` and ``zero_point`` per slice of ``input`` along
    ``axis``: float32 (or bfloat16) scales, int32 zero points (added after rounding) or float
    or half ones (added before rounding)."""
    _check_input(input)
    _check_no_grad("_fake_quantize_per_channel_affine_cachemask", scale=scale,
                   zero_point=zero_point)
    ndim = max(input.dim(), 1)
    if not -ndim <= axis < ndim:
        raise IndexError(f"Dimension out of range (expected to be in range of "
                         f"[{-ndim}, {ndim - 1}], but got {axis})")
    if scale.dtype not in (_dtype.float32, _dtype.bfloat16):
        raise RuntimeError(f"Scale must be Float or BFloat16, found "
                           f"{_dtype.scalar_type_name(scale.dtype)}")
    if zero_point.dtype not in (_dtype.int32, _dtype.float32, _dtype.float16):
        raise RuntimeError(f"Zero-point must be Int32, Float or Half, found "
                           f"{_dtype.scalar_type_name(zero_point.dtype)}")
    channels = input.shape[axis] if input.dim() else 1
    if not (scale.dim() == 1 and zero_point.dim() == 1
            and scale.numel() == zero_point.numel() == channels):
        raise RuntimeError("dimensions of scale and zero-point are not consistent with input "
                           "tensor")
    if axis < 0:  # (torch reads the channel count at -1, then refuses a negative axis)
        raise RuntimeError("`axis` must be between 0 and number of dimensions of input")
    zp = zero_point.detach().float().numpy()
    _check_range(quant_min, quant_max, zp.min(), zp.max())
    shape = [1] * input.dim()
    if shape:
        shape[axis] = channels
    return FakeQuantizePerChannelAffineCachemask.apply(
        input, scale=scale.detach().float().numpy().reshape(shape),
        zero_point=zp.reshape(shape).astype(np.float32), quant_min=int(quant_min),
        quant_max=int(quant_max), float_zero_point=zero_point.dtype.is_floating_point)
