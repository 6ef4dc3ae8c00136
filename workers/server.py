"""The worker: one process that owns a stage of a model and answers on its own endpoint.

It registers with the coordinator, then sends a heartbeat every interval the coordinator
gave; it stops when the coordinator says ``shutdown``, when the coordinator has not answered
for ``orphan_after`` seconds (so that no worker outlives its cluster), on SIGTERM/SIGINT, or
when its parent process is gone.
"""
from __future__ import annotations

import itertools
import os
import socket
import time
import traceback

import numpy as np
import zmq

import disthook
from disthook import wire
from disthook.distributed.rpc import error_fields
from disthook.distributed.service import NO_REPLY, Service
from disthook.distributed.spec import build_module

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
                 context_ttl: float = 600.0, parent_pid: int | None = None):
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
        self.module = None  # the stage's modules, an nn.Sequential named as in the full model
        self.neighbours: dict[str, zmq.Socket] = {}  # "prev"/"next" -> DEALER to that worker
        self.contexts: dict[str, _Context] = {}  # open forward graphs by context id
        self.context_ttl = context_ttl
        self._register()
        self.next_beat = time.monotonic() + 1.0  # re-register if no answer came by then

    def _register(self) -> None:
        self.control.send_multipart(wire.encode("register", {
            "worker": self.id, "address": self.address, "pid": os.getpid(),
            "host": socket.gethostname()}), copy=False)

    # ---- the control channel ----------------------------------------------------------------
    def on_socket(self, sock: zmq.Socket) -> None:
        if sock in self.neighbours.values():  # neighbours never reply; anything is a fault
            frames = sock.recv_multipart(copy=False)
            self.log.warning("worker %s: unexpected message from a neighbour (%d frames)",
                             self.id, len(frames))
            return None
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
        for ctx_id in [c for c, v in self.contexts.items() if now - v.created > self.context_ttl]:
            self.log.warning("worker %s: context %s expired after %g s without backward",
                             self.id, ctx_id, self.context_ttl)
            del self.contexts[ctx_id]
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
                "stage": self.stage, "memory": _rss_bytes(), "contexts": len(self.contexts)}

    def on_load_stage(self, msg, sender: bytes):
        """Build the stage's modules from their spec and connect to the neighbour stages."""
        module = build_module(msg["spec"])
        for sock in self.neighbours.values():
            self.poller.unregister(sock)
            sock.close(linger=0)
        self.neighbours = {}
        for side in ("prev", "next"):
            if msg.get(side):
                sock = self.ctx.socket(zmq.DEALER)
                sock.setsockopt(zmq.LINGER, 1000)
                # a fresh identity per load: a ROUTER refuses a peer whose identity is still
                # held by the connection it replaces
                sock.setsockopt(zmq.IDENTITY, f"{self.id}>{side}>{next(_load_ids)}".encode())
                sock.connect(msg[side])
                self.poller.register(sock, zmq.POLLIN)
                self.neighbours[side] = sock
        self.module, self.stage = module, msg["stage"]
        self.contexts.clear()
        self.log.info("worker %s: stage %d loaded (%s)", self.id, self.stage,
                      ", ".join(module._modules))
        return {"parameters": sum(p.numel() for p in module.parameters())}

    def on_forward(self, msg, sender: bytes):
        """Run the stage on the activations; pass them on, or answer the client if last."""
        client = bytes.fromhex(msg["reply_to"])
        try:
            self._need_stage(msg["stage"])
            grad = msg["grad_enabled"]
            inputs = []
            for a in msg["inputs"]:
                t = disthook.from_numpy(np.array(a))  # an own, writable copy of the frame
                if grad and t.is_floating_point():
                    t.requires_grad_(True)  # a fresh leaf per context: its grad goes back
                inputs.append(t)
            with disthook.set_grad_enabled(grad):
                out = self.module(*inputs)
            if not isinstance(out, disthook.Tensor):
                raise TypeError(f"stage {self.stage} returned {type(out).__name__}; a stage "
                                "must return one Tensor")
            if grad and out.requires_grad:
                self.contexts[msg.ctx] = _Context(inputs, out)
            fields = {"stage": self.stage + 1, "inputs": [out.detach().numpy()],
                      "grad_enabled": grad, "reply_to": msg["reply_to"]}
            nxt = self.neighbours.get("next")
            if nxt is not None:
                nxt.send_multipart(wire.encode("forward", fields, req=msg.req, ctx=msg.ctx),
                                   copy=False)
            else:
                self._to_client(client, msg, "ok", {"result": {
                    "output": out.detach().numpy(), "requires_grad": out.requires_grad}})
        except Exception as exc:  # noqa: BLE001 - the client, not the previous stage, hears it
            self._to_client(client, msg, "error", self._error(exc))
        return NO_REPLY

    def on_backward(self, msg, sender: bytes):
        """Backward through the stage's graph of this context; pass the input's gradient on."""
        client = bytes.fromhex(msg["reply_to"])
        try:
            self._need_stage(msg["stage"])
            context = self.contexts.get(msg.ctx)
            if context is None:
                raise RuntimeError(
                    f"no forward graph of context {msg.ctx!r} on stage {self.stage}: it ran "
                    "backward already without retain_graph=True, was released, or expired")
            (g,) = msg["grads"]
            grad = disthook.from_numpy(np.array(g))
            retain = msg["retain_graph"]
            for t in context.inputs:
                t.grad = None  # the gradient of this backward only goes to the previous stage
            disthook.autograd.backward([context.output], [grad], retain_graph=retain)
            if not retain:
                del self.contexts[msg.ctx]
            grads = [None if t.grad is None else t.grad.numpy() for t in context.inputs]
            prev = self.neighbours.get("prev")
            if prev is not None:
                fields = {"stage": self.stage - 1, "grads": grads, "retain_graph": retain,
                          "reply_to": msg["reply_to"]}
                prev.send_multipart(wire.encode("backward", fields, req=msg.req, ctx=msg.ctx),
                                    copy=False)
            else:
                self._to_client(client, msg, "ok", {"result": {"grads": grads}})
        except Exception as exc:  # noqa: BLE001
            self._to_client(client, msg, "error", self._error(exc))
        return NO_REPLY

    def on_release(self, msg, sender: bytes):
        for ctx_id in msg["contexts"]:
            self.contexts.pop(ctx_id, None)
        nxt = self.neighbours.get("next")
        if nxt is not None:  # the whole pipeline forgets the contexts
            nxt.send_multipart(wire.encode("release", {"contexts": msg["contexts"]}), copy=False)
        return NO_REPLY

    def on_get_state(self, msg, sender: bytes):
        """The stage's parameters and buffers, and the parameters' gradients, by full name."""
        if self.module is None:
            raise RuntimeError(f"worker {self.id} holds no stage")
        state = {name: t.detach().numpy() for name, t in self.module.state_dict().items()}
        grads = {name: p.grad.numpy() for name, p in self.module.named_parameters()
                 if p.grad is not None}
        return {"stage": self.stage, "state": state, "grads": grads}

    def on_step(self, msg, sender: bytes):
        """``zero_grad`` of the stage (optimizer steps come with the DistributedOptimizer)."""
        if self.module is None:
            raise RuntimeError(f"worker {self.id} holds no stage")
        if msg.get("optimizer"):
            raise NotImplementedError("optimizer steps on workers are not implemented yet")
        if msg.get("zero_grad"):
            self.module.zero_grad()

    # ---- helpers -------------------------------------------------------------------------------
    def _need_stage(self, stage: int) -> None:
        if self.module is None or stage != self.stage:
            raise RuntimeError(f"worker {self.id} holds stage {self.stage}, not stage {stage}")

    def _error(self, exc: BaseException) -> dict:
        return error_fields(exc, worker=self.id, traceback=traceback.format_exc(),
                            path=None if self.stage is None else f"stage {self.stage}")

    def _to_client(self, client: bytes, msg, msg_type: str, fields: dict) -> None:
        self.reply(self.router, client, msg.req, msg_type, fields, ctx=msg.ctx)


_load_ids = itertools.count()


class _Context:
    """The graph of one forward on this stage: its input leaves and its output."""

    __slots__ = ("created", "inputs", "output")

    def __init__(self, inputs: list, output) -> None:
        self.inputs, self.output, self.created = inputs, output, time.monotonic()


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
