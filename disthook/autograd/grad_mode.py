"""Grad mode: whether ops record a graph. Thread-local, like torch's."""
from __future__ import annotations

import functools
import threading


class _State(threading.local):
    enabled = True


_state = _State()


def is_grad_enabled() -> bool:
    return _state.enabled


class _Mode:
    """Base of the grad-mode context managers; each also works as a decorator."""

    mode = True

    def __enter__(self):
        self._prev = _state.enabled
        _state.enabled = self.mode

    def __exit__(self, *exc):
        _state.enabled = self._prev
        return False

    def _fresh(self) -> "_Mode":
        return type(self)()

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self._fresh():
                return fn(*args, **kwargs)

        return wrapper


class no_grad(_Mode):
    """Ops inside record no graph."""

    mode = False


class enable_grad(_Mode):
    """Ops inside record a graph, even within no_grad."""

    mode = True


class inference_mode(_Mode):
    """Like no_grad (disthook has no separate inference tensors)."""

    def __init__(self, mode: bool = True):
        self.mode = not mode

    def _fresh(self) -> "_Mode":
        return inference_mode(not self.mode)


class set_grad_enabled(_Mode):
    """Sets grad mode at once; as a context manager it restores the previous mode on exit."""

    def __init__(self, mode: bool):
        self._prev = _state.enabled
        self.mode = bool(mode)
        _state.enabled = self.mode

    def __enter__(self):
        pass

    def _fresh(self) -> "_Mode":
        return _Scoped(self.mode)


class _Scoped(_Mode):
    def __init__(self, mode: bool):
        self.mode = mode
