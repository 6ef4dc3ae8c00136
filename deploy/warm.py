"""Warm starts for local roles: forked from a process that has imported them already.

Importing ``workers.server`` or ``coordinator.server`` takes most of a role's start (about
0.7 CPU-s of the 0.5-1 s a role takes to come up); a fork of a process that has imported
them takes a few hundredths. On Linux, ``deploy.local.spawn`` asks a
*preloaded process* to start each local role: one started (``deploy/role_main.py
--preload FD``) on first need, with the interpreter and environment the role would have,
that imports what the roles import, freezes its heap out of the garbage collector, and
then forks a child per request (its argv, working directory, environment and the three
fds it takes as stdin, stdout and stderr, passed over a Unix socket), reaps its children
and reports each one's end on that socket.

What is fixed as a process starts or loads numpy (the BLAS and OpenMP thread counts, the
interpreter's own settings, the path) is the preloaded process's: one serves only roles
whose variables of that kind (``STARTUP_PREFIXES``) are its own, and a launcher keeps one
per distinct set. The preloaded process ends when its launcher does (its socket's end),
and the roles forked from it take it as their parent (``--parent-pid``), so they stop with
it as a cold role stops with its launcher.

Nothing here ever stops a role from starting: ``start`` returns None (the role then
starts cold) on other platforms, with ``DISTHOOK_WARM_START=0``, or when the preloaded
process could not start or has died (said once, at debug level).
"""
from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import logging
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

from deploy import pids, threads

__all__ = ["WarmProcess", "enabled", "preloaded_pids", "serve", "shutdown", "start"]

log = logging.getLogger("disthook.launch")

ENV_SWITCH = "DISTHOOK_WARM_START"  # "0" (or false/no/off): every local role starts cold
# environment variables read once, as a process starts (the interpreter's settings, the
# locale of its stdio, the temporary directory) or as numpy and its BLAS load: a preloaded
# process serves only roles whose values of these equal its own
STARTUP_PREFIXES = ("PYTHON", "OMP_", "OPENBLAS_", "MKL_", "VECLIB_", "NUMEXPR_", "NPY_",
                    "GOTO", "KMP_", "LD_", "DISTHOOK_", "LANG", "LC_", "TMP", "TEMP")
READY_TIMEOUT_S = 120.0  # the longest a request waits for a preloaded process's answer
LOST_STATUS = 255  # the exit code told for a role whose preloaded process died before it
IDLE_KEPT = 3  # preloaded processes with no role running kept for later starts (the latest)
_HEADER = struct.Struct("!I")  # a request's length, before its JSON


def enabled() -> bool:
    """Whether local roles start warm here: on Linux (macOS has fork, but a process that
    has loaded its system frameworks, Accelerate's BLAS among them, may not use them after
    one), unless ``DISTHOOK_WARM_START`` says no."""
    said = os.environ.get(ENV_SWITCH, "").strip().lower()
    return (sys.platform.startswith("linux") and hasattr(os, "fork")
            and said not in ("0", "false", "no", "off"))


# ---- the launcher's side -----------------------------------------------------------------------
class WarmProcess:
    """A role forked by a preloaded process, with what ``subprocess.Popen`` gives that the
    local launcher and ``Cluster`` use: ``pid``, ``args``, ``returncode`` (minus the signal
    that ended it, as Popen says), ``poll``, ``wait``, ``send_signal``, ``terminate``,
    ``kill``, ``stdout``."""

    def __init__(self, args: list[str], pid: int, preloaded: _Preloaded, stdout=None):
        self.args = args
        self.pid = pid
        self.stdout = stdout
        self.stdin = self.stderr = None
        self.returncode: int | None = None
        self._preloaded = preloaded
        self._ended = threading.Event()

    def _end(self, code: int) -> None:
        if self.returncode is None:
            self.returncode = code
        self._ended.set()

    def poll(self) -> int | None:
        if self.returncode is None and self._preloaded.lost:
            self._preloaded.orphaned(self)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        self._ended.wait(timeout)  # set at its end, or when its preloaded process is lost
        if self.returncode is None and self._preloaded.lost:  # its end is nobody's to tell
            self._preloaded.orphaned(self, None if deadline is None
                                     else max(0.0, deadline - time.monotonic()))
        if self.returncode is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:  # never a pid that may have been handed to another process
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def __repr__(self) -> str:
        return f"<WarmProcess: returncode: {self.returncode} args: {self.args!r}>"


