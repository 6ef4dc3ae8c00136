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
