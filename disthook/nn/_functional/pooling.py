"""Pooling of ``nn.functional`` beyond max / average: adaptive max (1-3 d), adaptive average in
3-d, power-average (LP) pooling, fractional max pooling, and the ``*_with_indices`` forms."""
from __future__ import annotations

import numpy as np

import disthook.nn.functional as F
from disthook import random
from disthook.ops import window as W
from disthook.tensor import Tensor

__all__ = [
    "adaptive_avg_pool3d", "adaptive_max_pool1d", "adaptive_max_pool1d_with_indices",
    "adaptive_max_pool2d", "adaptive_max_pool2d_with_indices", "adaptive_max_pool3d",
    "adaptive_max_pool3d_with_indices", "fractional_max_pool2d",
    "fractional_max_pool2d_with_indices", "fractional_max_pool3d",
    "fractional_max_pool3d_with_indices", "lp_pool1d", "lp_pool2d", "lp_pool3d",
    "max_pool1d_with_indices", "max_pool2d_with_indices", "max_pool3d_with_indices",
]


def _sizes(input: Tensor, output_size, nd: int, fn: str) -> tuple:
    """``output_size`` as ``nd`` ints (``None`` keeps that dim's size), after torch's
    checks of the input's rank and emptiness."""
    if input.ndim not in (nd + 1, nd + 2):
        raise RuntimeError(f"{fn}(): Expected {nd + 1}D or {nd + 2}D tensor, but got "
                           f"{list(input.shape)}")
    for i in range(1, input.ndim):
        if input.shape[i] == 0:
            raise RuntimeError(f"{fn}(): Expected input to have non-zero size for non-batch "
                               f"dimensions, but input has sizes {list(input.shape)} with "
                               f"dimension {i} being empty")
    sizes = F._ntuple(output_size, nd)
    if len(sizes) != nd:
        raise RuntimeError(f"{fn}(): internal error: output_size.size() must be {nd}")
    return tuple(n if s is None else int(s) for n, s in zip(input.shape[-nd:], sizes))


# ---- adaptive max pooling ------------------------------------------------------------------

def _adaptive_max(input: Tensor, output_size, nd: int, op, return_indices: bool):
    fn = f"adaptive_max_pool{nd}d"
    sizes = _sizes(input, output_size, nd, fn)
    rows = [W.adaptive_rows(n, o) for n, o in zip(input.shape[-nd:], sizes)]
    values, indices = op.apply(input, rows=rows)
    indices = Tensor._make(indices._data, None, 0)
    return (values, indices) if return_indices else values


def adaptive_max_pool1d_with_indices(input: Tensor, output_size, return_indices: bool = False):
    """Max over adaptive windows of the last dim: 2-d pooling of a height-1 view."""
    if input.ndim not in (2, 3):
        raise RuntimeError(f"adaptive_max_pool1d(): Expected 2D or 3D tensor, but got "
                           f"{list(input.shape)}")
    (size,) = F._ntuple(output_size, 1)
    values, indices = adaptive_max_pool2d_with_indices(input.unsqueeze(-2), (1, size))
    return values.squeeze(-2), indices.squeeze(-2)


def adaptive_max_pool1d(input: Tensor, output_size, return_indices: bool = False):
    values, indices = adaptive_max_pool1d_with_indices(input, output_size)
    return (values, indices) if return_indices else values


def adaptive_max_pool2d_with_indices(input: Tensor, output_size, return_indices: bool = False):
    return _adaptive_max(input, output_size, 2, W.AdaptiveMaxPool2D, True)


def adaptive_max_pool2d(input: Tensor, output_size, return_indices: bool = False):
    """Max pooling to a fixed output size; with ``return_indices`` also the flat index (into
    H*W) of each maximum."""
    return _adaptive_max(input, output_size, 2, W.AdaptiveMaxPool2D, return_indices)


def adaptive_max_pool3d_with_indices(input: Tensor, output_size, return_indices: bool = False):
    return _adaptive_max(input, output_size, 3, W.AdaptiveMaxPool3D, True)


def adaptive_max_pool3d(input: Tensor, output_size, return_indices: bool = False):
    return _adaptive_max(input, output_size, 3, W.AdaptiveMaxPool3D, return_indices)


def adaptive_avg_pool3d(input: Tensor, output_size) -> Tensor:
    """Average pooling of the last three dims to a fixed output size."""
    sizes = _sizes(input, output_size, 3, "adaptive_avg_pool3d")
    if sizes == (1, 1, 1):
        return input.mean(dim=(-1, -2, -3), keepdim=True)
    return W.AdaptiveAvgPool3D.apply(input, out=sizes)


# ---- max pooling with indices --------------------------------------------------------------

def max_pool1d_with_indices(input: Tensor, kernel_size, stride=None, padding=0, dilation=1,
                            ceil_mode: bool = False, return_indices: bool = False):
    return F.max_pool1d(input, kernel_size, stride, padding, dilation, ceil_mode, True)


def max_pool2d_with_indices(input: Tensor, kernel_size, stride=None, padding=0, dilation=1,
                            ceil_mode: bool = False, return_indices: bool = False):
    return F.max_pool2d(input, kernel_size, stride, padding, dilation, ceil_mode, True)


def max_pool3d_with_indices(input: Tensor, kernel_size, stride=None, padding=0, dilation=1,
                            ceil_mode: bool = False, return_indices: bool = False):
    return F.max_pool3d(input, kernel_size, stride, padding, dilation, ceil_mode, True)


