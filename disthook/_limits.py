"""``torch.finfo`` / ``torch.iinfo`` (a dtype's numeric limits), the constants torch exports
(``inf``, ``nan``, ``pi``, ``e``, ``newaxis``) and the memory formats (names; the strides each
gives a new tensor are disthook._strides')."""
from __future__ import annotations

import math

import numpy as np

__all__ = ["channels_last", "channels_last_3d", "contiguous_format", "e", "finfo", "iinfo",
           "inf", "memory_format", "nan", "newaxis", "pi", "preserve_format"]

inf, nan, pi, e, newaxis = math.inf, math.nan, math.pi, math.e, None


def _np_dtype(dtype, kinds: str, what: str):
    from disthook import _dtype

    dt = _dtype.get_default_dtype() if dtype is None else dtype
    if not isinstance(dt, _dtype.dtype):
        raise TypeError(f"{what}(): argument 'type' must be torch.dtype, not "
                        f"{type(dtype).__name__}")
    if dt is _dtype.bool:
        raise TypeError(f"torch.bool is not supported by torch.{what}")
    if np.dtype(dt.np).kind not in kinds:
        if kinds == "f":
            raise TypeError("torch.finfo() requires a floating point input type. Use "
                            "torch.iinfo to handle 'torch.finfo'")
        raise TypeError("torch.iinfo() requires an integer input type. Use torch.finfo to "
                        "handle 'torch.iinfo'")
    return dt, np.dtype(dt.np)


class finfo:
    """The limits of a floating point dtype (default: the default dtype)."""

    def __init__(self, type=None):  # noqa: A002 - torch's argument name
        from disthook import _dtype

        if type is _dtype.bfloat16:  # (numpy has no bfloat16: its limits, as torch gives them)
            self.bits, self.eps, self.resolution = 16, 2.0 ** -7, 0.01
            self.max = (2 - 2.0 ** -7) * 2.0 ** 127
            self.min, self.tiny = -self.max, float(np.finfo(np.float32).tiny)
            self.smallest_normal, self.dtype = self.tiny, "bfloat16"
            return
        dt, npd = _np_dtype(type, "f", "finfo")
        info = np.finfo(npd)
        self.bits = int(info.bits)
        self.eps = float(info.eps)
        self.max = float(info.max)
        self.min = float(info.min)
        self.tiny = self.smallest_normal = float(info.tiny)
        self.resolution = 10.0 ** -int(info.precision)  # (numpy's, rounded in its dtype)
        self.dtype = str(dt).removeprefix("torch.")

    def __repr__(self) -> str:
        return (f"finfo(resolution={self.resolution:g}, min={self.min:g}, max={self.max:g}, "
                f"eps={self.eps:g}, smallest_normal={self.smallest_normal:g}, "
                f"tiny={self.tiny:g}, dtype={self.dtype})")


class iinfo:
    """The limits of an integer dtype."""

    def __init__(self, type):  # noqa: A002 - torch's argument name
        dt, npd = _np_dtype(type, "iu", "iinfo")
        info = np.iinfo(npd)
        self.bits, self.max, self.min = int(info.bits), int(info.max), int(info.min)
        self.dtype = str(dt).removeprefix("torch.")

    def __repr__(self) -> str:
        return f"iinfo(min={self.min:g}, max={self.max:g}, dtype={self.dtype})"


class memory_format:
    """A memory format's name (its strides: disthook._strides)."""

    def __init__(self, name: str):
        self._name = name

    def __repr__(self) -> str:
        return f"torch.{self._name}"


contiguous_format = memory_format("contiguous_format")
channels_last = memory_format("channels_last")
channels_last_3d = memory_format("channels_last_3d")
preserve_format = memory_format("preserve_format")


def check_memory_format(value, fn: str) -> None:
    """A ``memory_format=`` keyword as torch checks it (``fn`` names the function): None or a
    memory format (the layout it asks for: disthook._strides)."""
    if value is not None and not isinstance(value, memory_format):
        raise TypeError(f"{fn}(): argument 'memory_format' must be torch.memory_format, not "
                        f"{type(value).__name__}")