class _Preloaded:
    """One preloaded process, as its launcher holds it: its socket, a thread reading what
    it reports, and the roles it started."""

    def __init__(self, python: str, role_main: str, env: dict):
        ours, theirs = socket.socketpair()
        self._log = tempfile.TemporaryFile()  # noqa: SIM115  its stderr, read when it fails
        try:
            self.proc = subprocess.Popen(
                [python, role_main, "--preload", str(theirs.fileno())],
                pass_fds=(theirs.fileno(),), env=env, stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=self._log, start_new_session=True)
        except BaseException:
            ours.close()
            self._log.close()
            raise
        finally:
            theirs.close()
        self.sock = ours
        self.lost = False
        self.retired = False  # ended here, not having any role running: no news
        self._lock = threading.Lock()  # one request on the socket at a time
        self._answers: dict[int, list] = {}  # request number -> [event, answer]
        self._roles: dict[int, WarmProcess] = {}
        self._ended_early: dict[int, int] = {}  # pid -> status, told before its start's answer
        self._number = 0
        threading.Thread(target=self._read, daemon=True,
                         name=f"disthook-preloaded-{self.proc.pid}").start()

    def start(self, argv: list[str], env: dict, cwd: str, fds: tuple[int, int, int],
              stdout=None) -> WarmProcess | None:
        """Ask for a child running ``argv`` (after ``--parent-pid``, which is added here);
        None when the preloaded process does not answer."""
        with self._lock:
            if self.lost:
                return None
            self._number += 1
            number = self._number
            args = [*argv, "--parent-pid", str(self.proc.pid)]
            request = json.dumps({"n": number, "argv": args[1:], "orig_argv": args,
                                  "cwd": cwd, "env": env}).encode()
            waiting = self._answers[number] = [threading.Event(), None]
            try:
                socket.send_fds(self.sock, [_HEADER.pack(len(request)) + request], list(fds))
            except OSError:
                self._answers.pop(number, None)
                return None
        if not waiting[0].wait(READY_TIMEOUT_S) or not waiting[1]:
            self._answers.pop(number, None)
            return None
        pid = waiting[1]
        proc = WarmProcess(args, pid, self, stdout)
        with self._lock:
            self._roles[pid] = proc
            if pid in self._ended_early:
                proc._end(self._ended_early.pop(pid))
        return proc

    def _read(self) -> None:
        """What the preloaded process reports, one JSON line each: a request's child
        started (``{"n", "pid"}``; pid 0 when the fork failed), a child ended (``{"pid",
        "status"}``)."""
        with self.sock.makefile("rb") as reports:
            for line in reports:
                try:
                    report = json.loads(line)
                except ValueError:
                    continue
                with self._lock:
                    if "n" in report:
                        waiting = self._answers.pop(report["n"], None)
                        if waiting is not None:
                            waiting[1] = report["pid"]
                            waiting[0].set()
                    elif report["pid"] in self._roles:
                        self._roles.pop(report["pid"])._end(report["status"])
                    else:
                        self._ended_early[report["pid"]] = report["status"]
        self._lose()

    def _lose(self) -> None:
        """The preloaded process is gone: what waits for it is told, and the roles it
        started are watched until they are gone too (they stop when it is)."""
        with self._lock:
            if not self.lost:
                self.lost = True
                if self.retired:  # it ends at once, its socket closed
                    try:
                        self.proc.wait(5.0)
                    except subprocess.TimeoutExpired:
                        self.proc.kill()
                    self._log.close()
                    return
                try:
                    code = self.proc.wait(5.0)
                except subprocess.TimeoutExpired:  # its launcher's end is closed: not long
                    self.proc.kill()
                    code = self.proc.wait()
                self._log.seek(0)
                tail = self._log.read().decode(errors="replace").strip().splitlines()[-5:]
                log.debug("the preloaded process for local roles (pid %d) ended (code %s); "
                          "local roles start cold from now on%s", self.proc.pid, code,
                          "; its last stderr lines:\n  " + "\n  ".join(tail) if tail else "")
            for waiting in self._answers.values():
                waiting[0].set()
            self._answers.clear()
            for role in self._roles.values():
                role._ended.set()  # wakes its waiters, who watch it from now on

    def orphaned(self, proc: WarmProcess, timeout: float | None = 0.0) -> None:
        """A role whose preloaded process died: its status went to whoever adopted it, so
        once it is gone it is said to have ended with ``LOST_STATUS``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while proc.returncode is None:
            if pids.gone(proc.pid):
                proc._end(LOST_STATUS)
                return
            if deadline is not None and time.monotonic() >= deadline:
                return
            time.sleep(0.05)

    def idle(self) -> bool:
        """Whether no role of its own runs or is being started."""
        with self._lock:
            return not self._roles and not self._answers

    def close(self) -> None:
        """End the preloaded process (its roles stop by themselves once it is gone)."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


