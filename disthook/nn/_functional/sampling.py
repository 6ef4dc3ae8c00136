"""Resampling by coordinates: ``affine_grid`` (the sampling grid of an affine map),
``grid_sample`` (values of the input at grid points), and the deprecated ``upsample*`` names of
``interpolate``.

``grid_sample`` is a composition of differentiable ops: each sample is a weighted sum of the
input at the corners around its point, the corner positions constants and the weights
functions of the grid, so gradients reach both the input and the grid, as in torch.
"""
from __future__ import annotations

import itertools
import math
import warnings

import numpy as np

import disthook.nn.functional as F
from disthook.ops.elementwise import ZeroGradTie
from disthook.ops.grid import AffineGridGenerator
from disthook.tensor import Tensor

__all__ = ["affine_grid", "grid_sample", "upsample", "upsample_bilinear", "upsample_nearest"]

_ALIGN_WARNING = ("Default grid_sample and affine_grid behavior has changed to "
                  "align_corners=False since 1.3.0. Please specify align_corners=True if the "
                  "old behavior is desired. See the documentation of grid_sample for details.")


def _const(array: np.ndarray) -> Tensor:
    return Tensor._make(np.ascontiguousarray(array), None, 0)


# ---- the deprecated names of interpolate ---------------------------------------------------

def upsample(input: Tensor, size=None, scale_factor=None, mode: str = "nearest",
             align_corners: bool | None = None) -> Tensor:
    warnings.warn("nn.functional.upsample is deprecated. Use nn.functional.interpolate "
                  "instead.", UserWarning, stacklevel=2)
    return F.interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input: Tensor, size=None, scale_factor=None) -> Tensor:
    warnings.warn("nn.functional.upsample_nearest is deprecated. Use "
                  "nn.functional.interpolate instead.", UserWarning, stacklevel=2)
    return F.interpolate(input, size, scale_factor, mode="nearest")


def upsample_bilinear(input: Tensor, size=None, scale_factor=None) -> Tensor:
    warnings.warn("nn.functional.upsample_bilinear is deprecated. Use "
                  "nn.functional.interpolate instead.", UserWarning, stacklevel=2)
    return F.interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)


# ---- affine grids ----------------------------------------------------------------------------

def _positions(n: int, align_corners: bool) -> np.ndarray:
    """Normalised coordinates of ``n`` pixel centres (or corners, ``align_corners``)."""
    if n <= 1:
        return np.zeros(max(n, 1))
    steps = np.linspace(-1.0, 1.0, n)
    return steps if align_corners else steps * (n - 1) / n


def affine_grid(theta: Tensor, size, align_corners: bool | None = None) -> Tensor:
    """The ``(N, H, W, 2)`` (or ``(N, D, H, W, 3)``) grid of ``theta @ [x, y, (z,) 1]`` over
    the output ``size``, for ``grid_sample``."""
    if align_corners is None:
        warnings.warn(_ALIGN_WARNING, UserWarning, stacklevel=2)
        align_corners = False
    if not theta.is_floating_point():
        raise ValueError(f"Expected theta to have floating point type, but got {theta.dtype}")
    size = [int(s) for s in size]
    if len(size) == 4:
        if theta.ndim != 3 or tuple(theta.shape[-2:]) != (2, 3):
            raise ValueError(f"Expected a batch of 2D affine matrices of shape Nx2x3 for size "
                             f"{size}. Got {list(theta.shape)}.")
    elif len(size) == 5:
        if theta.ndim != 3 or tuple(theta.shape[-2:]) != (3, 4):
            raise ValueError(f"Expected a batch of 3D affine matrices of shape Nx3x4 for size "
                             f"{size}. Got {list(theta.shape)}.")
    else:
        raise NotImplementedError(f"affine_grid only supports 4D and 5D sizes, for 2D and 3D "
                                  f"affine transforms, respectively. Got size {size}.")
    if min(size) <= 0:
        raise ValueError(f"Expected non-zero, positive output size. Got {size}")
    spatial = size[2:]
    # the base grid: for each output point (x, y[, z], 1), x running along the last dim
    axes = [_positions(n, align_corners) for n in spatial]
    mesh = np.meshgrid(*axes, indexing="ij")
    base = np.stack([*reversed(mesh), np.ones(tuple(spatial))], axis=-1)
    base = base.reshape(-1, len(spatial) + 1)
    return AffineGridGenerator.apply(theta, base=base, spatial=tuple(spatial))


