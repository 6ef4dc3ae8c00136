"""How many threads a worker's arithmetic uses (BLAS, OpenMP), fixed before numpy loads.

numpy's BLAS reads its thread count from the environment once, when it loads; by default
it takes every core. Several workers on one machine would then each run as many threads as
there are cores, and OpenBLAS's threads spin while they wait: the processes take the cores
from one another. ``python -m workers --threads N`` sets the count before anything imports
numpy (``local_cluster`` passes each of its workers its share of the cores)."""
from __future__ import annotations

import os

__all__ = ["THREAD_VARS", "apply_from_argv", "blas_threads", "from_argv", "share_of_cores"]

# the variables BLAS and OpenMP builds read (numpy's OpenBLAS, MKL, Accelerate, numexpr)
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
               "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")


def apply_from_argv(argv: list[str]) -> None:
    """Set every thread variable to the value of ``--threads N`` (or ``--threads=N``) in
    ``argv``, when there is one and it is a positive int (the worker's argument parser says
    what is wrong with any other)."""
    os.environ.update(from_argv(argv))


def from_argv(argv: list[str]) -> dict[str, str]:
    """The thread variables ``apply_from_argv`` sets for ``argv`` ({} when it sets none):
    what a worker's environment holds when numpy loads."""
    value = None
    for i, arg in enumerate(argv):
        if arg == "--threads" and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith("--threads="):
            value = arg.partition("=")[2]
    if value is not None and value.isdigit() and int(value) >= 1:
        return dict.fromkeys(THREAD_VARS, value)
    return {}


def share_of_cores(processes: int) -> int | None:
    """The threads each of ``processes`` processes on this machine gets: its share of the
    cores this process may run on (at least 1), or None when the environment already sets a
    thread count (that one is kept)."""
    if any(os.environ.get(var) for var in THREAD_VARS):
        return None
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cores = os.cpu_count() or 1
    return max(1, cores // max(1, processes))


def blas_threads() -> int | None:
    """The thread count this process's environment sets for OpenBLAS (or OpenMP), None when
    it sets none (numpy's BLAS then takes every core)."""
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
        value = os.environ.get(var, "")
        if value.isdigit():
            return int(value)
    return None
