"""Render numpy arrays exactly the way PyTorch's ``repr(tensor)`` does.

Print options (precision, threshold, edgeitems, linewidth, sci_mode) and their
profiles mirror ``torch.set_printoptions``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import _dtype


@dataclasses.dataclass
class PrintOptions:
    """Current print settings; the defaults are torch's "default" profile."""

    precision: int = 4
    threshold: float = 1000
    edgeitems: int = 3
    linewidth: int = 80
    sci_mode: bool | None = None


PRINT_OPTS = PrintOptions()

_PROFILES: dict[str, dict[str, Any]] = {
    "default": {"precision": 4, "threshold": 1000, "edgeitems": 3, "linewidth": 80},
    "short": {"precision": 2, "threshold": 1000, "edgeitems": 2, "linewidth": 80},
    "full": {"precision": 4, "threshold": math.inf, "edgeitems": 3, "linewidth": 80},
}


def set_printoptions(
    precision: int | None = None,
    threshold: float | None = None,
    edgeitems: int | None = None,
    linewidth: int | None = None,
    profile: str | None = None,
    sci_mode: bool | None = None,
) -> None:
    """Change the print options; like torch, ``sci_mode`` is always overwritten."""
    if profile is not None:
        for name, value in _PROFILES.get(profile, {}).items():
            setattr(PRINT_OPTS, name, value)
    explicit = {
        "precision": precision,
        "threshold": threshold,
        "edgeitems": edgeitems,
        "linewidth": linewidth,
    }
    for name, value in explicit.items():
        if value is not None:
            setattr(PRINT_OPTS, name, value)
    PRINT_OPTS.sci_mode = sci_mode


def get_printoptions() -> dict[str, Any]:
    """The current options as a dict that can be passed back to set_printoptions."""
    return dataclasses.asdict(PRINT_OPTS)


class _Formatter:
    """Chooses one style (int, fixed, scientific) and one width for all elements."""

    def __init__(self, values: np.ndarray) -> None:
        flat = values.reshape(-1)
        self.is_float = _dtype.kind(flat.dtype) == "f"
        self.int_mode = True
        self.sci_mode = False
        self.width = 1
        if not self.is_float:
            self.width = max([1] + [len(str(v)) for v in flat.tolist()])
            return
        nonzero = flat[np.isfinite(flat) & (flat != 0)]
        if nonzero.size == 0:
            return
        magnitudes = np.abs(nonzero).astype(np.float64)
        low, high = magnitudes.min(), magnitudes.max()
        self.int_mode = bool(np.all(nonzero == np.ceil(nonzero)))
        if PRINT_OPTS.sci_mode is None:
            with np.errstate(over="ignore"):
                ratio = high / low
            self.sci_mode = bool(ratio > 1000.0 or high > 1.0e8 or low < 1.0e-4)
        else:
            self.sci_mode = PRINT_OPTS.sci_mode
        self.width = max(len(self._plain(v)) for v in nonzero.tolist())

    def _plain(self, value: Any) -> str:
        """The element text before padding."""
        if not self.is_float:
            return str(value)
        if self.sci_mode:
            return f"{value:.{PRINT_OPTS.precision}e}"
        if self.int_mode:
            return f"{value:.0f}" + ("." if math.isfinite(value) else "")
        return f"{value:.{PRINT_OPTS.precision}f}"

    def __call__(self, value: Any) -> str:
        return self._plain(value).rjust(self.width)


class _ComplexFormatter:
    """Complex elements as torch prints them: the real parts in one style and width, the
    imaginary parts in another, joined by their sign (``1.5000+2.j``)."""

    def __init__(self, values: np.ndarray) -> None:
        self.re, self.im = _Formatter(values.real), _Formatter(values.imag)
        self.width = self.re.width + self.im.width + 2  # (torch counts the sign and the j)

    def __call__(self, value: Any) -> str:
        real = self.re(value.real)
        imag = (self.im(value.imag) + "j").lstrip()
        return real + imag if imag[0] in "+-" else real + "+" + imag


