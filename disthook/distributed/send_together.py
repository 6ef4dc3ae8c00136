"""Requests to one worker made in one burst go as one message (``Together``).

A chunked ``train_step`` releases the calls it holds for their stages' order in bursts
(``stage_outbox``): a micro-batch's forward is a dozen calls to one worker, released at once.
Sent one by one, each costs a send here and, on the worker, a receive and a round of its
loop. Inside ``with hub.together:`` the client's requests are queued per worker instead, and
when the outermost ``with`` ends each worker's queue goes as one ``wire.encode_batch``
message (one message as it is). The worker takes a batch's messages in order, each checked
and run as if it had come alone (``workers/server.py``), so a request in a batch fails on
its own, with its own request id. Nothing waits inside the ``with``: a request that waits
is sent when the burst ends, before its wait begins. A worker that got a batch answers a
run of jobs in one message too (``workers/batches.py``): ``received`` takes its messages.
"""
from __future__ import annotations

from disthook import wire
from disthook.service.loop import send_frames
from disthook.service.rpc import malformed_answer

__all__ = ["Together", "received"]


class Together:
    """The requests made per worker address while ``depth`` > 0, in order."""

    __slots__ = ("depth", "queued", "sent", "sockets")

    def __init__(self, sockets: dict):
        self.sockets = sockets  # address -> its socket (the hub's, as it is now)
        self.depth = 0
        self.queued: dict[str, list[list]] = {}
        self.sent = 0  # messages sent (a batch counts once)

    def __enter__(self):
        self.depth += 1
        return self

    def __exit__(self, *exc) -> None:
        self.depth -= 1
        if not self.depth and self.queued:  # (also when the burst ended with an error:
            self.flush()  # what was queued counts as sent, its answers awaited)

    def send(self, address: str, frames: list) -> None:
        """Send ``frames`` to ``address`` now, or with the burst when one is being made."""
        if self.depth:
            self.queued.setdefault(address, []).append(frames)
            return
        self.sent += 1
        send_frames(self.sockets[address], frames)  # (small frames copied: cheaper here)

    def flush(self) -> None:
        """Each worker's queued requests as one message (or several where one would pass
        the frame cap a worker checks: ``wire.encode_batches``)."""
        queued, self.queued = self.queued, {}
        for address, messages in queued.items():
            sock = self.sockets.get(address)
            if sock is None:  # closed meanwhile
                continue
            for frames in wire.encode_batches(messages):
                self.sent += 1
                send_frames(sock, frames)


def received(frames: list, who=lambda: "a worker") -> list[wire.Message]:
    """The messages of what a worker sent (a batch's in order; it sends the answers a run of
    jobs made as one), each decoded on its own: one that is off is left out alone, or, where
    its header named its request, stands as an error answering it (rpc.malformed_answer;
    ``who()`` names the sender there)."""
    try:
        head, parts = wire.split_batch(frames)
        if parts is None:
            return [wire.decode(frames, _head=head)]
    except wire.WireError as exc:
        return _refused(exc, who)
    out = []
    for part in parts:
        try:
            out.append(wire.decode(part))
        except wire.WireError as exc:
            out += _refused(exc, who)
    return out


def _refused(exc: wire.WireError, who) -> list[wire.Message]:
    answer = malformed_answer(exc, who())
    return [] if answer is None else [answer]
