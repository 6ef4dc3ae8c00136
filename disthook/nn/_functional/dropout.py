"""Dropout beyond elementwise ``dropout``: whole channels (``dropout1d/2d/3d``), and alpha
dropout, which keeps a SELU network's mean and variance (elementwise or per channel). The
masks come from disthook's generator."""
from __future__ import annotations

import warnings

import numpy as np

from disthook import random
from disthook.tensor import Tensor

__all__ = ["alpha_dropout", "dropout1d", "dropout2d", "dropout3d", "feature_alpha_dropout"]

SELU_NEGATIVE_LIMIT = 1.7580993408473766  # -scale * alpha of SELU: where its output saturates


def _check_p(p: float) -> None:
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")


def _keep_mask(input: Tensor, p: float, per_channel: bool) -> np.ndarray:
    """1 where kept, 0 where dropped: one draw per element, or per (sample, channel)."""
    shape = tuple(input.shape[:2]) + (1,) * (input.ndim - 2) if per_channel else input.shape
    return (random.gen().random(shape) >= p).astype(input._data.dtype)


def _const(array: np.ndarray) -> Tensor:
    return Tensor._make(np.asarray(array), None, 0)


def _channel_dropout(input: Tensor, p: float, training: bool, inplace: bool) -> Tensor:
    """Zero whole channels (dim 1) with probability ``p`` and scale the rest."""
    _check_p(p)
    if not training or p == 0.0:
        return input
    keep = _keep_mask(input, p, per_channel=True)
    scale = keep * np.asarray(0.0 if p == 1.0 else 1 / (1 - p), dtype=keep.dtype)
    return input.mul_(_const(scale)) if inplace else input * _const(scale)


def _unbatched(fn, input: Tensor, batched_ndim: int, p, training, inplace) -> Tensor:
    if input.ndim == batched_ndim - 1 and training and p != 0.0:
        out = fn(input.unsqueeze(0), p, training, inplace=False).squeeze(0)
        return input.copy_(out) if inplace else out
    return fn(input, p, training, inplace)


def dropout1d(input: Tensor, p: float = 0.5, training: bool = True,
              inplace: bool = False) -> Tensor:
    """Zero whole channels of ``(N, C, L)`` or ``(C, L)`` input."""
    _check_p(p)
    if input.ndim not in (2, 3):
        raise RuntimeError(
            f"dropout1d: Expected 2D or 3D input, but received a {input.ndim}D input. Note "
            "that dropout1d exists to provide channel-wise dropout on inputs with 1 spatial "
            "dimension, a channel dimension, and an optional batch dimension (i.e. 2D or 3D "
            "inputs).")
    return _unbatched(_channel_dropout, input, 3, p, training, inplace)


def dropout2d(input: Tensor, p: float = 0.5, training: bool = True,
              inplace: bool = False) -> Tensor:
    """Zero whole channels of ``(N, C, H, W)`` input (3-d input: see the warning)."""
    _check_p(p)
    if input.ndim not in (3, 4):
        warnings.warn(
            f"dropout2d: Received a {input.ndim}-D input to dropout2d, which is deprecated and "
            "will result in an error in a future release. To retain the behavior and silence "
            "this warning, please use dropout instead. Note that dropout2d exists to provide "
            "channel-wise dropout on inputs with 2 spatial dimensions, a channel dimension, "
            "and an optional batch dimension (i.e. 3D or 4D inputs).", UserWarning, stacklevel=2)
    if input.ndim == 3:
        warnings.warn(
            "dropout2d: Received a 3D input to dropout2d and assuming that channel-wise 1D "
            "dropout behavior is desired - input is interpreted as shape (N, C, L), where C "
            "is the channel dim. This behavior will change in a future release to interpret "
            "the input as one without a batch dimension, i.e. shape (C, H, W). To maintain "
            "the 1D channel-wise dropout behavior, please switch to using dropout1d instead.",
            UserWarning, stacklevel=2)
    return _channel_dropout(input, p, training, inplace)


def dropout3d(input: Tensor, p: float = 0.5, training: bool = True,
              inplace: bool = False) -> Tensor:
    """Zero whole channels of ``(N, C, D, H, W)`` or ``(C, D, H, W)`` input."""
    _check_p(p)
    if input.ndim not in (4, 5):
        warnings.warn(
            f"dropout3d: Received a {input.ndim}-D input to dropout3d, which is deprecated and "
            "will result in an error in a future release. To retain the behavior and silence "
            "this warning, please use dropout instead. Note that dropout3d exists to provide "
            "channel-wise dropout on inputs with 3 spatial dimensions, a channel dimension, "
            "and an optional batch dimension (i.e. 4D or 5D inputs).", UserWarning, stacklevel=2)
    return _unbatched(_channel_dropout, input, 5, p, training, inplace)


def _alpha_dropout(input: Tensor, p: float, training: bool, inplace: bool,
                   per_channel: bool) -> Tensor:
    """Dropped values become SELU's saturation value, then an affine map ``a * x + b``
    restores zero mean and unit variance."""
    _check_p(p)
    if not training or p == 0.0:
        return input
    if p == 1.0:
        zero = _const(np.zeros((), dtype=input._data.dtype))
        return input.mul_(zero) if inplace else input * zero
    keep = _keep_mask(input, p, per_channel)
    alpha = SELU_NEGATIVE_LIMIT
    a = 1.0 / np.sqrt((alpha * alpha * p + 1) * (1 - p))
    shift = ((keep - 1) * (alpha * a) + alpha * a * p).astype(keep.dtype)
    scale = (keep * a).astype(keep.dtype)
    if inplace:
        return input.mul_(_const(scale)).add_(_const(shift))
    return input * _const(scale) + _const(shift)


def alpha_dropout(input: Tensor, p: float = 0.5, training: bool = False,
                  inplace: bool = False) -> Tensor:
    return _alpha_dropout(input, p, training, inplace, per_channel=False)


def feature_alpha_dropout(input: Tensor, p: float = 0.5, training: bool = False,
                          inplace: bool = False) -> Tensor:
    """Alpha dropout of whole channels (dim 1)."""
    return _alpha_dropout(input, p, training, inplace, per_channel=True)
