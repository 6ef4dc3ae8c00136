"""The demo's figures, drawn with matplotlib's Agg backend (no display needed)."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.lines import Line2D
from matplotlib.ticker import FormatStrFormatter, LogLocator, NullFormatter

DPI = 110
LAYER_NAMES = {"0": "conv1", "2": "conv2", "6": "linear"}  # children of demo.model's CNN


def _save(fig, path: Path) -> str:
    fig.savefig(path, dpi=DPI, bbox_inches="tight", facecolor="white")
    plt.close(fig)
    return Path(path).name


def _label(param: str) -> str:
    """``"0.weight"`` as ``"conv1.weight"``."""
    child, _, attr = param.partition(".")
    return f"{LAYER_NAMES.get(child, child)}.{attr}"


def _log_axis(axis) -> None:
    """Label a log axis (after plotting) at enough values to read it: 1-9 times each power
    of ten within one decade, 1, 2, 3 and 5 times it within two, 1, 2 and 5 within four, the
    powers alone beyond (matplotlib's default labels the powers of ten only, so a range of less
    than a decade shows one or two labels)."""
    low, high = sorted(axis.get_view_interval())
    decades = np.log10(high / low) if low > 0 else np.inf
    subs = (np.arange(1, 10) if decades < 1 else (1, 2, 3, 5) if decades < 2
            else (1, 2, 5) if decades < 4 else (1,))
    axis.set_major_locator(LogLocator(base=10, subs=np.asarray(subs, dtype=float)))
    axis.set_major_formatter(FormatStrFormatter("%g"))
    axis.set_minor_locator(LogLocator(base=10, subs=np.arange(2, 10) * 1.0))
    axis.set_minor_formatter(NullFormatter())


EPOCH_LINE = {"color": "grey", "lw": 0.8, "ls": ":"}


def curves(history, path: Path) -> str:
    """Training loss, and training/test accuracy, over the steps."""
    return _save(draw_curves(history), path)


def draw_curves(history):
    """The figure of ``curves``."""
    steps = np.arange(1, len(history.loss) + 1)
    epoch_ends = np.arange(1, len(history.test_accuracy) + 1) * history.steps_per_epoch
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    left.plot(steps, history.loss, color="tab:blue", alpha=0.35, label="per step")
    left.plot(steps, _smooth(history.loss), color="tab:blue", label="moving average")
    left.set(title="Training loss (cross-entropy)", xlabel="step", ylabel="loss")
    left.set_yscale("log")
    right.plot(steps, 100 * np.asarray(history.accuracy), color="tab:orange", alpha=0.35,
               label="training batch (logits captured on the last stage's worker)")
    right.plot(epoch_ends, 100 * np.asarray(history.test_accuracy), "o-", color="tab:green",
               label="test set, after each epoch")
    # room above 100%, so that a batch at 100% is drawn whole, not cut by the frame
    right.set(title="Accuracy", xlabel="step", ylabel="accuracy (%)", ylim=(0, 105),
              yticks=range(0, 101, 20))
    for ax in (left, right):
        ax.grid(alpha=0.3)
        for x in epoch_ends[:-1]:
            ax.axvline(x, **EPOCH_LINE)
        handles, _ = ax.get_legend_handles_labels()
        if len(epoch_ends) > 1:
            handles.append(Line2D([], [], label="end of an epoch", **EPOCH_LINE))
        # accuracy rises from the lower left: its legend goes where the curves end up above
        ax.legend(handles=handles, loc="upper right" if ax is left else "lower right",
                  fontsize=8)
    _log_axis(left.yaxis)
    return fig


def _smooth(values, width: int = 10) -> np.ndarray:
    values = np.asarray(values, dtype=float)
    width = max(1, min(width, len(values)))
    padded = np.concatenate([np.full(width - 1, values[0]), values])
    return np.convolve(padded, np.ones(width) / width, mode="valid")


def feature_maps(images: np.ndarray, labels: np.ndarray, maps_by_epoch: dict,
                 path: Path) -> str:
    """Each probe digit and the first conv layer's feature maps of it, after the first and
    the last epoch."""
    epochs = sorted({min(maps_by_epoch), max(maps_by_epoch)})
    channels = maps_by_epoch[epochs[0]].shape[1]
    rows = [(i, e) for i in range(len(images)) for e in epochs]
    fig, axes = plt.subplots(len(rows), channels + 1, figsize=(1.0 * (channels + 1),
                                                              1.15 * len(rows) + 0.6),
                             squeeze=False)
    scale = max(float(np.abs(maps_by_epoch[e]).max()) for e in epochs) or 1.0
    for r, (i, epoch) in enumerate(rows):
        axes[r, 0].imshow(images[i, 0], cmap="gray_r", vmin=0, vmax=1)
        axes[r, 0].set_title(f"digit {labels[i]}\nepoch {epoch}", fontsize=8)
        maps = maps_by_epoch[epoch][i]
        for c in range(channels):
            im = axes[r, c + 1].imshow(maps[c], cmap="RdBu_r", vmin=-scale, vmax=scale)
            if r == 0:
                axes[r, c + 1].set_title(f"filter {c}", fontsize=7)
    for ax in axes.ravel():
        ax.set_xticks([])
        ax.set_yticks([])
    fig.colorbar(im, ax=axes, shrink=0.6, pad=0.01, label="activation (conv output)")
    fig.suptitle("First conv layer's feature maps, captured by a forward hook on the first "
                 "stage's worker", fontsize=11)
    return _save(fig, path)


def gradient_flow(history, clip_norm: float, path: Path) -> str:
    """Each parameter's gradient norm (before clipping) over the steps, and per parameter."""
    return _save(draw_gradient_flow(history, clip_norm), path)


