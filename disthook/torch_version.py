"""``torch.__version__``: the torch version whose semantics disthook follows, as a string
that compares like a version.

disthook reports ``2.13.0+disthook``: programs that check ``torch.__version__ >= "2.0"``
(or against a tuple, or through ``packaging.version``) take their torch-2.13 paths, and
the local label says which implementation runs. As torch's ``TorchVersion`` does, the
comparison is by release numbers, not by characters, so ``"2.13.0" > "2.9"`` holds.
"""
from __future__ import annotations

import re

__all__ = ["TORCH_VERSION", "TorchVersion"]

TORCH_VERSION = "2.13.0+disthook"


def _release(value) -> tuple:
    """(2, 13, 0) from "2.13.0+disthook", "2.13", (2, 13) or "2.1.0a0"."""
    if isinstance(value, (tuple, list)):
        return tuple(int(x) for x in value)
    match = re.match(r"\s*v?(\d+(?:\.\d+)*)", str(value))
    if match is None:
        raise ValueError(f"Invalid version: {value!r}")
    return tuple(int(x) for x in match.group(1).split("."))


def _local(value) -> str:
    return str(value).partition("+")[2] if isinstance(value, str) else ""


def _pad(a: tuple, b: tuple) -> tuple:
    n = max(len(a), len(b))
    return a + (0,) * (n - len(a)), b + (0,) * (n - len(b))


class TorchVersion(str):
    """A str whose comparisons go by version number."""

    def _cmp(self, other) -> tuple:
        return _pad(_release(self), _release(other))

    def __lt__(self, other) -> bool:
        a, b = self._cmp(other)
        return a < b

    def __le__(self, other) -> bool:
        a, b = self._cmp(other)
        return a <= b

    def __gt__(self, other) -> bool:
        a, b = self._cmp(other)
        return a > b

    def __ge__(self, other) -> bool:
        a, b = self._cmp(other)
        return a >= b

    def __eq__(self, other) -> bool:
        """Equal releases and equal local labels ("2.13.0+disthook" != "2.13.0", as
        torch's "2.13.0+cpu" != "2.13.0")."""
        try:
            a, b = self._cmp(other)
        except (ValueError, TypeError):
            return False
        return a == b and _local(self) == _local(other)

    def __ne__(self, other) -> bool:
        return not self.__eq__(other)

    __hash__ = str.__hash__
