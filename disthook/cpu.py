"""``torch.cpu``: the device-module answers for the CPU, so that device-agnostic code
(``getattr(torch, device.type).synchronize()``) runs when the device is the CPU."""


def is_available() -> bool:
    return True


def is_initialized() -> bool:
    return True


def device_count() -> int:
    return 1


def current_device() -> str:
    return "cpu"


def synchronize(device=None) -> None:
    """Nothing to wait for: every op has finished when it returns."""


def _amp_module():
    """``torch.cpu.amp``: CPU autocast under its deprecated spelling."""
    import sys
    import types

    from disthook.amp.autocast_mode import cpu_autocast

    amp = types.ModuleType(f"{__name__}.amp", _amp_module.__doc__)
    amp.autocast = cpu_autocast
    sys.modules[amp.__name__] = amp
    return amp


def __getattr__(name: str):
    if name == "amp":
        return _amp_module()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
