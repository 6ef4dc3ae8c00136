"""Padding layers: constant (and zero), reflection, replication and circular, over the last
1, 2 or 3 dims, each a call of ``F.pad`` with its stored widths."""
from __future__ import annotations

from disthook.nn import functional as F
from disthook.nn.modules.module import Module
from disthook.tensor import Tensor


class _PadNd(Module):
    """``padding`` is one int for every side or ``2 * dims`` ints, last dim first."""

    dims = 0
    mode = "constant"

    def __init__(self, padding) -> None:
        super().__init__()
        self.padding = F._ntuple(padding, 2 * self.dims)

    def _check_input_dim(self, input: Tensor) -> None:
        if input.ndim not in (self.dims + 1, self.dims + 2):
            raise ValueError(f"expected {self.dims + 1}D or {self.dims + 2}D input (got "
                             f"{input.ndim}D input)")

    def forward(self, input: Tensor) -> Tensor:
        if self.mode == "circular":
            self._check_input_dim(input)
        return F.pad(input, self.padding, self.mode)

    def extra_repr(self) -> str:
        return f"{self.padding}"


class _ConstantPadNd(_PadNd):
    def __init__(self, padding, value: float) -> None:
        super().__init__(padding)
        self.value = value

    def forward(self, input: Tensor) -> Tensor:
        return F.pad(input, self.padding, "constant", self.value)

    def extra_repr(self) -> str:
        return f"padding={self.padding}, value={self.value}"


class ConstantPad1d(_ConstantPadNd):
    dims = 1


class ConstantPad2d(_ConstantPadNd):
    dims = 2


class ConstantPad3d(_ConstantPadNd):
    dims = 3


class _ZeroPad:
    """Zero padding: a constant pad of 0 (a subclass of its ConstantPad, as in torch)."""

    def __init__(self, padding) -> None:
        super().__init__(padding, 0.0)

    def extra_repr(self) -> str:
        return f"{self.padding}"


class ZeroPad1d(_ZeroPad, ConstantPad1d):
    pass


class ZeroPad2d(_ZeroPad, ConstantPad2d):
    pass


class ZeroPad3d(_ZeroPad, ConstantPad3d):
    pass


class ReflectionPad1d(_PadNd):
    dims, mode = 1, "reflect"


class ReflectionPad2d(_PadNd):
    dims, mode = 2, "reflect"


class ReflectionPad3d(_PadNd):
    dims, mode = 3, "reflect"


class ReplicationPad1d(_PadNd):
    dims, mode = 1, "replicate"


class ReplicationPad2d(_PadNd):
    dims, mode = 2, "replicate"


class ReplicationPad3d(_PadNd):
    dims, mode = 3, "replicate"


class CircularPad1d(_PadNd):
    dims, mode = 1, "circular"


class CircularPad2d(_PadNd):
    dims, mode = 2, "circular"


class CircularPad3d(_PadNd):
    dims, mode = 3, "circular"
