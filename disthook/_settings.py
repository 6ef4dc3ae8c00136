"""Process-wide settings that torch programs set and read (threads, determinism, matmul
precision, default device, anomaly mode, default tensor type): a numpy engine on the CPU
answers them trivially, remembering what was set. ``disthook/__init__.py`` exports them."""
from __future__ import annotations

import builtins
import warnings

from disthook import _blas, _dtype

__all__ = [
    "are_deterministic_algorithms_enabled", "get_default_device",
    "get_deterministic_debug_mode", "get_float32_matmul_precision", "get_num_interop_threads",
    "get_num_threads", "is_anomaly_check_nan_enabled", "is_anomaly_enabled",
    "is_deterministic_algorithms_warn_only_enabled", "set_anomaly_enabled",
    "set_default_device", "set_default_tensor_type", "set_deterministic_debug_mode",
    "set_float32_matmul_precision", "set_flush_denormal", "set_num_interop_threads",
    "set_num_threads", "use_deterministic_algorithms",
]


def quiet_float_warnings() -> None:
    """Drop numpy's floating-point warnings raised in disthook's own code (0/0, log(0), an
    overflow, -inf cast to an integer): torch gives nan and inf without a word, so a program
    run with -W error, or one that prints its stderr, sees what it sees under torch. numpy
    called from the program's own code, and whatever else warns, is left as it is. Put in
    front of the filters: a worker, which shows every other warning to its client, calls it
    again after its own ``simplefilter("always")``."""
    warnings.filterwarnings("ignore", FLOAT_WARNING, RuntimeWarning, r"disthook(\.|$)")


# numpy's floating-point warnings (its errstate's "warn"), by the start of their message
FLOAT_WARNING = r"(divide by zero|invalid value|overflow|underflow) encountered"


# ---- process-wide settings: numpy runs on the CPU, deterministically -------------------------------

_settings = {"threads": 1, "interop_threads": 1, "deterministic": False, "warn_only": False,
             "matmul_precision": "highest", "default_device": "cpu"}


def get_num_threads() -> int:
    return _settings["threads"]


def set_num_threads(n: int) -> None:
    n = int(n)
    if n <= 0:
        raise RuntimeError("set_num_threads expects a positive integer")
    _settings["threads"] = n
    _blas.set_threads(n)


def get_num_interop_threads() -> int:
    return _settings["interop_threads"]


def set_num_interop_threads(n: int) -> None:
    _settings["interop_threads"] = int(n)


def use_deterministic_algorithms(mode: bool, *, warn_only: bool = False) -> None:
    _settings["deterministic"], _settings["warn_only"] = builtins.bool(mode), warn_only


def are_deterministic_algorithms_enabled() -> bool:
    return _settings["deterministic"]


def is_deterministic_algorithms_warn_only_enabled() -> bool:
    return _settings["warn_only"]


def set_deterministic_debug_mode(mode) -> None:
    levels = {"default": 0, "warn": 1, "error": 2}
    _settings["deterministic"] = (levels.get(mode, mode) if isinstance(mode, str) else mode) > 0


def get_deterministic_debug_mode() -> int:
    return 2 if _settings["deterministic"] else 0


def set_float32_matmul_precision(precision: str) -> None:
    if precision not in ("highest", "high", "medium"):
        raise RuntimeError(f"Invalid precision {precision}: must be highest, high or medium")
    _settings["matmul_precision"] = precision


def get_float32_matmul_precision() -> str:
    return _settings["matmul_precision"]


def set_default_device(device) -> None:
    from disthook.tensor import _check_device

    if device is not None:
        _check_device(device)


def get_default_device():
    from disthook.tensor import device

    return device("cpu")


def set_flush_denormal(mode: bool) -> bool:
    return False  # numpy cannot change the FPU's denormal mode; torch returns False likewise


def is_anomaly_enabled() -> bool:
    from disthook.autograd import anomaly_mode

    return anomaly_mode.is_anomaly_enabled()


def is_anomaly_check_nan_enabled() -> bool:
    from disthook.autograd import anomaly_mode

    return anomaly_mode.is_anomaly_check_nan_enabled()


def set_anomaly_enabled(enabled: bool, check_nan: bool = True) -> None:
    """Anomaly mode, which lives in ``autograd/anomaly_mode.py``."""
    from disthook.autograd import anomaly_mode

    anomaly_mode.set_anomaly_enabled(enabled, check_nan)


def set_default_tensor_type(t) -> None:
    """Legacy: sets the default floating dtype from a tensor type (``torch.DoubleTensor`` or
    its name)."""
    name = t if isinstance(t, str) else t.dtype.legacy_type
    _dtype.set_default_dtype(_dtype.from_legacy(name))