# ---- power-average pooling -----------------------------------------------------------------

def _lp_pool(input: Tensor, norm_type: float, kernel_size, stride, ceil_mode: bool,
             nd: int) -> Tensor:
    """``(sum over the window of x ** p) ** (1 / p)``: the average pool of ``x ** p`` times
    the window size, negative averages (odd ``p``) clamped to zero, as torch computes it."""
    kernel = F._ntuple(kernel_size, nd)
    pool = (F.avg_pool1d, F.avg_pool2d, F.avg_pool3d)[nd - 1]
    if nd == 1:
        (kernel,) = kernel
    if stride is not None:
        out = pool(input.pow(norm_type), kernel, stride, 0, ceil_mode)
    else:
        out = pool(input.pow(norm_type), kernel, padding=0, ceil_mode=ceil_mode)
    size = int(np.prod(F._ntuple(kernel, nd)))
    return (out.sign() * out.abs().relu()).mul(size).pow(1.0 / norm_type)


def lp_pool1d(input: Tensor, norm_type: float, kernel_size, stride=None,
              ceil_mode: bool = False) -> Tensor:
    return _lp_pool(input, norm_type, kernel_size, stride, ceil_mode, 1)


def lp_pool2d(input: Tensor, norm_type: float, kernel_size, stride=None,
              ceil_mode: bool = False) -> Tensor:
    return _lp_pool(input, norm_type, kernel_size, stride, ceil_mode, 2)


def lp_pool3d(input: Tensor, norm_type: float, kernel_size, stride=None,
              ceil_mode: bool = False) -> Tensor:
    return _lp_pool(input, norm_type, kernel_size, stride, ceil_mode, 3)


# ---- fractional max pooling ----------------------------------------------------------------

def _fractional(input: Tensor, kernel_size, output_size, output_ratio, samples, nd: int, op):
    fn = f"fractional_max_pool{nd}d"
    if output_size is None and output_ratio is None:
        raise ValueError(f"{fn} requires specifying either an output_size or an output_ratio")
    if input.ndim not in (nd + 1, nd + 2):
        raise RuntimeError(f"{fn}(): Expected {nd + 1}D or {nd + 2}D tensor, but got: "
                           f"{list(input.shape)}")
    kernel = tuple(int(k) for k in F._ntuple(kernel_size, nd))
    spatial = input.shape[-nd:]
    if output_size is None:
        ratios = F._ntuple(output_ratio, nd)
        if not all(0 < r < 1 for r in ratios):
            raise ValueError(f"output_ratio must be between 0 and 1 (got {output_ratio})")
        output_size = [int(n * r) for n, r in zip(spatial, ratios)]
    sizes = tuple(int(o) for o in F._ntuple(output_size, nd))
    for n, o, k in zip(spatial, sizes, kernel):
        if o + k - 1 > n:
            raise RuntimeError(f"{fn}(): pool size {k} too large relative to input size {n} "
                               f"for output size {o}")
    batched = input.ndim == nd + 2
    x = input if batched else input.unsqueeze(0)
    planes = tuple(x.shape[:2])
    if samples is None:
        u = random.gen().random(planes + (nd,)).astype(x._data.dtype)
    else:
        u = samples._data
        if tuple(u.shape) != planes + (nd,):
            raise RuntimeError(f"{fn}(): expected _random_samples of shape "
                               f"{list(planes + (nd,))}, but got {list(u.shape)}")
    # one sample per plane and pooled dim; torch's 2-d kernel reads width from sample 0,
    # its 3-d kernel reads the dims in order
    which = (1, 0) if nd == 2 else (0, 1, 2)
    rows = [W.fractional_rows(n, o, k, u[..., which[d]])
            for d, (n, o, k) in enumerate(zip(spatial, sizes, kernel))]
    values, indices = op.apply(x, rows=rows)
    indices = Tensor._make(indices._data, None, 0)
    if not batched:
        values, indices = values.squeeze(0), indices.squeeze(0)
    return values, indices


def fractional_max_pool2d_with_indices(input: Tensor, kernel_size, output_size=None,
                                       output_ratio=None, return_indices: bool = False,
                                       _random_samples: Tensor | None = None):
    return _fractional(input, kernel_size, output_size, output_ratio, _random_samples, 2,
                       W.FractionalMaxPool2D)


def fractional_max_pool2d(input: Tensor, kernel_size, output_size=None, output_ratio=None,
                          return_indices: bool = False,
                          _random_samples: Tensor | None = None):
    """Max over ``kernel_size`` windows at pseudo-random, increasing offsets that cover the
    input in ``output_size`` (or ``output_ratio``) steps (Graham, 2014)."""
    values, indices = fractional_max_pool2d_with_indices(input, kernel_size, output_size,
                                                         output_ratio, True, _random_samples)
    return (values, indices) if return_indices else values


def fractional_max_pool3d_with_indices(input: Tensor, kernel_size, output_size=None,
                                       output_ratio=None, return_indices: bool = False,
                                       _random_samples: Tensor | None = None):
    return _fractional(input, kernel_size, output_size, output_ratio, _random_samples, 3,
                       W.FractionalMaxPool3D)


def fractional_max_pool3d(input: Tensor, kernel_size, output_size=None, output_ratio=None,
                          return_indices: bool = False,
                          _random_samples: Tensor | None = None):
    values, indices = fractional_max_pool3d_with_indices(input, kernel_size, output_size,
                                                         output_ratio, True, _random_samples)
    return (values, indices) if return_indices else values
