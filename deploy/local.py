"""The local launcher: a cluster's processes as children of this one (what ``local_cluster``
and ``disthook launch`` use). Each child stops by itself when this process is gone
(``--parent-pid``), and runs in its own session, so Ctrl-C reaches only this process.

On Linux, a child is forked from a process that has imported the roles
already (``deploy.warm``), which it takes as its parent: a start then costs a few
hundredths of a CPU-second instead of an interpreter's start and imports.

A child's stderr, unless told where it goes, is copied line by line to this process's
stderr by a thread that keeps its last lines, so that an error can say why a worker died
(``stderr_tail``)."""
from __future__ import annotations

import collections
import os
import subprocess
import sys
import threading

from deploy import warm
from deploy.roles import Role

__all__ = ["spawn", "stacks_of", "start_report", "stderr_tail", "why_it_ended"]

STDERR_TAIL_LINES = 20  # the last lines of a child's stderr kept for an error message
STACK_LINES = 400  # at most this many lines of a child's stack dump are taken
STACK_SHOWN = 30  # lines of a process's stacks a start that took too long shows


def spawn(role: Role, stderr=None, *, announce: bool = False):
    """Start ``role`` here: forked from a preloaded process where this platform can
    (``deploy.warm``: a ``WarmProcess``), else as a new interpreter (a ``Popen``); both
    answer alike. With ``announce`` its stdout is a pipe (the coordinator prints the
    endpoint it bound on its first line); otherwise stdout is discarded. ``stderr``: a
    file (or ``subprocess.DEVNULL``) for the child's stderr; None copies it to ours."""
    cmd = role.local_argv(sys.executable)
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
        proc = _start_warm(cmd, env, stderr, announce)
        if proc is None:
            proc = subprocess.Popen(
                [*cmd, "--parent-pid", str(os.getpid())],
                stdout=subprocess.PIPE if announce else subprocess.DEVNULL, stderr=stderr,
                stdin=subprocess.DEVNULL, text=True, env=env, start_new_session=True)
    except BaseException:
        if relay:
            os.close(read_end)
        raise
    finally:
        if relay:
            os.close(stderr)  # the child holds its own copy
    if relay:
        proc.stderr_lines = collections.deque(maxlen=STDERR_TAIL_LINES)
        proc.stderr_taken = None  # a list while stacks_of takes the lines that come
        proc.stderr_relay = threading.Thread(
            target=_relay, args=(read_end, proc), daemon=True,
            name=f"disthook-stderr-{proc.pid}")
        proc.stderr_relay.start()
    return proc


def _start_warm(cmd: list[str], env: dict, stderr, announce: bool):
    """``cmd`` forked from a preloaded process (``deploy.warm``), with stdin and (unless
    ``announce``: a pipe) stdout on the null device and ``stderr`` as Popen takes it; None
    when it cannot be (then it starts cold)."""
    if not warm.enabled():
        return None
    if stderr == subprocess.DEVNULL:
        stderr = None
    elif not isinstance(stderr, int):
        try:
            stderr = stderr.fileno()
        except (AttributeError, OSError, ValueError):  # not a file with an fd: cold
            return None
    elif stderr < 0:  # PIPE, STDOUT: not what spawn is given
        return None
    ours = []  # the fds opened here for the child, closed once it has its own
    try:
        null = os.open(os.devnull, os.O_RDWR)
        ours.append(null)
        if announce:
            read_out, write_out = os.pipe()
            ours.append(write_out)
            stdout = open(read_out, encoding="utf-8", errors="replace")  # noqa: SIM115
        else:
            stdout = None
        proc = warm.start(cmd, env, (null, write_out if announce else null,
                                     null if stderr is None else stderr), stdout)
        if proc is None and stdout is not None:
            stdout.close()
        return proc
    finally:
        for fd in ours:
            os.close(fd)


def _relay(read_end: int, proc: subprocess.Popen) -> None:
    """Copy a child's stderr to ours as it comes, keeping its last lines; ends with the
    child. The child never waits on us longer than on a stderr of its own would make it."""
    tail = proc.stderr_lines
    with open(read_end, "rb") as pipe:
        for line in iter(pipe.readline, b""):
            text = line.decode(errors="replace").rstrip("\n")
            tail.append(text)
            taken = proc.stderr_taken
            if taken is not None and len(taken) < STACK_LINES:
                taken.append(text)
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


def stacks_of(proc: subprocess.Popen, wait: float = 2.0) -> list[str]:
    """What a running child started by ``spawn`` is doing: the stack of each of its threads
    (its faulthandler dump on SIGUSR1, which deploy/role_main.py registers before anything
    else), as its relayed stderr shows it, innermost call first; [] when its stderr is not
    relayed, it ended, or it does not catch the signal (yet). ``wait``: seconds for the
    dump to come."""
    import signal
    import time

    if (getattr(proc, "stderr_relay", None) is None or proc.poll() is not None
            or not _catches(proc.pid, signal.SIGUSR1)):
        return []
    proc.stderr_taken = taken = []
    try:
        os.kill(proc.pid, signal.SIGUSR1)
    except OSError:
        proc.stderr_taken = None
        return []
    deadline, seen = time.monotonic() + wait, -1
    while time.monotonic() < deadline:  # until the lines stop coming
        time.sleep(0.1)
        if taken and len(taken) == seen:
            break
        seen = len(taken)
    proc.stderr_taken = None
    start = next((i for i, line in enumerate(taken)
                  if line.startswith(("Thread 0x", "Current thread 0x"))), None)
    return [] if start is None else [line for line in taken[start:] if line.strip()]


def _catches(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler for ``signum`` (Linux: /proc; else False, so
    that a signal whose default is to end a process is never sent blind)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    except (OSError, ValueError):
        pass
    return False


def _is_ours(path: str, module: str) -> bool:
    """Whether ``path`` is this project's own ``module`` (run from the project's checkout,
    its ``workers/__init__.py`` is the role's module, no stranger's)."""
    project = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    own = os.path.join(project, module, "__init__.py")
    return os.path.exists(own) and os.path.samefile(path, own)


def why_it_ended(proc: subprocess.Popen, when: str = "during start-up") -> str:
    """What to say about a child that ended during start-up, after its role and pid: its
    exit code, its last stderr lines, and a file of the working directory named like its
    role's module (what ``python -m`` would have run instead of the role)."""
    module = proc.args[2] if len(proc.args) > 2 else "?"
    tail = stderr_tail(proc)
    said = ("; its last stderr lines:\n  " + "\n  ".join(tail[-5:]) if tail
            else "; it wrote nothing to stderr" if hasattr(proc, "stderr_lines") else "")
    shadows = [name for name in (f"{module}.py", os.path.join(module, "__init__.py"))
               if os.path.exists(name) and not _is_ours(name, module)]
    hint = (f"; note: {os.path.abspath(shadows[0])} in the working directory has the name of "
            f"disthook's {module!r} module, which `python -m {module}` would run instead of "
            "the role: rename it" if shadows else "")
    return f"exited with code {proc.returncode} {when}{said}{hint}"


def start_report(processes: list, answered: list | None) -> str:
    """What a cluster start that took too long leaves to go on, as the tail of its error:
    whether the coordinator answered (``answered``: the workers it listed last, None if it
    never did) and which workers it had heard of but no longer hears; this machine's load;
    each started process's state (its exit code once ended) and last stderr line, and
    where a running one is (its threads' stacks: ``stacks_of``)."""
    silent = [f"{w.id} (last beat {w.last_seen:.1f} s ago)"
              for w in answered or () if not w.alive]
    parts = ["; the coordinator " + (
        "never answered" if answered is None else
        f"answered, knowing {len(answered)} worker(s)"
        + (f", silent: {', '.join(silent)}" if silent else ""))]
    try:
        parts.append(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores "
                     "(a busy machine starts slowly: start_timeout= gives it longer)")
    except OSError:
        pass
    for proc in processes:
        tail = stderr_tail(proc, wait=0)
        args = list(proc.args)
        role = args[args.index("--id") + 1] if "--id" in args[:-1] else " ".join(args[2:3])
        code = proc.poll()
        parts.append(f"{role} pid {proc.pid} "
                     f"{'running' if code is None else f'exited with code {code}'}"
                     + (f", last stderr: {tail[-1]!r}" if tail else ""))
        stacks = stacks_of(proc) if code is None else []
        if stacks:
            parts[-1] += ", where it is:\n    " + "\n    ".join(stacks[:STACK_SHOWN])
    return "; ".join(parts)
