"""Batches in and out of a worker (``Batches``, a mixin of the worker).

In: a client may send a burst of requests to one worker, or its answers to a burst of hook
events, as one ``wire.encode_batch`` message (``disthook.distributed.send_together``). Each
message of it is taken as if it had come alone: decoded on its own (one that is off is
refused alone, the others go on), then checked and run by the worker's state like any
other, so a batch lets no client act for another.

Out: a chunked training step's calls come in such bursts, and the client waits for none of
their answers but the last (it checks each answer's form when it comes: ``async_calls``).
While the worker runs the jobs it starts in one round back to back for one client, their
answers to that client are queued in order and go as one message when the run ends: before
a job of another client starts, before a job waits (what it waits for may depend on what
is queued), when no job is left, and after the job during which the oldest answer queued
became ``HELD_AT_MOST_S`` old. Anything else sent to that client (a hook event, a warning)
goes at once, after what was queued. A client gets batches
only once it has sent one (it speaks protocol 9); any other peer is answered message by
message.
"""
from __future__ import annotations

import time

from disthook import wire
from disthook.service.rpc import error_fields

__all__ = ["HELD_AT_MOST_S", "MAX_PEERS_KEPT", "Batches"]

MAX_PEERS_KEPT = 4096  # identities known to take batches, at most (the oldest go first)
# an answer waits for the rest of its run this long at most (then what is queued goes after
# the job that passed it): a client's deadline is renewed by each answer it gets
HELD_AT_MOST_S = 0.05
# what is queued: answers (a hook event goes at once: its answer may come while its job
# goes on, when the job ran ahead of it)
_HELD = frozenset({"ok", "error"})


class Batches:
    """Mixin of the worker (a ``Service`` with a ``router``, a ``peer_log`` and ``who``)."""

    def _held_init(self) -> None:
        self.holding = False  # True while a run of jobs starts (run_jobs)
        self.takes_batches: dict[bytes, None] = {}  # peers that sent a batch
        self._held: dict[bytes, list] = {}  # peer -> the frames of each message queued
        self._held_since = 0.0  # when the oldest message queued was queued

    # ---- in ------------------------------------------------------------------------------
    def messages_in(self, sender: bytes, body: list) -> list:
        """The messages of what ``sender`` sent (``WireError``: none, refused whole)."""
        head, parts = wire.split_batch(body)
        if parts is None:
            return [wire.decode(body, _head=head)]
        if sender not in self.takes_batches:  # it decodes batches too
            self.takes_batches[sender] = None
            while len(self.takes_batches) > MAX_PEERS_KEPT:
                del self.takes_batches[next(iter(self.takes_batches))]
        msgs = []
        for part in parts:
            try:
                msgs.append(wire.decode(part))
            except wire.WireError as exc:  # (this one alone: the others go on)
                self.refuse(sender, exc)
        return msgs

    def refuse(self, sender: bytes, exc: Exception) -> None:
        """A message ``sender`` sent is refused: a warning (a few per peer) and an error
        answer to its request (under no request id where its header named none)."""
        self.peer_log.warning(sender, "%s: refused a message from %s: %s", self.label,
                              self.who(sender), exc)
        self.reply(self.router, sender, getattr(exc, "req", 0), "error",
                   error_fields(exc, worker=self.name))

    def forget_batches(self, peer: bytes) -> None:
        self.takes_batches.pop(peer, None)
        self._held.pop(peer, None)

    # ---- out -----------------------------------------------------------------------------
    def run_jobs(self, todo: list, run) -> None:
        """``run(job)`` for each job of ``todo`` in order (while the worker runs), what each
        run of one client's jobs sends it going as one message."""
        self.holding = True
        try:
            while todo and self._running:
                job = todo.pop(0)
                run(job)
                if todo and (todo[0].sender != job.sender or (
                        self._held and time.monotonic() - self._held_since > HELD_AT_MOST_S)):
                    self.flush_replies()
        finally:
            self.holding = False
            self.flush_replies()

    def reply(self, sock, to: bytes, req: int, msg_type: str, fields: dict,
              ctx: str | None = None) -> None:
        if not self.holding or sock is not self.router or to not in self.takes_batches \
                or msg_type not in _HELD:
            if to in self._held:  # what was queued for it goes first
                self.flush_replies()
            super().reply(sock, to, req, msg_type, fields, ctx)
            return
        try:
            frames = wire.encode(msg_type, fields, req=req, ctx=ctx)
        except wire.WireError as exc:  # a handler returned something unsendable (as Service)
            frames = wire.encode("error", error_fields(exc, worker=self.name), req=req, ctx=ctx)
        if not self._held:
            self._held_since = time.monotonic()
        self._held.setdefault(to, []).append(frames)

    def flush_replies(self) -> None:
        """Send what is queued: one message to each peer (as it is when it is one)."""
        held, self._held = self._held, {}
        for to, messages in held.items():
            for frames in wire.encode_batches(messages):
                self._send(self.router, to, frames)
