"""CUDA does not exist in disthook; these answers let device-agnostic torch code run."""


def is_available() -> bool:
    return False


def device_count() -> int:
    return 0


def manual_seed(seed: int) -> None:
    pass


def manual_seed_all(seed: int) -> None:
    pass
