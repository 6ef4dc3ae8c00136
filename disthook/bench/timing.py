"""Timing shared by every suite: the sides of a comparison timed in turn, round by round.

A slow spell of a shared machine then falls on every side alike, and a ratio is the median
of the rounds' ratios rather than the ratio of two medians. This module imports no suite.
"""
from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Sequence


def paired(fns: Sequence[Callable], repeats: int, inner: int = 1,
           clock: Callable[[], float] | None = None) -> list[list[float]]:
    """Seconds per call of each of ``fns`` over ``repeats`` rounds, each round running
    ``inner`` calls of every one in turn (after one warm-up call of each), so that the
    machine's drift hits them alike; compare them round by round with ``paired_ratio``.
    ``clock``: wall time (``time.perf_counter``) by default; ``time.thread_time`` for the
    work done in this thread only (what other processes take of a shared machine's cores is
    then not counted)."""
    clock = clock or time.perf_counter
    for fn in fns:
        fn()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for fn, out in zip(fns, times):
            t0 = clock()
            for _ in range(inner):
                fn()
            out.append((clock() - t0) / inner)
    return times


def median_seconds(fn: Callable, repeats: int, inner: int = 1) -> float:
    """Median seconds per call of ``fn`` over ``repeats`` rounds of ``inner`` calls, after a
    warm-up call."""
    return statistics.median(paired([fn], repeats, inner)[0])


def paired_ratio(ours: Sequence[float], baseline: Sequence[float]) -> float:
    """The median over rounds of ours / baseline (times from the same rounds of ``paired``)."""
    return statistics.median(a / b for a, b in zip(ours, baseline))


def measure(workload: Callable, libs: list, repeats: int, inner: int,
            clock: Callable[[], float] | None = None) -> tuple[list[float], float | None]:
    """Median seconds per call of ``workload(lib)`` with each library, and the ratio of the
    first to the second (None with one library).

    Each round times every library in turn, so that a slow spell of the machine falls on
    both; the ratio is the median of the rounds' ratios. For a workload that returns a
    (hooked, plain) pair the figure is the median difference hooked - plain, both sides
    timed in the same round, and the ratio that of the medians (a difference is too noisy
    to divide round by round).
    """
    made = [workload(lib) for lib in libs]
    if not isinstance(made[0], tuple):
        times = paired(made, repeats, inner, clock)
        ratio = paired_ratio(times[0], times[1]) if len(times) > 1 else None
        return [statistics.median(t) for t in times], ratio
    sides = paired([fn for pair in made for fn in pair], repeats, inner, clock)
    diffs = [statistics.median(a - b for a, b in zip(sides[2 * i], sides[2 * i + 1]))
             for i in range(len(made))]
    ratio = diffs[0] / diffs[1] if len(diffs) > 1 and diffs[1] > 0 else None
    return diffs, ratio


def cpu_seconds(pid: int) -> float:
    """CPU time of process ``pid`` (all its threads alive), from the scheduler's nanosecond
    count."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except FileNotFoundError:  # the thread ended meanwhile
            pass
    return total / 1e9


def io_thread_seconds(pid: int) -> float:
    """CPU seconds of the ZeroMQ I/O threads of process ``pid`` (named ``ZMQbg/IO/<n>``;
    0 where /proc does not tell)."""
    total = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0.0
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                if not f.read().startswith("ZMQbg/IO"):
                    continue
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):  # the thread ended meanwhile
            pass
    return total / 1e9