# ---- sampling ------------------------------------------------------------------------------------

def _reflect(x: np.ndarray, twice_low: int, twice_high: int) -> tuple:
    """``x`` reflected into ``[twice_low / 2, twice_high / 2]`` and the slope (+-1) of that map."""
    if twice_low == twice_high:
        return np.zeros_like(x), np.zeros_like(x)
    low = twice_low / 2
    span = (twice_high - twice_low) / 2
    shifted = x - low
    sign = np.where(shifted < 0, -1.0, 1.0)
    distance = np.abs(shifted)
    extra = np.fmod(distance, span)
    flips = np.floor(distance / span)
    even = flips % 2 == 0
    return np.where(even, extra + low, span - extra + low), np.where(even, sign, -sign)


def _source(coord: Tensor, size: int, padding_mode: str, align_corners: bool) -> Tensor:
    """Grid coordinates in [-1, 1] to input positions, with the padding mode applied."""
    if align_corners:
        x = (coord + 1) * ((size - 1) / 2)
    else:
        x = ((coord + 1) * size - 1) / 2
    if padding_mode == "border":
        x = x.clamp(0, size - 1)
    elif padding_mode == "reflection":
        if align_corners:
            reflected, slope = _reflect(x._data, 0, 2 * (size - 1))
        else:
            reflected, slope = _reflect(x._data, -1, 2 * size - 1)
        dtype = x._data.dtype
        # the reflection is piecewise x * slope + offset: keep x's gradient, times the slope
        x = x * _const(slope.astype(dtype)) + _const((reflected - x._data * slope).astype(dtype))
        x = x.clamp(0, size - 1)
    return x


def _gather(input: Tensor, positions: list, spatial: tuple) -> tuple:
    """Input values at integer ``positions`` (one array per spatial dim, ``(N, *out)``), and
    the mask of those inside the input (outside ones read as zero)."""
    n, c = input.shape[:2]
    inside = np.ones(positions[0].shape, dtype=bool)
    flat = np.zeros(positions[0].shape, dtype=np.int64)
    for p, size in zip(positions, spatial):
        inside &= (p >= 0) & (p < size)
        flat = flat * size + np.clip(p, 0, size - 1)
    index = _const(np.broadcast_to(flat.reshape(n, 1, -1), (n, c, flat[0].size)))
    values = input.reshape(n, c, -1).gather(2, index)
    return values, inside.reshape(n, 1, -1)


