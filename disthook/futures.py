"""``torch.futures``: a thread-safe Future for values computed elsewhere (in disthook, by
another thread of this process). ``then`` and ``add_done_callback`` run their callback in
the thread that completes the future, or at once if it is already done."""
from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["Future", "collect_all", "wait_all"]

T = TypeVar("T")


class Future(Generic[T]):
    """Holds a value (or an exception) set once, perhaps by another thread. Generic in the
    value's type, as torch's is, so ``Future[Tensor]`` works as an annotation."""

    def __init__(self, *, devices=None) -> None:
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._result = None
        self._exception: BaseException | None = None
        self._callbacks: list = []

    def done(self) -> bool:
        return self._done.is_set()

    def wait(self) -> T:
        """Block until done; the value, or the exception set on the future raised."""
        self._done.wait()
        return self.value()

    def value(self) -> T:
        if not self._done.is_set():
            raise RuntimeError("Future.value() called on a Future that is not completed yet")
        if self._exception is not None:
            raise self._exception
        return self._result

    def set_result(self, result: T) -> None:
        self._complete(result, None)

    def set_exception(self, result: BaseException) -> None:
        if not isinstance(result, BaseException):
            raise TypeError(f"{result} is of type {type(result)}, not an Exception.")
        self._complete(None, result)

    def _complete(self, result, exception) -> None:
        with self._lock:
            if self._done.is_set():
                raise RuntimeError("Future can only be marked completed once.")
            self._result, self._exception = result, exception
            self._done.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(self)

    def add_done_callback(self, callback: Callable[[Future], None]) -> None:
        with self._lock:
            if not self._done.is_set():
                self._callbacks.append(callback)
                return
        callback(self)

    def then(self, callback: Callable[[Future], object]) -> Future:
        """A new Future holding ``callback(self)`` (or the exception it raised)."""
        out = Future()

        def run(fut: Future) -> None:
            try:
                out.set_result(callback(fut))
            except Exception as e:  # the chained future carries the callback's error
                out.set_exception(e)

        self.add_done_callback(run)
        return out


def collect_all(futures: list) -> Future:
    """A Future that completes, with the list of ``futures``, once all of them are done."""
    out = Future()
    futures = list(futures)
    remaining = [len(futures)]
    lock = threading.Lock()
    if not futures:
        out.set_result([])
        return out

    def one_done(_fut: Future) -> None:
        with lock:
            remaining[0] -= 1
            last = remaining[0] == 0
        if last:
            out.set_result(futures)

    for fut in futures:
        fut.add_done_callback(one_done)
    return out


def wait_all(futures: list) -> list:
    """The values of ``futures`` once all are done; the first exception is raised."""
    return [fut.wait() for fut in collect_all(futures).wait()]
