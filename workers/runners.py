"""Threads that take turns: exactly one runs the worker at any time.

A worker's jobs run the model's own code, which calls hooks synchronously; a client hook's
answer, or a neighbour's activation, can only be waited for by stopping that call stack. So
a job that must wait parks its thread, and the role of running the socket loop (the
"shell") passes to another thread, which goes on serving everyone else. When the shell sees
the answer come, it hands the turn back to the parked job and parks itself. Nothing runs
side by side: every hand-over is "wake that one, then sleep", so the sockets, the state and
the modules are only ever touched by the one thread whose turn it is (the semaphores are
the memory barrier ZeroMQ asks for when a socket changes threads).

A request that does not wait costs nothing here: its job runs inline in the shell's loop.
"""
from __future__ import annotations

import collections
import threading
from typing import Callable

__all__ = ["Runners"]


class _Turn:
    """A thread of the worker and the semaphore it sleeps on while it is not its turn."""

    __slots__ = ("sem", "thread")

    def __init__(self, thread: threading.Thread | None = None):
        self.thread = thread
        self.sem = threading.Semaphore(0)


class Runners:
    """The worker's threads: ``run()`` serves on the calling thread until ``stop()``;
    ``sleep(current())`` is called by a job that waits; ``resume(turn)`` by the shell for a job
    whose wait ended (it goes on once the shell's current round is over)."""

    def __init__(self, serve_round: Callable[[], None], name: str = "worker"):
        self._serve_round = serve_round  # one poll-and-handle round of the socket loop
        self._name = name
        self._local = threading.local()
        self._idle: list[_Turn] = []  # threads with nothing to do, ready to be the shell
        self._ready: collections.deque[_Turn] = collections.deque()  # parked jobs to resume
        self._main: _Turn | None = None
        self.running = False
        self.threads = 0  # threads made so far besides the main one (for status)
        self.failure: BaseException | None = None  # what broke a helper's loop

    # ---- the shell --------------------------------------------------------------------------
    def run(self) -> None:
        """Serve on this thread until ``stop()``; returns on this same thread."""
        self._main = self._local.turn = _Turn(threading.current_thread())
        self.running = True
        self._shell_loop(self._main)
        if self.failure is not None:  # a bug in the loop on a helper thread: say it here
            raise self.failure

    def stop(self) -> None:
        self.running = False

    def _shell_loop(self, me: _Turn) -> None:
        while self.running:
            self._serve_round()
            if self._ready and self.running:
                self._idle.append(me)  # this thread has nothing left of its own to do
                self._hand_over(me, self._ready.popleft())
        self._wind_down(me)

    def _wind_down(self, me: _Turn) -> None:
        """Stopped: the main thread must run to close the sockets; a job parked on it goes on
        (its wait was ended by the stop) and comes back here."""
        if me is not self._main:
            self._main.sem.release()  # this helper thread ends

    # ---- jobs --------------------------------------------------------------------------------
    def current(self) -> _Turn:
        """The calling thread's turn: what a job about to wait passes to ``sleep``, and the
        shell later to ``resume``."""
        return self._local.turn

    def sleep(self, me: _Turn) -> None:
        """Give the shell to another thread and sleep until ``resume(me)`` came round (or the
        worker stops)."""
        helper = self._idle.pop() if self._idle else self._spawn()
        self._hand_over(me, helper)

    @property
    def ready(self) -> bool:
        """Whether a waiting job may go on (it will, after the current round)."""
        return bool(self._ready)

    def resume(self, turn: _Turn) -> None:
        """The job parked on ``turn`` may go on: it does after the shell's current round."""
        self._ready.append(turn)

    # ---- threads -------------------------------------------------------------------------------
    def _hand_over(self, me: _Turn, to: _Turn) -> None:
        to.sem.release()
        me.sem.acquire()

    def _spawn(self) -> _Turn:
        turn = _Turn()

        def helper() -> None:
            self._local.turn = turn
            turn.sem.acquire()  # until it is handed the shell
            try:
                self._shell_loop(turn)
            except BaseException as exc:  # the worker stops, and run() raises it
                self.failure, self.running = exc, False
                self._main.sem.release()

        self.threads += 1
        turn.thread = threading.Thread(target=helper, name=f"{self._name}-{self.threads}",
                                       daemon=True)
        turn.thread.start()
        return turn
