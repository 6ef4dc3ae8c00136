"""A worker's warning, issued in the client's program as one process would issue it."""
from __future__ import annotations

import warnings

from disthook import wire

__all__ = ["issue_warning"]

_WARNING_CLASSES = {cls.__name__: cls for cls in (
    Warning, UserWarning, DeprecationWarning, PendingDeprecationWarning, SyntaxWarning,
    RuntimeWarning, FutureWarning, ImportWarning, UnicodeWarning, BytesWarning,
    ResourceWarning)}


def issue_warning(msg: wire.Message) -> None:
    """A worker's warning, as the client's own (its category kept when it is a built-in)."""
    from disthook.utils.hooks import _caller_stacklevel

    category = _WARNING_CLASSES.get(msg["category"], UserWarning)
    # pointed at the user's line that made the call, as a warning in one process would be
    warnings.warn(msg["message"], category, stacklevel=_caller_stacklevel())