_preloaded: dict[tuple, _Preloaded | None] = {}  # a start key -> its process (None: failed)
_registry_lock = threading.Lock()


def _forget_in_a_fork() -> None:
    """A fork of a launcher has none of its preloaded processes (their sockets and reader
    threads are the launcher's): it starts its own, and closes its copies of their sockets,
    so that each still ends when the launcher does."""
    global _registry_lock
    for each in _preloaded.values():
        if each is not None:  # (its reader's file would keep a plain close from closing it)
            with contextlib.suppress(OSError):
                os.close(each.sock.detach())
    _preloaded.clear()
    _registry_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_a_fork)


def start_key(python: str, env: dict) -> tuple:
    """What a preloaded process must share with a role it starts: the interpreter and the
    environment variables read at start-up (``STARTUP_PREFIXES``), ``DISTHOOK_WARM_START``
    aside."""
    return (python, *sorted((k, v) for k, v in env.items()
                            if k.startswith(STARTUP_PREFIXES) and k != ENV_SWITCH))


def start(argv: list[str], env: dict, fds: tuple[int, int, int],
          stdout=None) -> WarmProcess | None:
    """``argv`` (``[python, role_main.py, ROLE, ARGS...]``) forked from the preloaded
    process for its interpreter and environment (started now if there is none) with
    ``fds`` as its stdin, stdout and stderr; None when it cannot be (start it cold)."""
    if not enabled():
        return None
    try:
        cwd = os.getcwd()
    except OSError:  # removed: a cold start inherits it as it is
        return None
    if argv[2:3] == ["workers"]:  # a worker's --threads is in its environment as numpy loads
        env = dict(env, **threads.from_argv(argv[3:]))
    key = start_key(argv[0], env)
    with _registry_lock:
        preloaded = _preloaded.pop(key, False)
        if preloaded is False:
            _retire_idle(IDLE_KEPT - 1)
            try:
                preloaded = _Preloaded(argv[0], argv[1], env)
            except OSError as exc:
                log.debug("could not start a preloaded process for local roles (%s); they "
                          "start cold", exc)
                preloaded = None
        _preloaded[key] = preloaded  # the last used last
    if preloaded is None:
        return None
    proc = preloaded.start(argv, env, cwd, fds, stdout)
    if proc is None:  # it died, or never answered: it must not start the role late
        with _registry_lock:
            if _preloaded.get(key) is preloaded:
                if preloaded.retired:  # retired meanwhile: the next start gets a new one
                    del _preloaded[key]
                else:
                    _preloaded[key] = None  # failed: cold from now on, for this key
        preloaded.proc.kill()
        preloaded.close()
    return proc


def _retire_idle(keep: int) -> None:
    """End the preloaded processes with no role running but the ``keep`` last used (each
    environment a program's roles have had would otherwise keep one to its end)."""
    idle = [key for key, each in _preloaded.items() if each is not None and each.idle()]
    for key in idle[:max(0, len(idle) - keep)]:
        each = _preloaded.pop(key)
        each.retired = True
        each.close()


