"""Whether a process still runs, by its pid (the standard library only: workers import it
at start, the local launcher too)."""
from __future__ import annotations

import os

__all__ = ["gone"]


def gone(pid: int) -> bool:
    """Whether process ``pid`` no longer runs: there is none, or it is a zombie (ended, its
    status not yet taken by its parent). A process of another user runs."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:  # (no /proc: it answered the signal, so it runs)
        return not os.path.isdir("/proc")
