"""Hooks on the tensors autograd saves for backward (``torch.autograd.graph``'s
``saved_tensors_hooks``, ``save_on_cpu``, ``disable_saved_tensors_hooks``).

While a ``saved_tensors_hooks(pack, unpack)`` context is active, every tensor an op saves
is handed to ``pack`` (under no_grad) and only what ``pack`` returns is kept; ``unpack``
turns it back into a tensor each time backward (or ``ctx.saved_tensors``) reads it. Only
the innermost pair applies. The stack is per thread, as torch's.
"""
from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["disable_saved_tensors_hooks", "save_on_cpu", "saved_tensors_hooks"]


class _Stack(threading.local):
    def __init__(self) -> None:
        self.pairs: list = []  # (pack_hook, unpack_hook), innermost last
        self.disabled_msg: str | None = None


_tls = _Stack()


def current_pair() -> tuple | None:
    """The (pack, unpack) pair that applies to a tensor saved now, or None."""
    pairs = _tls.pairs
    return pairs[-1] if pairs else None


def snapshot() -> tuple:
    """This thread's hook stack and disabled state, for restore() after a backward."""
    return list(_tls.pairs), _tls.disabled_msg


def restore(state: tuple) -> None:
    _tls.pairs[:] = state[0]
    _tls.disabled_msg = state[1]


class saved_tensors_hooks:
    """Context manager: ``pack_hook(tensor) -> Any`` when a tensor is saved for backward,
    ``unpack_hook(packed) -> Tensor`` when it is read back."""

    def __init__(self, pack_hook: Callable, unpack_hook: Callable) -> None:
        self.pack_hook = pack_hook
        self.unpack_hook = unpack_hook

    def __enter__(self) -> None:
        if _tls.disabled_msg is not None:
            raise RuntimeError(_tls.disabled_msg)
        _tls.pairs.append((self.pack_hook, self.unpack_hook))

    def __exit__(self, *exc) -> None:
        if not _tls.pairs:  # torch's internal assert on popping an empty stack
            raise RuntimeError("is_initialized && !tls.stack.empty() INTERNAL ASSERT FAILED: "
                               "saved_tensors_hooks exited more times than it was entered")
        _tls.pairs.pop()


class save_on_cpu(saved_tensors_hooks):
    """Keep saved tensors in CPU memory. disthook tensors always live there: as in torch,
    a saved tensor is then kept as it is (its memory: an in-place change made after the
    forward reaches its backward, unchecked, as under any saved-tensor hooks), and as a copy
    with ``pin_memory=True``."""

    def __init__(self, pin_memory: bool = False, device_type: str = "cuda") -> None:
        def pack(tensor):
            return tensor.device, tensor.detach().clone() if pin_memory else tensor.detach()

        def unpack(packed):
            _device, tensor = packed
            return tensor

        pack.keeps_values = True  # a deployed part may run inside (distributed.glue)
        super().__init__(pack, unpack)


class disable_saved_tensors_hooks:
    """Context manager (and decorator) under which registering saved-tensor hooks raises
    ``RuntimeError(error_message)``; entering it while hooks are active raises too."""

    def __init__(self, error_message: str) -> None:
        self.error_message = error_message

    def __enter__(self) -> None:
        if _tls.pairs:
            raise RuntimeError(self.error_message)
        self.prev = _tls.disabled_msg
        _tls.disabled_msg = self.error_message

    def __exit__(self, *exc) -> None:
        _tls.disabled_msg = self.prev

    def __call__(self, fn: Callable) -> Callable:
        import functools

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with disable_saved_tensors_hooks(self.error_message):
                return fn(*args, **kwargs)

        return wrapper
