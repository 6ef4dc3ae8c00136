"""Releases of what the client no longer holds (``Releases``, a mixin of the client's channel):
a graph whose output was collected (``release``: its contexts on every stage) and a value kept
on a worker that no client tensor holds (``drop_values``). Neither needs an answer: they go
with the next request that waits, in the same message as that request where it goes to the
same worker (``send_together``); a finalizer that releases a graph between socket
operations sends at once. A drop never overtakes a request that uses its value: what a
chunked step holds for its stages' order goes first."""
from __future__ import annotations

import _thread
import os
import threading

import zmq

__all__ = ["Releases"]


class Releases:
    """Mixin of ``_Hub``: its ``pending_releases``, ``pending_drops``, ``together``,
    ``stage_outbox``, sockets and ``send``."""

    def release(self, ctx_ids: list[str]) -> None:
        """The client's graph of ``ctx_ids`` is gone (its output was collected): the workers
        may free theirs. A finalizer calls this wherever the collection happens: in the
        thread that uses the sockets and between socket operations the release is sent at
        once, anywhere else it goes with the next call."""
        self.pending_releases.extend(ctx_ids)
        depth = self.lock.depth_here()
        try:
            if not self.lock.acquire(blocking=False):  # another thread's request is under way
                return
            if not self._busy and threading.get_ident() == self._thread:
                self.flush_releases()
        except zmq.ZMQError:  # the sockets are going away (the interpreter exits)
            pass
        except KeyboardInterrupt:  # (Ctrl-C while the finalizer sent): raised again in the
            _thread.interrupt_main()  # program, where a finalizer's error is only printed
        finally:  # the lock given back if this call took it, wherever an interrupt landed
            if self.lock.depth_here() > depth:
                self.lock.release()

    def drop_values(self, addresses: set, vid: str) -> None:
        """No client tensor holds kept value ``vid`` any more: the workers at ``addresses``
        may free it."""
        for address in addresses:  # sent with the next request that waits
            self.pending_drops.setdefault(address, []).append(vid)

    def flush_releases(self) -> None:
        """Send the pending releases (one one-way message; the first stage passes it on)
        and the pending drops of kept values (one message to each worker keeping some),
        after the requests held for their stages' order (``stage_outbox``); inside a burst
        (``together``) they go in the burst's message to each worker."""
        with self.together:  # the held requests, drops and releases: one message a worker
            self._flush_releases()

    def _flush_releases(self) -> None:
        if self.stage_outbox is not None and not self.stage_outbox.drain():
            return  # (called while the outbox sends: all goes with the next request)
        if self.pending_drops and self.socks and os.getpid() == self._pid:
            drops, self.pending_drops = self.pending_drops, {}
            self._busy += 1
            try:
                for address, vids in drops.items():
                    if address in self.socks and address not in self.lost:
                        self.send(address, "drop_values", {"values": vids})
            finally:
                self._busy -= 1
        if self.pending_releases and self.socks and os.getpid() == self._pid \
                and not self.in_flight:  # (a release would overtake the calls in flight)
            contexts, self.pending_releases = self.pending_releases, []
            for ctx_id in contexts:
                self.drop_context(ctx_id)
            first = next(iter(self.socks))
            self._busy += 1
            try:
                self.send(first, "release", {"contexts": contexts})
            finally:
                self._busy -= 1
