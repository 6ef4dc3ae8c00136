"""``torch.xpu``: Intel's GPU backend, not there, with the answers of a torch build without it
(device pickers ask ``torch.xpu.is_available()``)."""


def is_available() -> bool:
    return False


def is_initialized() -> bool:
    return False


def device_count() -> int:
    return 0


def empty_cache() -> None:
    pass


def manual_seed(seed: int) -> None:
    pass


def manual_seed_all(seed: int) -> None:
    pass


def synchronize(device=None) -> None:
    raise AssertionError("Torch not compiled with XPU enabled")


current_device = synchronize
