"""The bytes of answers a process has handed ZeroMQ for each peer and ZeroMQ has not sent yet
(the peer reads none, or slowly). ZeroMQ bounds a peer's queue by its count of messages
(``SNDHWM``), not by their bytes, so a client that asks for large answers and reads none
would make a worker hold up to that many of them: here a large answer's last frame goes with
a tracker, done once ZeroMQ let go of it, and a peer whose answers not sent yet hold
``limit`` bytes gets a short error in place of its next large answer.
"""
from __future__ import annotations

import collections

import zmq

from disthook import wire
from disthook.service.rpc import error_fields

__all__ = ["TRACK_FROM", "UnreadAnswers"]

# answers of this many bytes and more are tracked (a tracked send costs about 20 µs more,
# measured); smaller ones are bounded by ZeroMQ's count and the replies kept (loop.py)
TRACK_FROM = 256 << 10


class UnreadAnswers:
    """Per peer: the answers handed to ZeroMQ and not sent yet, as (tracker, bytes)."""

    def __init__(self, limit: int, option: str, account=None):
        self.limit = limit
        self.option = option  # what sets the limit, for the error
        self._held: dict[bytes, collections.deque] = {}
        # whom a peer's answers count against (with keys its key, whose connections share
        # one limit: each connection had its own, so a client that opened 10 and read none
        # made a worker hold 10 times as much); by default the peer itself
        self._account = account or (lambda peer: peer)

    def held_by(self, peer: bytes) -> int:
        """The bytes ZeroMQ still holds of the answers to ``peer`` and to every peer counted
        with it."""
        account = self._account(peer)
        return sum(self.held(p) for p in list(self._held)
                   if p == peer or self._account(p) == account)

    def held(self, peer: bytes) -> int:
        """The bytes of ``peer``'s answers ZeroMQ still holds."""
        queue = self._held.get(peer)
        if not queue:
            return 0
        while queue and queue[0][0].done:  # (ZeroMQ sends a peer's messages in order)
            queue.popleft()
        if not queue:
            del self._held[peer]
            return 0
        return sum(n for _, n in queue)

    def refusal(self, peer: bytes, frames: list, worker: str, waiting=()) -> list | None:
        """None when ``frames`` may go to ``peer``; else the error messages that take the
        place of the answers they carry (one, or one per answer of a batch). ``waiting``:
        the messages for it not handed to ZeroMQ yet (its queue was full)."""
        size = _nbytes(frames)
        if size < TRACK_FROM:
            return None
        held = self.held_by(peer) + sum(_nbytes(m) for m in waiting)
        if not held or held + size <= self.limit:  # (one answer alone may be any size)
            return None
        _, parts = wire.split_batch(frames)
        why = RuntimeError(
            f"this client has {held / (1 << 20):.1f} MiB of answers it has not read on "
            f"{worker}, and this one of {size / (1 << 20):.1f} MiB would pass the "
            f"{self.limit / (1 << 20):.0f} MiB one client (with keys, one key) may have waiting "
            f"({self.option}): the answer was dropped; read the answers as they come")
        out = []
        for part in (parts or [frames]):
            msg = wire.decode(part)
            out.append(wire.encode("error", error_fields(why, worker=worker), req=msg.req,
                                   ctx=msg.ctx))
        return out

    def send(self, send, sock: zmq.Socket, peer: bytes, frames: list) -> None:
        """Send ``frames`` (after the peer's routing frame) with ``send(sock, frame, flags,
        copy)``, pyzmq's; a large message's last frame tracked."""
        last = len(frames) - 1
        size = _nbytes(frames)
        for i, frame in enumerate(frames):
            if i < last:
                send(sock, frame, zmq.SNDMORE, memoryview(frame).nbytes < TRACK_FROM)
            elif size >= TRACK_FROM:
                tracker = sock.send(frame, 0, copy=False, track=True)
                self._held.setdefault(peer, collections.deque()).append((tracker, size))
            else:
                send(sock, frame, 0, True)


def _nbytes(frames: list) -> int:
    return sum(memoryview(f).nbytes for f in frames)
