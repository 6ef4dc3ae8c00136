"""Helpers for the tests that run real clusters: a free port, waiting until something holds,
each worker's own status (asked on its endpoint, not the coordinator's view), and a
coordinator with one worker started as the command line starts them."""
import contextlib
import socket
import subprocess
import sys
import time

from disthook.service.rpc import Peer


def free_port() -> int:
    """A loopback port nothing listens at now (the OS picked it and let it go)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(predicate, seconds: float) -> float:
    """Seconds until ``predicate()`` held (polled); fails after ``seconds``."""
    start = time.monotonic()
    while not predicate():
        assert time.monotonic() - start < seconds, "did not happen in time"
        time.sleep(0.05)
    return time.monotonic() - start


def worker_statuses(cluster, timeout: float = 10.0) -> dict[str, dict]:
    """Every registered worker's own status reply, by worker id, in the coordinator's order."""
    statuses = {}
    for w in cluster.workers():
        with Peer(w.address) as peer:
            statuses[w.id] = peer.request("status", timeout=timeout)["result"]
    return statuses


def open_graphs(cluster) -> dict[str, int]:
    """Open forward graphs (contexts) per worker, by worker id."""
    return {wid: status["contexts"] for wid, status in worker_statuses(cluster).items()}


@contextlib.contextmanager
def worker(*flags: str):
    """A coordinator and one worker, started as the command line does; the worker's
    address, whose ``coordinator`` attribute is the coordinator's."""
    coordinator = subprocess.Popen([sys.executable, "-m", "coordinator", "--bind",
                                    "tcp://127.0.0.1:0", "--log-level", "WARNING"],
                                   stdout=subprocess.PIPE, text=True)
    worker = None
    try:
        address = coordinator.stdout.readline().split()[-1]
        worker = subprocess.Popen([sys.executable, "-m", "workers", "--coordinator", address,
                                   "--log-level", "WARNING", *flags],
                                  stdout=subprocess.PIPE, text=True)
        yield _Address(worker.stdout.readline().split()[-1], address)
    finally:
        for proc in (worker, coordinator):
            if proc is not None:
                proc.terminate()
                proc.wait(10)


class _Address(str):
    """A worker's address that also knows its coordinator's."""

    def __new__(cls, value: str, coordinator: str):
        made = super().__new__(cls, value)
        made.coordinator = coordinator
        return made