def grid_sample(input: Tensor, grid: Tensor, mode: str = "bilinear",
                padding_mode: str = "zeros", align_corners: bool | None = None) -> Tensor:
    """The input at each grid point (``grid[..., 0]`` along the last dim, in [-1, 1]),
    interpolated ('bilinear', trilinear for 5-d input, or 'nearest'); points outside read
    zeros, the border, or the input reflected (``padding_mode``)."""
    if mode not in ("bilinear", "nearest", "bicubic"):
        raise ValueError(f"nn.functional.grid_sample(): expected mode to be 'bilinear', "
                         f"'nearest' or 'bicubic', but got: '{mode}'")
    if padding_mode not in ("zeros", "border", "reflection"):
        raise ValueError(f"nn.functional.grid_sample(): expected padding_mode to be 'zeros', "
                         f"'border', or 'reflection', but got: '{padding_mode}'")
    if align_corners is None:
        warnings.warn(_ALIGN_WARNING, UserWarning, stacklevel=2)
        align_corners = False
    nd = input.ndim - 2
    if nd not in (2, 3) or grid.ndim != input.ndim:
        raise RuntimeError(f"grid_sampler(): expected 4D or 5D input and grid with same number "
                           f"of dimensions, but got input with sizes {list(input.shape)} and "
                           f"grid with sizes {list(grid.shape)}")
    if grid.shape[0] != input.shape[0]:
        raise RuntimeError(f"grid_sampler(): expected grid and input to have same batch size, "
                           f"but got input with sizes {list(input.shape)} and grid with sizes "
                           f"{list(grid.shape)}")
    if grid.shape[-1] != nd:
        raise RuntimeError(f"grid_sampler(): expected grid to have size {nd} in last dimension, "
                           f"but got grid with sizes {list(grid.shape)}")
    if mode == "bicubic" and nd != 2:
        raise RuntimeError("grid_sampler(): bicubic interpolation only supports 4D input")
    spatial = tuple(input.shape[2:])
    out_shape = (input.shape[0], input.shape[1], *grid.shape[1:-1])
    if grid.dtype != input.dtype:
        raise RuntimeError(f"grid_sampler(): expected input and grid to have same dtype, but "
                           f"input has {input.dtype} and grid has {grid.dtype}")
    # the coordinate of spatial dim d is grid[..., nd - 1 - d] (x runs along the last dim)
    coords = [grid[..., nd - 1 - d] for d in range(nd)]
    if mode == "bicubic":
        return _bicubic(input, coords, spatial, padding_mode, align_corners).reshape(out_shape)
    source = [_source(c, n, padding_mode, align_corners) for c, n in zip(coords, spatial)]
    if mode == "nearest":
        values, inside = _gather(input, [np.rint(s._data).astype(np.int64) for s in source],
                                 spatial)
        out = (values * _const(inside.astype(values._data.dtype))).reshape(out_shape)
        return ZeroGradTie.apply(out, grid)
    floors = [np.floor(s._data) for s in source]
    fractions = [s - _const(f) for s, f in zip(source, floors)]
    total = None
    for corner in itertools.product((0, 1), repeat=nd):
        positions = [f.astype(np.int64) + bit for f, bit in zip(floors, corner)]
        values, inside = _gather(input, positions, spatial)
        weight = math.prod(fr if bit else 1 - fr for fr, bit in zip(fractions, corner))
        weight = weight.reshape(input.shape[0], 1, -1) * _const(inside.astype(values._data.dtype))
        term = values * weight
        total = term if total is None else total + term
    return total.reshape(out_shape)


def _cubic_weights(t: Tensor) -> list:
    """The four cubic-convolution weights (A = -0.75) of taps at -1, 0, 1, 2 for offset ``t``
    in [0, 1)."""
    a = -0.75

    def near(x):  # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):  # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def _bicubic(input: Tensor, coords: list, spatial: tuple, padding_mode: str,
             align_corners: bool) -> Tensor:
    """Bicubic interpolation over the 4 x 4 taps around each point; each tap position gets
    the padding mode (so border and reflection read inside), as torch does."""
    unnormalised = []
    for c, size in zip(coords, spatial):
        unnormalised.append((c + 1) * ((size - 1) / 2) if align_corners
                            else ((c + 1) * size - 1) / 2)
    floors = [np.floor(u._data) for u in unnormalised]
    weights = [_cubic_weights(u - _const(f)) for u, f in zip(unnormalised, floors)]
    n = input.shape[0]
    total = None
    for i in range(4):
        for j in range(4):
            taps = [floors[0] - 1 + i, floors[1] - 1 + j]
            positions = [_tap(t, size, padding_mode, align_corners)
                         for t, size in zip(taps, spatial)]
            values, inside = _gather(input, positions, spatial)
            w = (weights[0][i] * weights[1][j]).reshape(n, 1, -1)
            term = values * (w * _const(inside.astype(values._data.dtype)))
            total = term if total is None else total + term
    return total


def _tap(position: np.ndarray, size: int, padding_mode: str, align_corners: bool) -> np.ndarray:
    if padding_mode == "border":
        return np.clip(position, 0, size - 1).astype(np.int64)
    if padding_mode == "reflection":
        twice = (0, 2 * (size - 1)) if align_corners else (-1, 2 * size - 1)
        reflected, _ = _reflect(position, *twice)
        return np.clip(reflected, 0, size - 1).astype(np.int64)
    return position.astype(np.int64)
