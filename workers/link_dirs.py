"""Where a worker's local link socket lives (``workers.links.LinkListener``): a fresh
directory private to its user under ``$XDG_RUNTIME_DIR`` or the temp directory
(``link_base``), named by the worker's pid, and the directories of killed workers, which
SIGKILL leaves behind, removed by a later worker (``remove_stale``)."""
from __future__ import annotations

import os
import tempfile
import time

from deploy.pids import gone

__all__ = ["PATH_MAX", "PREFIX_DIR", "STALE_AFTER_S", "link_base", "remove_stale"]

STALE_AFTER_S = 60.0  # a link directory left by a killed worker is removed after this
PATH_MAX = 107  # bytes of a Unix socket's path (sun_path holds 108 with its NUL)
PREFIX_DIR = "disthook-links-"  # then the worker's pid, a dash and mkdtemp's letters


def remove_stale(base: str | None) -> int:
    """Remove the link directories of this user's workers that were killed (SIGKILL leaves
    them): one whose worker, named by the pid in its name, no longer runs, made over
    ``STALE_AFTER_S`` ago. Nothing is sent to a live worker's socket to learn it. How many
    went."""
    base = base or tempfile.gettempdir()
    removed = 0
    try:
        names = [n for n in os.listdir(base) if n.startswith(PREFIX_DIR)]
    except OSError:
        return 0
    for name in names:
        pid = name[len(PREFIX_DIR):].partition("-")[0]
        if not pid.isdigit() or not gone(int(pid)):
            continue  # a live worker's (or not a name this module makes)
        directory = os.path.join(base, name)
        path = os.path.join(directory, "worker.sock")
        try:
            info = os.lstat(directory)
            if info.st_uid != os.getuid() or time.time() - info.st_mtime < STALE_AFTER_S:
                continue
            if os.path.lexists(path):
                os.unlink(path)
            os.rmdir(directory)
            removed += 1
        except OSError:
            continue  # (another worker removed it meanwhile, or it holds something else)
    return removed


def link_base() -> str:
    """Where a worker makes its link directory: ``$XDG_RUNTIME_DIR`` where it is usable,
    else the temp directory, else /tmp, the first whose socket path fits a Unix socket's
    address (108 bytes on Linux); ``OSError`` where none does."""
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    for base in (xdg, tempfile.gettempdir(), "/tmp"):
        if not (base and os.path.isdir(base) and os.access(base, os.W_OK)):
            continue
        longest = os.path.join(base, f"{PREFIX_DIR}{os.getpid()}-xxxxxxxx", "worker.sock")
        if len(os.fsencode(longest)) <= PATH_MAX:
            return base
    raise OSError(f"no directory for a local link's socket: $XDG_RUNTIME_DIR ({xdg}), the "
                  f"temp directory ({tempfile.gettempdir()}) and /tmp are too long for a Unix "
                  f"socket's {PATH_MAX}-byte path or not writable")
