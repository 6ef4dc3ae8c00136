"""The Ray launcher: a cluster's processes started by Ray actors (``disthook launch --ray``).

Ray only places and starts the processes: one actor for the coordinator and one per worker,
the workers in a placement group with one bundle each (spread over the Ray nodes when it
can). Every actor runs its role as a child process (``python -m coordinator|workers``) on
its node; activations, gradients and hook events go over disthook's own ZeroMQ sockets,
never through Ray. Needs ``pip install 'disthook[ray]'``.
"""
from __future__ import annotations

import subprocess
import sys

from deploy.roles import coordinator_role, worker_role
from disthook.service.endpoint import DEFAULT_PORT

__all__ = ["RayCluster", "launch"]


def _ray():
    try:
        import ray
    except ImportError:
        raise ImportError("the Ray launcher needs Ray: pip install 'disthook[ray]'") from None
    return ray


class _Process:
    """Runs one role as a child process of the actor, on the actor's node."""

    def __init__(self):
        self.proc = None

    def node_ip(self) -> str:
        return _ray().util.get_node_ip_address()

    def start(self, argv: list[str], announce: bool) -> str | None:
        """Start ``argv`` (its first word replaced by this node's Python); with ``announce``
        the endpoint the coordinator prints on its first line."""
        self.proc = subprocess.Popen([sys.executable, *argv[1:]], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE if announce else subprocess.DEVNULL)
        if announce:
            line = self.proc.stdout.readline().decode()
            if not line.startswith("disthook coordinator listening on "):
                raise RuntimeError(f"the coordinator did not start (exit code "
                                   f"{self.proc.wait()}); it printed {line!r}")
            return line.rsplit(" ", 1)[1].strip()
        return None

    def pid(self) -> int:
        return self.proc.pid

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, grace: float = 5.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        return self.proc.wait()


class RayCluster:
    """A coordinator and workers started through Ray; ``address`` is the coordinator's."""

    def __init__(self, ray, coordinator, workers, group, address: str):
        self._ray, self._coordinator, self._workers = ray, coordinator, workers
        self._group, self.address = group, address

    def running(self) -> list[bool]:
        """Whether each process (the coordinator first) is still running."""
        return self._ray.get([a.running.remote() for a in [self._coordinator,
                                                           *self._workers]])

    def stop(self) -> None:
        """End every process, then the actors and the placement group."""
        ray = self._ray
        ray.get([a.stop.remote() for a in self._workers], timeout=60)
        ray.get(self._coordinator.stop.remote(), timeout=60)
        for actor in [*self._workers, self._coordinator]:
            ray.kill(actor)
        ray.util.remove_placement_group(self._group)

    def __enter__(self) -> RayCluster:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def launch(workers: int = 2, *, address: str | None = None, port: int = DEFAULT_PORT,
           keys: str | None = None, heartbeat: float | None = None,
           log_level: str | None = None, cpus_per_worker: float = 1.0,
           timeout: float = 120.0) -> RayCluster:
    """Start a disthook cluster on the Ray cluster at ``address`` (None: this machine's,
    started if needed). ``keys``: a key directory at the same path on every Ray node."""
    if not isinstance(workers, int) or workers < 1:
        raise ValueError(f"launch() needs workers >= 1, got {workers!r}")
    ray = _ray()
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    actor = ray.remote(num_cpus=0)(_Process)
    group = placement_group([{"CPU": cpus_per_worker}] * workers, strategy="SPREAD")
    ray.get(group.ready(), timeout=timeout)
    head = actor.remote()
    ip = ray.get(head.node_ip.remote(), timeout=timeout)
    bound = ray.get(head.start.remote(
        coordinator_role(f"tcp://0.0.0.0:{port}", keys=keys, heartbeat=heartbeat,
                         log_level=log_level).argv(), True), timeout=timeout)
    coordinator = f"tcp://{ip}:{bound.rsplit(':', 1)[1]}"
    members = []
    for i in range(workers):
        member = actor.options(num_cpus=cpus_per_worker, scheduling_strategy=(
            PlacementGroupSchedulingStrategy(placement_group=group,
                                             placement_group_bundle_index=i))).remote()
        node = ray.get(member.node_ip.remote(), timeout=timeout)
        # its BLAS threads: the CPUs Ray reserved for it (numpy's would take every core)
        role = worker_role(coordinator, worker_id=f"ray-{node}-{i}", bind="tcp://0.0.0.0:0",
                           advertise=node, keys=keys, log_level=log_level,
                           threads=max(1, int(cpus_per_worker)), allow_code=True)
        ray.get(member.start.remote(role.argv(), False), timeout=timeout)
        members.append(member)
    # the workers register by themselves: connect(address).wait_for_workers(n) waits
    return RayCluster(ray, head, members, group, coordinator)
