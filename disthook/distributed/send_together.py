"""Requests to one worker made in one burst go as one message (``Together``).

A chunked ``train_step`` releases the calls it holds for their stages' order in bursts
(``stage_outbox``): a micro-batch's forward is a dozen calls to one worker, released at once.
Sent one by one, each costs a send here and, on the worker, a receive and a round of its
loop. Inside ``with hub.together:`` the client's requests are queued per worker instead, and
when the outermost ``with`` ends each worker's queue goes as one ``wire.encode_batch``
message (one message as it is). The worker takes a batch's messages in order, each checked
and run as if it had come alone (``workers/server.py``), so a request in a batch fails on
its own, with its own request id. Nothing waits inside the ``with``: a request that waits
is sent when the burst ends, before its wait begins.
"""
from __future__ import annotations

from disthook import wire

__all__ = ["Together"]


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
        self.sockets[address].send_multipart(frames, copy=False)

    def flush(self) -> None:
        """Each worker's queued requests as one message (or several where one would pass
        the frame cap a worker checks, ``wire.Limits.max_frames``)."""
        queued, self.queued = self.queued, {}
        cap = wire.DEFAULT_LIMITS.max_frames - 1  # (the batch's table takes a frame)
        for address, messages in queued.items():
            sock = self.sockets.get(address)
            if sock is None:  # closed meanwhile
                continue
            for part in _parts(messages, cap):
                self.sent += 1
                sock.send_multipart(part[0] if len(part) == 1 else wire.encode_batch(part),
                                    copy=False)


def _parts(messages: list[list], cap: int):
    """``messages`` cut, in order, into runs of at most ``cap`` frames in all (a message
    longer than that alone)."""
    run: list[list] = []
    frames = 0
    for msg in messages:
        if run and frames + len(msg) > cap:
            yield run
            run, frames = [], 0
        run.append(msg)
        frames += len(msg)
    if run:
        yield run