def draw_gradient_flow(history, clip_norm: float):
    """The figure of ``gradient_flow``."""
    names = list(history.grad_norms)
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.4), layout="constrained",
                                      gridspec_kw={"width_ratios": [2, 1]})
    colors = plt.get_cmap("tab10")
    for k, name in enumerate(names):
        per_step = np.asarray(history.grad_norms[name])  # steps x micro-batches
        left.plot(np.arange(1, len(per_step) + 1), per_step.mean(axis=1), color=colors(k),
                  lw=1.2, label=_label(name))
    left.axhline(clip_norm, color="black", ls="--", lw=1, label=f"clip at {clip_norm:g}")
    left.set_yscale("log")
    left.set(title="Gradient norm per parameter (mean over the step's micro-batches)",
             xlabel="step", ylabel="‖grad‖ before clipping")
    left.grid(alpha=0.3, which="both")
    left.legend(fontsize=7, ncol=2)
    means = [np.mean(history.grad_norms[n]) for n in names]
    peaks = [np.max(history.grad_norms[n]) for n in names]
    y = np.arange(len(names))
    right.barh(y, peaks, color="lightgrey", label="largest")
    right.barh(y, means, color=[colors(k) for k in range(len(names))], label="mean")
    right.axvline(clip_norm, color="black", ls="--", lw=1)
    right.set_yticks(y, [_label(n) for n in names], fontsize=8)
    right.invert_yaxis()
    right.set_xscale("log")
    right.tick_params(axis="x", labelsize=7, labelrotation=45)
    right.set(title="Per parameter, whole run", xlabel="‖grad‖ per micro-batch",
              ylabel="parameter")
    right.grid(alpha=0.3, axis="x", which="both")
    right.legend(fontsize=7)
    _log_axis(left.yaxis)
    _log_axis(right.xaxis)
    fig.suptitle("Gradient flow, recorded on the workers by record_norm tensor hooks",
                 fontsize=11)
    return fig


def grad_cam(images: np.ndarray, labels: np.ndarray, predicted: np.ndarray, cams: np.ndarray,
             path: Path) -> str:
    """Each digit; its class activation map for the predicted class as computed, one cell
    per position of the layer's output; and that map upsampled (bilinear) over the digit."""
    return _save(draw_grad_cam(images, labels, predicted, cams), path)


GRAD_CAM_ROWS = ("digit", "map {h}×{w}\n(as computed)", "over the digit\n(bilinear, {size}×{size})")
SHOWN_SIZE = 28  # the pixels each digit and its map are drawn with (the digits are 8x8)


def draw_grad_cam(images: np.ndarray, labels: np.ndarray, predicted: np.ndarray,
                  cams: np.ndarray):
    """The figure of ``grad_cam``: three rows of square cells of one width, one column per
    digit, and the colour bar beside the two rows of maps."""
    from disthook.demo.gradcam import upsample

    n = len(images)
    digits = np.clip(upsample(images[:, 0], SHOWN_SIZE), 0, 1)
    smooth = np.clip(upsample(cams, SHOWN_SIZE), 0, 1)
    cell = 1.15  # inches
    fig = plt.figure(figsize=(cell * n + 1.3, cell * 3 + 0.9), layout="constrained")
    grid = fig.add_gridspec(3, n + 1, width_ratios=[1] * n + [0.12])
    axes = np.array([[fig.add_subplot(grid[row, i]) for i in range(n)] for row in range(3)])
    for i in range(n):
        axes[0, i].imshow(digits[i], cmap="gray_r", vmin=0, vmax=1)
        ok = "" if labels[i] == predicted[i] else " ✗"
        axes[0, i].set_title(f"true {labels[i]}\npred {predicted[i]}{ok}", fontsize=8)
        im = axes[1, i].imshow(cams[i], cmap="jet", vmin=0, vmax=1, interpolation="nearest")
        axes[2, i].imshow(digits[i], cmap="gray", vmin=0, vmax=1)
        axes[2, i].imshow(smooth[i], cmap="jet", alpha=0.5, vmin=0, vmax=1)
    for ax in axes.ravel():
        ax.set_xticks([])
        ax.set_yticks([])
    h, w = cams.shape[1:]
    for row, label in enumerate(GRAD_CAM_ROWS):
        axes[row, 0].set_ylabel(label.format(h=h, w=w, size=SHOWN_SIZE), fontsize=8)
    # beside the maps it reads, in a column of its own: every row keeps the same width
    bar = fig.colorbar(im, cax=fig.add_subplot(grid[1:, n]))
    bar.set_label("importance\n(1 = the map's peak)", fontsize=8)
    bar.ax.tick_params(labelsize=7)
    fig.suptitle("Class activation maps at the last conv layer for the predicted class "
                 "(Grad-CAM with the gradient kept per position, captured on the last "
                 "stage's worker)", fontsize=9)
    # once laid out, the bar as tall as the two rows of maps (its cells are taller than the
    # square images in them), and the layout kept as it is
    fig.canvas.draw()
    fig.set_layout_engine("none")
    top, bottom = axes[1, -1].get_position(), axes[2, -1].get_position()
    x0, width = bar.ax.get_position().x0, bar.ax.get_position().width
    bar.ax.set_position([x0, bottom.y0, width, top.y1 - bottom.y0])
    return fig
