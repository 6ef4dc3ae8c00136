"""Normalisations of ``nn.functional`` beyond batch / layer / group / instance norm: ``normalize``
(to unit p-norm), ``rms_norm`` and local response normalisation across channels, each a
composition of differentiable ops as in torch."""
from __future__ import annotations

import numpy as np

from disthook._dtype import bfloat16, float16, float32
from disthook._limits import finfo
from disthook.ops import _bf16
from disthook.tensor import Tensor

__all__ = ["local_response_norm", "normalize", "rms_norm"]


def normalize(input: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12,
              out: Tensor | None = None) -> Tensor:
    """``input`` divided by its ``p``-norm along ``dim`` (at least ``eps``)."""
    denom = input.norm(p, dim, keepdim=True).clamp_min(eps).expand_as(input)
    if out is None:
        return input / denom
    return out.copy_(input / denom)


def rms_norm(input: Tensor, normalized_shape, weight: Tensor | None = None,
             eps: float | None = None) -> Tensor:
    """``input / sqrt(mean(input ** 2) + eps)`` over the trailing ``normalized_shape`` dims,
    times ``weight``; ``eps`` defaults to the machine epsilon of the dtype it is computed in
    (float32 for a bfloat16 or float16 input, as torch's)."""
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    n = len(shape)
    if input.ndim < n or tuple(input.shape[input.ndim - n:]) != shape:
        raise RuntimeError(f"Given normalized_shape={list(shape)}, expected input with shape "
                           f"[*, {', '.join(map(str, shape))}], but got input of size"
                           f"{list(input.shape)}")
    if weight is not None and tuple(weight.shape) != shape:
        raise RuntimeError(f"Expected weight to be of same shape as normalized_shape, but got "
                           f"weight of shape {list(weight.shape)} and normalized_shape = "
                           f"{list(shape)}")
    if eps is None:
        half = input.dtype in (bfloat16, float16)
        eps = float(finfo(float32 if half else input.dtype).eps)
    dims = tuple(range(input.ndim - n, input.ndim))
    def normalised(x, *w):
        out = x * (x.pow(2).mean(dim=dims, keepdim=True) + eps).rsqrt()
        return out * w[0] if w else out

    # (torch computes a bfloat16 input's in float32, the weight's product too, and gives the
    # input's dtype whatever the weight's)
    out = _bf16.rounded_once(normalised, input, *(() if weight is None else (weight,)))
    return out


def local_response_norm(input: Tensor, size: int, alpha: float = 1e-4, beta: float = 0.75,
                        k: float = 1.0) -> Tensor:
    """``input / (k + alpha * mean of input ** 2 over a window of ``size`` channels) **
    beta``; the window reaches ``size // 2`` channels back and ``(size - 1) // 2`` ahead,
    zeros beyond the ends."""
    if input.ndim < 3:
        raise ValueError(f"Expected 3D or higher dimensionality input (got {input.ndim} "
                         "dimensions)")
    if input.numel() == 0:
        return input
    return input / (window_sum(input * input, size, size // 2) * (alpha / size) + k).pow(beta)


def window_sum(squares: Tensor, size: int, back: int) -> Tensor:
    """Sum over channels ``c - back .. c - back + size - 1`` of each channel ``c`` (dim 1),
    zero-padded: a band matrix applied along the channel dim."""
    c = squares.shape[1]
    offset = np.arange(c)[None, :] - np.arange(c)[:, None]  # [c, c'] = c' - c
    band = ((offset >= -back) & (offset < size - back)).astype(squares._data.dtype)
    return channel_matmul(squares, band)


def channel_matmul(x: Tensor, matrix: np.ndarray) -> Tensor:
    """``out[:, c] = sum over c' of matrix[c, c'] * x[:, c']`` for a constant matrix."""
    m = Tensor._make(matrix, None, 0)
    return (x.transpose(1, -1) @ m.T).transpose(1, -1)
