"""The local launcher: a cluster's processes as children of this one (what ``local_cluster``
and ``disthook launch`` use). Each child stops by itself when this process is gone
(``--parent-pid``), and runs in its own session, so Ctrl-C reaches only this process.

A child's stderr, unless told where it goes, is copied line by line to this process's
stderr by a thread that keeps its last lines, so that an error can say why a worker died
(``stderr_tail``)."""
from __future__ import annotations

import collections
import os
import subprocess
import sys
import threading

from deploy.roles import Role

__all__ = ["spawn", "stderr_tail", "why_it_ended"]

STDERR_TAIL_LINES = 20  # the last lines of a child's stderr kept for an error message


def spawn(role: Role, stderr=None, *, announce: bool = False) -> subprocess.Popen:
    """Start ``role`` here. With ``announce`` its stdout is a pipe (the coordinator prints
    the endpoint it bound on its first line); otherwise stdout is discarded. ``stderr``: a
    file (or ``subprocess.DEVNULL``) for the child's stderr; None copies it to ours."""
    cmd = [*role.local_argv(sys.executable), "--parent-pid", str(os.getpid())]
    # a worker imports what this process imports (its sys.path, as multiprocessing's spawn
    # passes it), so a model class in a module beside the client's script is found
    paths = [os.path.abspath(p or os.curdir) for p in sys.path]
    paths += os.environ.get("PYTHONPATH", "").split(os.pathsep)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(dict.fromkeys(
        p for p in paths if p and os.path.isdir(p))))
    relay = stderr is None
    if relay:
        read_end, stderr = os.pipe()
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE if announce else subprocess.DEVNULL,
                                stderr=stderr, stdin=subprocess.DEVNULL, text=True, env=env,
                                start_new_session=True)
    except BaseException:
        if relay:
            os.close(read_end)
        raise
    finally:
        if relay:
            os.close(stderr)  # the child holds its own copy
    if relay:
        proc.stderr_lines = collections.deque(maxlen=STDERR_TAIL_LINES)
        proc.stderr_relay = threading.Thread(
            target=_relay, args=(read_end, proc.stderr_lines), daemon=True,
            name=f"disthook-stderr-{proc.pid}")
        proc.stderr_relay.start()
    return proc


def _relay(read_end: int, tail: collections.deque) -> None:
    """Copy a child's stderr to ours as it comes, keeping its last lines; ends with the
    child. The child never waits on us longer than on a stderr of its own would make it."""
    with open(read_end, "rb") as pipe:
        for line in iter(pipe.readline, b""):
            tail.append(line.decode(errors="replace").rstrip("\n"))
            try:
                os.write(2, line)
            except OSError:
                pass  # our stderr is gone: keep draining for the tail


def stderr_tail(proc: subprocess.Popen, wait: float = 2.0) -> list[str]:
    """The last lines a child started by ``spawn`` wrote to stderr, after waiting up to
    ``wait`` seconds for it to end and for its last lines to arrive; [] when its stderr
    was not relayed."""
    relay = getattr(proc, "stderr_relay", None)
    if relay is None:
        return []
    try:
        proc.wait(wait)
    except subprocess.TimeoutExpired:
        pass
    relay.join(wait if proc.poll() is not None else 0.1)
    return list(proc.stderr_lines)


def why_it_ended(proc: subprocess.Popen, when: str = "during start-up") -> str:
    """What to say about a child that ended during start-up, after its role and pid: its
    exit code, its last stderr lines, and a file of the working directory named like its
    role's module (what ``python -m`` would have run instead of the role)."""
    module = proc.args[2] if len(proc.args) > 2 else "?"
    tail = stderr_tail(proc)
    said = ("; its last stderr lines:\n  " + "\n  ".join(tail[-5:]) if tail
            else "; it wrote nothing to stderr" if hasattr(proc, "stderr_lines") else "")
    shadows = [name for name in (f"{module}.py", os.path.join(module, "__init__.py"))
               if os.path.exists(name)]
    hint = (f"; note: {os.path.abspath(shadows[0])} in the working directory has the name of "
            f"disthook's {module!r} module, which `python -m {module}` would run instead of "
            "the role: rename it" if shadows else "")
    return f"exited with code {proc.returncode} {when}{said}{hint}"
