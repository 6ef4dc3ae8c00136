"""CUDA does not exist in disthook; these answers let device-agnostic torch code run.

``torch.cuda.amp`` is here too (``disthook.cuda.amp``), as torch's deprecated spelling of
``torch.amp`` for "cuda": its scaler and autocast warn and disable themselves, as torch's do
without CUDA.
"""
from disthook.cuda import amp  # noqa: F401


def is_available() -> bool:
    return False


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return False


def device_count() -> int:
    return 0


def manual_seed(seed: int) -> None:
    pass


def manual_seed_all(seed: int) -> None:
    pass
