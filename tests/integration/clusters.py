"""Helpers for the tests that run real clusters: a free port, waiting until something holds,
each worker's own status (asked on its endpoint, not the coordinator's view), a
coordinator with one worker started as the command line starts them, and the clusters the
modules of one session share."""
import contextlib
import socket
import subprocess
import sys
import time

from disthook.distributed import connect, local_cluster
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
def worker(*flags: str, workers: int = 1):
    """A coordinator and one worker (or ``workers`` of them, all with ``flags``), started
    as the command line does; the (first) worker's address, whose ``coordinator`` attribute
    is the coordinator's."""
    coordinator = subprocess.Popen([sys.executable, "-m", "coordinator", "--bind",
                                    "tcp://127.0.0.1:0", "--log-level", "WARNING"],
                                   stdout=subprocess.PIPE, text=True)
    procs = []
    try:
        address = coordinator.stdout.readline().split()[-1]
        for _ in range(workers):
            procs.append(subprocess.Popen([sys.executable, "-m", "workers", "--coordinator",
                                           address, "--log-level", "WARNING", *flags],
                                          stdout=subprocess.PIPE, text=True))
        bound = [p.stdout.readline().split()[-1] for p in procs]  # (they register later)
        with connect(address, timeout=30) as cluster:
            cluster.wait_for_workers(workers, timeout=60)
        yield _Address(bound[0], address)
    finally:
        for proc in (*procs, coordinator):
            proc.terminate()
            proc.wait(10)


class _Address(str):
    """A worker's address that also knows its coordinator's."""

    def __new__(cls, value: str, coordinator: str):
        made = super().__new__(cls, value)
        made.coordinator = coordinator
        return made


class SharedClusters:
    """Plain local clusters by size, lent to one module at a time: starting a cluster costs
    about 3 s of CPU, and most modules only need "a cluster with N workers". A module gets
    its cluster with every worker alive and holding nothing; after it, what it deployed is
    closed, and a cluster it left otherwise (a process gone, a worker missing or still
    holding a stage) is reaped, so that the next module asking for that size starts a fresh
    one."""

    def __init__(self):
        self._clusters = {}  # workers -> Cluster

    @contextlib.contextmanager
    def lend(self, workers: int):
        cluster = self._clusters.get(workers)
        if cluster is None:
            cluster = self._clusters[workers] = local_cluster(workers=workers, start_timeout=120)
        deployed_before = set(cluster._deployments)
        try:
            yield cluster
        finally:
            if not _tidied(cluster, workers, deployed_before):
                del self._clusters[workers]
                cluster.close()

    def close(self) -> None:
        while self._clusters:
            self._clusters.popitem()[1].close()


def _tidied(cluster, workers: int, deployed_before: set) -> bool:
    """Close what was deployed on ``cluster`` since it was lent; whether it is now as it was
    lent: its processes alive, and ``workers`` workers, each holding no stage, graph or value
    (asked of each worker: the coordinator's view follows the heartbeats). A worker's
    counts over its lifetime (messages, hooks fired) go on: a test that reads them reads a
    difference, or starts its own cluster. A process that ended is seen first, without
    asking: the coordinator still lists a killed worker until its heartbeats are missed,
    and a status request to it would wait out its timeout."""
    if any(proc.poll() is not None for proc in cluster._processes):
        return False
    try:
        for key, deployment in list(cluster._deployments.items()):
            if key not in deployed_before:
                deployment.close()  # (a closed deployment leaves cluster._deployments)
        statuses = worker_statuses(cluster)
    except Exception:  # noqa: BLE001 - any failure here means: do not lend it again
        return False
    return (all(proc.poll() is None for proc in cluster._processes)  # none ended meanwhile
            and len(statuses) == workers
            and all(s["stages"] == [] and s["contexts"] == s["values"] == 0
                    for s in statuses.values()))
