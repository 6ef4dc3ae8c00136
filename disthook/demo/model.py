"""The demo's data (scikit-learn's 8x8 digits, shipped with it) and its CNN."""
from __future__ import annotations

import dataclasses

import numpy as np

import disthook as torch
from disthook import nn

FIRST_CONV = 0  # the children hooks go on: feature maps here,
CAM_LAYER = 3  # class activation maps here: the last conv layer's rectified output
SPLIT_POINTS = [2]  # stage 0: conv1 + ReLU; stage 1: conv2 ... Linear


@dataclasses.dataclass
class Digits:
    """Images scaled to [0, 1], shape (n, 1, 8, 8), and their labels."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


def load_digits(*, seed: int = 0, test_fraction: float = 0.2, limit: int | None = None) -> Digits:
    """The 1797 digits, shuffled with ``seed`` and split; ``limit``: keep that many."""
    images, target = digit_table()
    order = np.random.default_rng(seed).permutation(len(target))[:limit]
    x = (images[order] / 16.0).astype(np.float32)[:, None]
    y = target[order].astype(np.int64)
    n_test = max(1, round(len(y) * test_fraction))
    return Digits(x[n_test:], y[n_test:], x[:n_test], y[:n_test])


def digit_table() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits: images (1797, 8, 8) of values 0..16, and their labels. Read
    from the file scikit-learn ships them in, found without importing scikit-learn (its
    import takes 3 s of CPU here, a fifth of a quick demo); through its own
    ``load_digits`` where that file is not where this version keeps it."""
    import importlib.util
    import os

    spec = importlib.util.find_spec("sklearn")
    for folder in (spec.submodule_search_locations or []) if spec is not None else []:
        path = os.path.join(folder, "datasets", "data", "digits.csv.gz")
        if not os.path.isfile(path):
            continue
        try:
            table = np.loadtxt(path, delimiter=",")
        except ValueError:
            break
        if table.ndim == 2 and table.shape[1] == 65:
            return table[:, :-1].reshape(-1, 8, 8), table[:, -1].astype(int)
        break
    from sklearn.datasets import load_digits as sklearn_digits

    bunch = sklearn_digits()
    return bunch.images, bunch.target


def one_per_class(labels: np.ndarray, classes: int = 10) -> np.ndarray:
    """The index of the first example of every class that occurs, in class order."""
    return np.array([np.flatnonzero(labels == c)[0] for c in range(classes)
                     if np.any(labels == c)])


def build_model(seed: int = 0) -> nn.Sequential:
    """Conv, ReLU, Conv, ReLU, MaxPool, Flatten, Linear: 8x8 images to 10 logits."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(),
                         nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(32 * 4 * 4, 10))