def _summarized(data: np.ndarray) -> np.ndarray:
    """The elements that remain visible after summarization (for the formatter)."""
    edge = PRINT_OPTS.edgeitems
    if data.ndim > 1 and not edge:
        return data[(slice(0, 0),) * data.ndim]
    for axis, size in enumerate(data.shape):
        if edge and size > 2 * edge:
            keep = np.r_[0:edge, size - edge : size]
            data = np.take(data, keep, axis=axis)
    return data


def _render(data: np.ndarray, indent: int, summarize: bool, fmt: _Formatter) -> str:
    """Nested-bracket text for ``data`` whose first line starts at column ``indent``."""
    if data.ndim == 0:
        return fmt(data.item())
    edge = PRINT_OPTS.edgeitems
    elide = summarize and data.shape[0] > 2 * edge
    if data.ndim == 1:
        if summarize and not edge:
            items = ["..."]
        elif elide:
            items = [fmt(v) for v in data[:edge].tolist()] + [" ..."]
            items += [fmt(v) for v in data[-edge:].tolist()]
        else:
            items = [fmt(v) for v in data.tolist()]
        per_line = max(1, math.floor((PRINT_OPTS.linewidth - indent) / (fmt.width + 2)))
        lines = [", ".join(items[i : i + per_line]) for i in range(0, len(items), per_line)]
        return "[" + (",\n" + " " * (indent + 1)).join(lines) + "]"
    if elide:
        rows = list(range(edge)) + [None] + list(range(data.shape[0] - edge, data.shape[0]))
    else:
        rows = list(range(data.shape[0]))
    parts = ["..." if i is None else _render(data[i], indent + 1, summarize, fmt) for i in rows]
    return "[" + ("," + "\n" * (data.ndim - 1) + " " * (indent + 1)).join(parts) + "]"


def _add_suffixes(text: str, suffixes: Sequence[str], indent: int) -> str:
    """Append ", key=value" parts, wrapping onto a new line when one would overflow."""
    pieces = [text]
    last_line_len = len(text) - text.rfind("\n") + 1  # torch's (slightly generous) count
    for suffix in suffixes:
        if last_line_len + len(suffix) + 2 > PRINT_OPTS.linewidth:
            pieces.append(",\n" + " " * indent + suffix)
            last_line_len = indent + len(suffix)
        else:
            pieces.append(", " + suffix)
            last_line_len += len(suffix) + 2
    return "".join(pieces) + ")"


def format_tensor(
    data: np.ndarray,
    *,
    dtype_suffix: str | None = None,
    suffixes: Sequence[str] = (),
    prefix: str = "tensor(",
) -> str:
    """Return the repr torch prints for a CPU tensor holding ``data``.

    ``dtype_suffix`` names the tensor's dtype (default: derived from ``data.dtype``); it is
    shown by torch's rules, i.e. unless it is the default dtype, int64 or bool (empty
    tensors: unless it is the default dtype). ``suffixes`` follow it, in order.
    """
    data = np.asarray(data)
    indent = len(prefix)
    dtype_name = dtype_suffix or f"torch.{data.dtype.name}"
    default_name = repr(_dtype.get_default_dtype())
    extra = []
    if data.size == 0:
        if data.ndim != 1:
            extra.append(f"size={tuple(data.shape)}")
        if dtype_name != default_name:
            extra.append(f"dtype={dtype_name}")
        body = "[]"
    else:
        if not PRINT_OPTS.edgeitems:
            extra.append(f"size={tuple(data.shape)}")
        default_complex = repr(_dtype.default_complex_dtype())
        if dtype_name not in (default_name, default_complex, "torch.int64", "torch.bool"):
            extra.append(f"dtype={dtype_name}")
        summarize = data.size > PRINT_OPTS.threshold
        shown = _summarized(data) if summarize else data
        fmt = (_ComplexFormatter if data.dtype.kind == "c" else _Formatter)(shown)
        body = _render(data, indent, summarize, fmt)
    return _add_suffixes(prefix + body, extra + list(suffixes), indent)
