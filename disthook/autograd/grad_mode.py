"""Grad mode: whether ops record a graph. Thread-local, like torch's."""
from __future__ import annotations

import functools
import inspect
import threading


class _State(threading.local):
    enabled = True  # whether ops record a graph
    inference = False
    # the grad mode the program last set; inside inference_mode ops record nothing whatever
    # it is (enable_grad there shows True, as in torch, and records nothing)
    shown = True


_state = _State()


def is_grad_enabled() -> bool:
    """Whether ops record a graph now (the library's own question; the program's
    ``torch.is_grad_enabled()`` is ``grad_mode_shown``)."""
    return _state.enabled


def grad_mode_shown() -> bool:
    """``torch.is_grad_enabled()``: the grad mode set, which inside inference_mode may be
    on (an ``enable_grad`` there) while nothing records."""
    return _state.shown if _state.inference else _state.enabled


def _set(mode: bool) -> None:
    _state.shown = mode
    _state.enabled = mode and not _state.inference


def is_inference_mode_enabled() -> bool:
    return _state.inference


class _Mode:
    """Base of the grad-mode context managers; each also works as a decorator."""

    mode = True

    def __enter__(self):
        self._prev = _state.enabled, _state.shown
        _set(self.mode)

    def __exit__(self, *exc):
        _state.enabled, _state.shown = self._prev
        return False

    def _fresh(self) -> "_Mode":
        return type(self)()

    def __call__(self, fn):
        if inspect.isgeneratorfunction(fn):
            return self._wrap_generator(fn)

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self._fresh():
                return fn(*args, **kwargs)

        return wrapper

    def _wrap_generator(self, fn):
        """The mode holds inside the generator's body only: it is entered at each resume and
        left at each yield, so the caller's code between yields keeps its own mode."""

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            gen = fn(*args, **kwargs)
            try:
                with self._fresh():
                    value = gen.send(None)
                while True:
                    try:
                        sent = yield value
                    except GeneratorExit:
                        with self._fresh():
                            gen.close()
                        raise
                    except BaseException as exc:
                        with self._fresh():
                            value = gen.throw(exc)
                    else:
                        with self._fresh():
                            value = gen.send(sent)
            except StopIteration as stop:
                return stop.value

        return wrapper


class _BareDecorator(_Mode):
    """A mode usable as ``@mode`` as well as ``@mode()``."""

    def __new__(cls, fn=None):
        if fn is None:
            return super().__new__(cls)
        return cls()(fn)


class no_grad(_BareDecorator):
    """Ops inside record no graph."""

    mode = False


class enable_grad(_BareDecorator):
    """Ops inside record a graph, even within no_grad."""

    mode = True


class inference_mode(_Mode):
    """No graph is recorded inside, and the tensors made inside are inference tensors (see
    ``autograd/inference.py``); ``inference_mode(False)`` enables grad."""

    def __new__(cls, mode=True):
        if isinstance(mode, bool):
            return super().__new__(cls)
        return cls()(mode)  # used bare: @inference_mode

    def __init__(self, mode: bool = True):
        self.inference = mode
        self.mode = not mode

    def __enter__(self):
        if self.inference:
            from disthook.autograd import inference

            inference.entered()
        self._prev_inference = _state.inference
        _state.inference = self.inference
        super().__enter__()

    def __exit__(self, *exc):
        _state.inference = self._prev_inference
        if self.inference:
            from disthook.autograd import inference

            inference.left()
        return super().__exit__(*exc)

    def _fresh(self) -> "_Mode":
        return inference_mode(self.inference)


class set_grad_enabled(_Mode):
    """Sets grad mode at once; as a context manager it restores the previous mode on exit."""

    def __init__(self, mode: bool):
        self._prev = _state.enabled, _state.shown
        self.mode = bool(mode)
        _set(self.mode)

    def __enter__(self):
        pass

    def __call__(self, fn):
        _state.enabled, _state.shown = self._prev  # a decorator: the mode holds in fn only
        return super().__call__(fn)

    def _fresh(self) -> "_Mode":
        return _Scoped(self.mode)


class _Scoped(_Mode):
    def __init__(self, mode: bool):
        self.mode = mode
