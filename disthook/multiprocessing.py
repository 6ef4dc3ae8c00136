"""``torch.multiprocessing``: Python's multiprocessing, plus ``spawn``.

disthook tensors are numpy arrays and cross process boundaries by copy (pickled by value
like any object): there is no shared-memory tensor passing, so ``share_memory_()`` and
the sharing strategies give no sharing. ``set_sharing_strategy`` accepts torch's names and
changes nothing.
"""
from __future__ import annotations

import multiprocessing as _mp
from multiprocessing import (  # noqa: F401 - re-exported like torch does
    Array,
    Barrier,
    Condition,
    Event,
    JoinableQueue,
    Lock,
    Manager,
    Pipe,
    Pool,
    Process,
    Queue,
    RLock,
    Semaphore,
    SimpleQueue,
    Value,
    active_children,
    cpu_count,
    current_process,
    get_all_start_methods,
    get_context,
    get_start_method,
    set_start_method,
)

_STRATEGIES = {"file_descriptor", "file_system"}
_strategy = "file_descriptor"


def get_all_sharing_strategies() -> set:
    return set(_STRATEGIES)


def get_sharing_strategy() -> str:
    return _strategy


def set_sharing_strategy(new_strategy: str) -> None:
    """Recorded only: tensors are copied between processes whatever the strategy."""
    global _strategy
    if new_strategy not in _STRATEGIES:
        raise AssertionError(f"invalid sharing strategy {new_strategy!r}")
    _strategy = new_strategy


class ProcessRaisedException(Exception):
    """A spawned process raised: its traceback text is the message."""


class ProcessExitedException(Exception):
    """A spawned process exited with a non-zero code."""

    def __init__(self, msg: str, error_index: int, error_pid: int, exit_code: int) -> None:
        super().__init__(msg)
        self.error_index, self.error_pid, self.exit_code = error_index, error_pid, exit_code


def _wrap(fn, index: int, args: tuple, errors) -> None:
    import traceback

    try:
        fn(index, *args)
    except Exception:
        errors.put((index, traceback.format_exc()))
        raise SystemExit(1) from None


class ProcessContext:
    def __init__(self, processes: list, errors) -> None:
        self.processes = processes
        self.errors = errors

    def pids(self) -> list:
        return [p.pid for p in self.processes]

    def join(self, timeout: float | None = None) -> bool:
        """Wait for every process; raise if one failed. True once all have ended."""
        for p in self.processes:
            p.join(timeout)
        if not self.errors.empty():
            index, text = self.errors.get()
            for p in self.processes:
                if p.is_alive():
                    p.terminate()
            raise ProcessRaisedException(f"\n\n-- Process {index} terminated with the "
                                         f"following error:\n{text}")
        for i, p in enumerate(self.processes):
            if p.exitcode not in (0, None):
                raise ProcessExitedException(
                    f"process {i} terminated with exit code {p.exitcode}", i, p.pid,
                    p.exitcode)
        return all(not p.is_alive() for p in self.processes)


def start_processes(fn, args=(), nprocs: int = 1, join: bool = True, daemon: bool = False,
                    start_method: str = "spawn"):
    ctx = _mp.get_context(start_method)
    errors = ctx.SimpleQueue()
    processes = []
    for i in range(nprocs):
        p = ctx.Process(target=_wrap, args=(fn, i, tuple(args), errors), daemon=daemon)
        p.start()
        processes.append(p)
    context = ProcessContext(processes, errors)
    if not join:
        return context
    while not context.join():
        pass
    return None


def spawn(fn, args=(), nprocs: int = 1, join: bool = True, daemon: bool = False,
          start_method: str = "spawn"):
    """Run ``fn(i, *args)`` in ``nprocs`` new processes (i = 0 .. nprocs-1)."""
    return start_processes(fn, args, nprocs, join, daemon, start_method)
