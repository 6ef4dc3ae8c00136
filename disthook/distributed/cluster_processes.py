"""The processes a local cluster starts, once started: the coordinator's announced address
read from its stdout (then drained), and the stop of them all: waited on for a grace, then
terminated, then killed (``local_cluster`` and ``Cluster.close`` in ``cluster``)."""
from __future__ import annotations

import subprocess
import threading
import time

from deploy.local import why_it_ended
from disthook.service.rpc import ClusterError


def announced_address(proc: subprocess.Popen, timeout: float) -> str:
    """The endpoint on the coordinator's first stdout line (it may have picked its port)."""
    box: list[str] = []
    reader = threading.Thread(target=lambda: box.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    line = box[0] if box else ""
    if not line.startswith("disthook coordinator listening on "):
        if box:  # stdout closed: the process is ending, let it say with which code
            try:
                proc.wait(5.0)
            except subprocess.TimeoutExpired:
                pass
        if proc.poll() is not None:
            raise ClusterError(f"the coordinator (pid {proc.pid}) "
                               f"{why_it_ended(proc, 'before announcing its address')}")
        raise ClusterError(f"the coordinator did not announce its address within {timeout:g} s "
                           f"(it printed {line!r})")
    # keep draining stdout so that a chatty process never blocks on a full pipe; the drain
    # closes the pipe when the process is gone
    def drain(pipe=proc.stdout):
        try:
            pipe.read()
        finally:
            pipe.close()

    proc.drained = True
    threading.Thread(target=drain, daemon=True).start()
    return line.rsplit(" ", 1)[1].strip()


def stop_abandoned(procs: list[subprocess.Popen]) -> None:
    """The processes of a local cluster left open (unreferenced, or at the interpreter's
    exit): no one asks its coordinator to shut down, so each is told to stop at once
    (SIGTERM, a clean stop for a role) and then reaped, rather than waited on for the
    grace first (a program that never closed its cluster took 5 s more to exit)."""
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    reap(procs, 5.0)


def reap(procs: list[subprocess.Popen], grace: float) -> None:
    """Wait up to ``grace`` seconds for every process, then terminate, then kill."""
    deadline = time.monotonic() + grace
    for proc in procs:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(2.0)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None and not getattr(proc, "drained", False):
            proc.stdout.close()  # never handed to a drain thread (start-up failed)
    procs.clear()