def shutdown(wait: float = 5.0) -> None:
    """End this process's preloaded processes and reap them (at exit: after the local
    clusters' own finalizers, registered later, have reaped their roles); a role still
    running stops by itself once its preloaded process is gone."""
    with _registry_lock:
        preloaded = [p for p in _preloaded.values() if p is not None]
        _preloaded.clear()
    for each in preloaded:
        each.close()
    for each in preloaded:
        try:
            each.proc.wait(wait)
        except subprocess.TimeoutExpired:
            each.proc.kill()


atexit.register(shutdown)


def preloaded_pids() -> list[int]:
    """The pids of this process's live preloaded processes (for tests and diagnostics)."""
    with _registry_lock:
        return [p.proc.pid for p in _preloaded.values() if p is not None and not p.lost]


# ---- the preloaded process's side --------------------------------------------------------------
def serve(fd: int) -> None:
    """Run as the preloaded process on the socket ``fd``: import what the roles import,
    then fork a child per request. Returns only in a child, with its argv, working
    directory, environment and stdio set; the preloaded process itself exits when its
    launcher's end of the socket closes."""
    import gc

    sock = socket.socket(fileno=fd)
    import argparse  # noqa: F401  what the roles import, once for all of them
    import ctypes.util  # noqa: F401

    import coordinator.server  # noqa: F401
    import workers.command_line  # noqa: F401  (workers.server with it)

    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w)
    gc.freeze()  # the children do not copy the whole heap on their first collection
    while True:
        ready = select.select([sock, wake_r], [], [])[0]
        if wake_r in ready:
            _drain(wake_r)
            _report_ended(sock)
        if sock not in ready:
            continue
        request = _receive(sock)
        if request is None:  # the launcher is gone
            os._exit(0)
        fields, fds = request
        try:
            pid = os.fork()
        except OSError:
            pid = -1
        if pid == 0:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            for own in (wake_r, wake_w):
                os.close(own)
            sock.close()
            _become(fields, fds)
            return
        for passed in fds:
            os.close(passed)
        _send(sock, {"n": fields["n"], "pid": max(pid, 0)})


def _become(fields: dict, fds: list[int]) -> None:
    """In a fresh child: the role's session, stdio, working directory, environment and
    argv, and fresh random state where an import seeded one from entropy."""
    os.setsid()  # as start_new_session: Ctrl-C at the launcher's terminal is not ours
    for target, passed in enumerate(fds):
        os.dup2(passed, target)
    for passed in fds:
        if passed > 2:
            os.close(passed)
    os.chdir(fields["cwd"])
    os.environ.clear()
    os.environ.update(fields["env"])
    sys.argv[:] = fields["argv"]
    if hasattr(sys, "orig_argv"):  # what a cold start's command line would have been
        sys.orig_argv[:] = fields["orig_argv"]
    importlib.invalidate_caches()  # files made since it listed a directory are found
    numpy = sys.modules.get("numpy")
    if numpy is not None:  # its global RandomState was seeded at import (random reseeds itself)
        numpy.random.seed()


def _report_ended(sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _send(sock, {"pid": pid, "status": os.waitstatus_to_exitcode(status)})


def _send(sock: socket.socket, report: dict) -> None:
    try:
        sock.sendall(json.dumps(report).encode() + b"\n")
    except OSError:
        os._exit(0)  # the launcher is gone


def _receive(sock: socket.socket) -> tuple[dict, list[int]] | None:
    """One request and its fds; None at the socket's end."""
    head, fds, _, _ = socket.recv_fds(sock, _HEADER.size, 3)
    while head and len(head) < _HEADER.size:
        more = sock.recv(_HEADER.size - len(head))
        if not more:
            return None
        head += more
    if not head:
        return None
    (size,) = _HEADER.unpack(head)
    body = b""
    while len(body) < size:
        more = sock.recv(size - len(body))
        if not more:
            return None
        body += more
    return json.loads(body), fds


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass
