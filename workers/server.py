"""The worker: one process that owns a stage of a model and answers on its own endpoint.

It registers with the coordinator, then sends a heartbeat every interval the coordinator
gave; it stops when the coordinator says ``shutdown``, when the coordinator has not answered
for ``orphan_after`` seconds (so that no worker outlives its cluster), on SIGTERM/SIGINT, or
when its parent process is gone.
"""
from __future__ import annotations

import os
import socket
import time

import zmq

from disthook import wire
from disthook.distributed.service import Service

__all__ = ["Worker"]


def _rss_bytes() -> int | None:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


class Worker(Service):
    role = "worker"

    def __init__(self, coordinator: str, *, bind: str = "tcp://127.0.0.1:0",
                 worker_id: str | None = None, orphan_after: float = 30.0,
                 parent_pid: int | None = None):
        wid = worker_id or f"{socket.gethostname()}-{os.getpid()}"
        super().__init__(bind, name=wid, parent_pid=parent_pid)
        self.id = wid
        self.coordinator_address = coordinator
        self.control = self.ctx.socket(zmq.DEALER)
        self.control.setsockopt(zmq.LINGER, 0)
        self.control.setsockopt(zmq.IDENTITY, wid.encode())
        self.control.connect(coordinator)
        self.poller.register(self.control, zmq.POLLIN)
        self.heartbeat = 0.5
        self.orphan_after = orphan_after
        self.registered = False
        self.last_heard = time.monotonic()
        self.stage: int | None = None
        self._register()
        self.next_beat = time.monotonic() + 1.0  # re-register if no answer came by then

    def _register(self) -> None:
        self.control.send_multipart(wire.encode("register", {
            "worker": self.id, "address": self.address, "pid": os.getpid(),
            "host": socket.gethostname()}), copy=False)

    # ---- the control channel ----------------------------------------------------------------
    def on_socket(self, sock: zmq.Socket) -> None:
        if sock is not self.control:
            return super().on_socket(sock)
        try:
            msg = wire.decode(self.control.recv_multipart(copy=False))
        except wire.WireError as exc:
            self.log.warning("worker %s: malformed message from the coordinator: %s", self.id, exc)
            return
        self.last_heard = time.monotonic()
        if msg.type == "shutdown":
            self.stop(msg.get("reason") or "the coordinator asked")
        elif msg.type == "ok" and not self.registered:
            self.registered = True
            result = msg.get("result") or {}
            self.heartbeat = float(result.get("heartbeat", self.heartbeat))
            self.log.info("worker %s: registered at %s, serving on %s", self.id,
                          self.coordinator_address, self.address)
        elif msg.type == "error":
            self.log.warning("worker %s: the coordinator says %s: %s; registering again",
                             self.id, msg["kind"], msg["message"])
            self.registered = False
            self._register()

    def tick(self) -> None:
        now = time.monotonic()
        if now - self.last_heard > self.orphan_after:
            self.stop(f"no word from the coordinator at {self.coordinator_address} for "
                      f"{self.orphan_after:g} s")
            return
        if now >= self.next_beat:
            if self.registered:
                self.control.send_multipart(wire.encode(
                    "heartbeat", {"worker": self.id, "memory": _rss_bytes()}), copy=False)
            else:
                self._register()
            self.next_beat = now + self.heartbeat

    # ---- requests ----------------------------------------------------------------------------
    def on_status(self, msg, sender: bytes):
        return {"id": self.id, "pid": os.getpid(), "address": self.address,
                "stage": self.stage, "memory": _rss_bytes()}


def main(argv=None) -> int:
    import argparse
    import logging
    import sys

    p = argparse.ArgumentParser(prog="disthook worker",
                                description="Run one worker of a disthook cluster.")
    p.add_argument("--coordinator", required=True, help="the coordinator's endpoint")
    p.add_argument("--bind", default="tcp://127.0.0.1:0",
                   help="endpoint for the data plane; port 0 picks a free one "
                        "(default tcp://127.0.0.1:0, loopback only)")
    p.add_argument("--id", dest="worker_id", help="worker id (default host-pid)")
    p.add_argument("--orphan-after", type=float, default=30.0,
                   help="stop after this many seconds without word from the coordinator")
    p.add_argument("--parent-pid", type=int, help="stop when this parent process is gone")
    p.add_argument("--log-level", default="INFO")
    args = p.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    worker = Worker(args.coordinator, bind=args.bind, worker_id=args.worker_id,
                    orphan_after=args.orphan_after, parent_pid=args.parent_pid)
    print(f"disthook worker {worker.id} serving on {worker.address}", flush=True)
    worker.serve_forever()
    return 0
