"""Grad-CAM (Selvaraju et al., 2017) from a conv layer's activations and their gradients."""
from __future__ import annotations

import numpy as np


def grad_cam(activations: np.ndarray, gradients: np.ndarray) -> np.ndarray:
    """Heat maps (n, h, w) in [0, 1] from activations and the class score's gradient with
    respect to them, both (n, channels, h, w): every channel weighted by the spatial mean
    of its gradient, summed, rectified and scaled to peak 1 per image."""
    if activations.shape != gradients.shape or activations.ndim != 4:
        raise ValueError(f"grad_cam() takes activations and gradients of one (n, c, h, w) "
                         f"shape, got {activations.shape} and {gradients.shape}")
    weights = gradients.mean(axis=(2, 3), keepdims=True)
    cam = np.maximum((weights * activations).sum(axis=1), 0.0)
    peak = cam.max(axis=(1, 2), keepdims=True)
    return np.divide(cam, peak, out=np.zeros_like(cam), where=peak > 0)
