"""Class activation maps from a conv layer's activations and the class score's gradient
with respect to them (both ``(n, channels, h, w)``), and what the demo's figure needs to
show them over the digit.

Two weightings of the channels:

- ``grad_cam`` (Selvaraju et al., 2017): each channel weighted by the mean of its gradient
  over the positions. Exact where a global average pool follows the layer (it is then
  CAM); where the head weighs every position on its own, the means of a channel's positive
  and negative weights cancel.
- ``hires_cam`` (Draelos and Carin, 2020): the gradient kept per position, so each
  position gets what its activations add to the class score. The demo's CNN ends in
  max pooling, Flatten and Linear, a head of that kind: there the mean-gradient map is
  blank (all channels' sums below zero) for about half the test digits, while this one is
  the score's own split over the positions.
"""
from __future__ import annotations

import numpy as np


def grad_cam(activations: np.ndarray, gradients: np.ndarray) -> np.ndarray:
    """Heat maps (n, h, w) in [0, 1]: every channel weighted by the spatial mean of its
    gradient, summed, rectified and scaled to peak 1 per image."""
    _check(activations, gradients, "grad_cam")
    weights = gradients.mean(axis=(2, 3), keepdims=True)
    return _rectified(weights * activations)


def hires_cam(activations: np.ndarray, gradients: np.ndarray) -> np.ndarray:
    """Heat maps (n, h, w) in [0, 1]: activations times their gradient at each position,
    summed over the channels, rectified and scaled to peak 1 per image."""
    _check(activations, gradients, "hires_cam")
    return _rectified(gradients * activations)


def upsample(maps: np.ndarray, size: int) -> np.ndarray:
    """Maps (n, h, w) resized to (n, size, size) by bilinear interpolation (pixel centres
    aligned, as ``F.interpolate(..., mode="bilinear")``)."""
    import disthook as torch
    from disthook.nn import functional as F

    grid = torch.from_numpy(np.ascontiguousarray(maps, dtype=np.float32)[:, None])
    wide = F.interpolate(grid, size=(size, size), mode="bilinear", align_corners=False)
    return wide.numpy()[:, 0]


def heat_on_ink(maps: np.ndarray, images: np.ndarray, ink: float = 0.2) -> np.ndarray:
    """Per image, the share of its map's heat on the digit's pixels (those of ``images``,
    (n, h, w) in [0, 1] on the maps' grid, above ``ink``); 0 for a blank map."""
    on = maps * (images > ink)
    total = maps.sum(axis=(1, 2))
    return np.divide(on.sum(axis=(1, 2)), total, out=np.zeros_like(total), where=total > 0)


def _check(activations: np.ndarray, gradients: np.ndarray, name: str) -> None:
    if activations.shape != gradients.shape or activations.ndim != 4:
        raise ValueError(f"{name}() takes activations and gradients of one (n, c, h, w) "
                         f"shape, got {activations.shape} and {gradients.shape}")


def _rectified(weighted: np.ndarray) -> np.ndarray:
    cam = np.maximum(weighted.sum(axis=1), 0.0)
    peak = cam.max(axis=(1, 2), keepdims=True)
    return np.divide(cam, peak, out=np.zeros_like(cam), where=peak > 0)
