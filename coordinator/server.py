"""The coordinator: the registry of workers, their liveness, and the cluster's shutdown.

Workers register (their id, data-plane address, pid, host) and then send a heartbeat every
``heartbeat`` seconds; a worker silent for ``lost_after`` seconds (``SILENT_AFTER_BEATS``
beats) is reported as not alive. Clients ask for ``status`` and may ``shutdown`` the
cluster, which tells every worker to stop first.
The coordinator carries no activations or gradients.
"""
from __future__ import annotations

import dataclasses
import os
import socket
import time

from disthook import wire
from disthook.distributed.service import LOG_LEVELS, Service
from disthook.wire import HEARTBEAT_S, SILENT_AFTER_BEATS

__all__ = ["Coordinator", "WorkerRecord"]


@dataclasses.dataclass
class WorkerRecord:
    id: str
    address: str
    pid: int
    host: str
    identity: bytes
    registered: float
    last_seen: float
    memory: int | None = None
    stages: list = dataclasses.field(default_factory=list)  # as the worker last reported


class Coordinator(Service):
    role = "coordinator"

    def __init__(self, bind: str, *, heartbeat: float = HEARTBEAT_S,
                 lost_after: float | None = None,
                 parent_pid: int | None = None, keys=None):
        super().__init__(bind, parent_pid=parent_pid, name="coordinator", keys=keys)
        self.heartbeat = heartbeat
        self.lost_after = (lost_after if lost_after is not None
                           else SILENT_AFTER_BEATS * heartbeat)
        self.workers: dict[str, WorkerRecord] = {}
        self.started = time.time()

    # ---- from workers ------------------------------------------------------------------------
    def on_register(self, msg, sender: bytes):
        wid = msg["worker"]
        now = time.monotonic()
        old = self.workers.get(wid)
        if old is not None and old.pid != msg["pid"]:
            self.log.warning("coordinator: worker id %r re-registered by pid %d (was %d)",
                             wid, msg["pid"], old.pid)
        self.workers[wid] = WorkerRecord(wid, msg["address"], msg["pid"],
                                         msg.get("host") or "?", sender, now, now)
        self.log.info("coordinator: worker %s registered (pid %d, %s)", wid, msg["pid"],
                      msg["address"])
        return {"heartbeat": self.heartbeat}

    def on_heartbeat(self, msg, sender: bytes):
        record = self.workers.get(msg["worker"])
        if record is None:  # a worker the coordinator does not know: it must register again
            raise LookupError(f"worker {msg['worker']!r} is not registered")
        record.last_seen = time.monotonic()
        record.memory = msg.get("memory")
        record.stages = list(msg.get("stages") or [])

    # ---- from clients ------------------------------------------------------------------------
    def on_status(self, msg, sender: bytes):
        now = time.monotonic()
        return {
            "coordinator": {"address": self.address, "pid": os.getpid(),
                            "host": socket.gethostname(), "uptime": time.time() - self.started,
                            "heartbeat": self.heartbeat,
                            "messages": wire.decoded_count()},
            "workers": [
                {"id": r.id, "address": r.address, "pid": r.pid, "host": r.host,
                 "stages": r.stages, "alive": now - r.last_seen <= self.lost_after,
                 "last_seen": now - r.last_seen, "memory": r.memory}
                for r in sorted(self.workers.values(), key=lambda r: r.registered)
            ],
        }

    def on_shutdown(self, msg, sender: bytes):
        reason = msg.get("reason") or "a client asked"
        for record in self.workers.values():
            self.reply(self.router, record.identity, 0, "shutdown", {"reason": reason})
        self.stop(reason)



def main(argv=None) -> int:
    import argparse
    import logging
    import sys

    from disthook.distributed.endpoint import DEFAULT_COORDINATOR, EndpointInUse

    p = argparse.ArgumentParser(prog="disthook coordinator",
                                description="Run the coordinator of a disthook cluster.")
    p.add_argument("--bind", default=DEFAULT_COORDINATOR,
                   help="endpoint to listen on; port 0 picks a free one "
                        f"(default {DEFAULT_COORDINATOR}, loopback only)")
    p.add_argument("--heartbeat", type=float, default=HEARTBEAT_S,
                   help=f"seconds between heartbeats (default {HEARTBEAT_S})")
    p.add_argument("--parent-pid", type=int, help="stop when this parent process is gone")
    p.add_argument("--keys", metavar="DIR",
                   help="key directory (disthook keys generate DIR): encrypt every connection "
                        "and accept only the peers it authorizes")
    p.add_argument("--log-level", default="INFO", type=str.upper, choices=LOG_LEVELS,
                   help="the least severe messages logged to stderr (default INFO)")
    args = p.parse_args(argv)
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    from disthook.distributed.security import SERVER, Keys

    try:
        keys = Keys.load(args.keys, SERVER) if args.keys else None
        coordinator = Coordinator(args.bind, heartbeat=args.heartbeat,
                                  parent_pid=args.parent_pid, keys=keys)
    except EndpointInUse as exc:
        print(f"disthook coordinator: {exc.advice('--bind')}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as exc:  # a bad address, unreadable key files
        print(f"disthook coordinator: {exc}", file=sys.stderr)
        return 1
    # the first line on stdout is the endpoint, for launchers that asked for port 0
    print(f"disthook coordinator listening on {coordinator.address}", flush=True)
    coordinator.serve_forever()
    return 0
