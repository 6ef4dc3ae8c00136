"""CUDA does not exist in disthook; these answers let device-agnostic torch code run.

What a CPU-only torch build answers, disthook answers: the queries real scripts call without
a guard (``empty_cache()``, ``memory_allocated()``, ``is_initialized()`` ...) give torch's
values, and the calls that need a GPU (``synchronize()``, ``current_device()``,
``get_device_name()`` ...) raise torch's AssertionError.

``torch.cuda.amp`` is here too (``disthook.cuda.amp``), as torch's deprecated spelling of
``torch.amp`` for "cuda": its scaler and autocast warn and disable themselves, as torch's do
without CUDA.
"""
from __future__ import annotations

import warnings
from collections import OrderedDict

from disthook.cuda import amp  # noqa: F401
from disthook.tensor import no_cuda

_initialized = False  # read without a guard by reversible blocks (lucidrains') before
# they record a GPU's random state; a CPU-only torch has it False


class OutOfMemoryError(RuntimeError):
    """``torch.OutOfMemoryError`` (``torch.cuda.OutOfMemoryError`` too): an accelerator's
    memory ran out. Computing on the CPU never raises it, as in a CPU-only torch; programs
    name it in ``except`` clauses, which need a real exception class."""


def is_available() -> bool:
    return False


def is_initialized() -> bool:
    return False


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return False


def is_tf32_supported() -> bool:
    return False


def device_count() -> int:
    return 0


def get_arch_list() -> list:
    return []


# ---- seeds and caches: nothing to seed, free or count without a GPU ----

def manual_seed(seed: int) -> None:
    pass


def manual_seed_all(seed: int) -> None:
    pass


def seed() -> None:
    pass


def seed_all() -> None:
    pass


def get_rng_state_all() -> list:
    return []


def empty_cache() -> None:
    """Frees nothing: there is no GPU cache (torch without CUDA does the same)."""


def memory_allocated(device=None) -> int:
    return 0


def max_memory_allocated(device=None) -> int:
    return 0


def memory_reserved(device=None) -> int:
    return 0


def max_memory_reserved(device=None) -> int:
    return 0


def memory_cached(device=None) -> int:
    warnings.warn("torch.cuda.memory_cached has been renamed to torch.cuda.memory_reserved",
                  FutureWarning, stacklevel=2)
    return 0


def memory_stats(device=None) -> OrderedDict:
    return OrderedDict()


# ---- calls that need a GPU: torch's AssertionError ----

def _needs_cuda(*args, **kwargs):
    raise no_cuda()


synchronize = init = ipc_collect = current_device = _needs_cuda
get_device_name = get_device_properties = get_device_capability = mem_get_info = _needs_cuda
current_stream = default_stream = get_rng_state = initial_seed = _needs_cuda
