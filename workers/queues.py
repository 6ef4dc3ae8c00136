"""What one client may have queued on a worker: the requests waiting in its lanes (behind its
running request on a model) are capped per client (with keys, per key: every connection of
one key shares one allowance) by count and by what they hold (``Message.nbytes``: their
arrays, and their headers as decoded, which a header of empty msgpack maps makes 72 times
its size). Past the cap a
request is refused with a ``RuntimeError`` naming it, rather than held: a client sending
calls faster than the worker runs them (calls that do not wait, raw messages) otherwise made
the worker hold every one of them, its memory growing without bound for everyone. A call
a neighbour stage carries on for a client is not refused (its neighbour could not tell the
client): it passed the first stage's cap."""
from __future__ import annotations

__all__ = ["MAX_QUEUED", "MAX_QUEUED_BYTES", "QueueCaps"]

MAX_QUEUED = 4096  # requests one client may have waiting in its lanes on one worker
MAX_QUEUED_BYTES = 1 << 30  # what they hold


class QueueCaps:
    """The bytes queued per lane (``WorkerState.lanes``), and the check before queueing."""

    def __init__(self, limit: int = MAX_QUEUED, limit_bytes: int = MAX_QUEUED_BYTES,
                 fellows=None):
        self.limit, self.limit_bytes = limit, limit_bytes
        self.nbytes: dict[tuple, int] = {}  # lane -> the bytes of the requests queued in it
        # the connections counted with a client (with keys, its key's: LimitChecks._fellows)
        self.fellows = fellows or (lambda client: {client})

    def refusal(self, lanes: dict, job, may_refuse: bool = True) -> str | None:
        """Why ``job`` may not join its lane's queue, or None; counted as queued if not
        (``may_refuse`` False: counted whatever it finds)."""
        fellows = self.fellows(job.client)
        mine = [lane for lane in lanes if lane[1] in fellows]
        count = sum(len(lanes[lane]) for lane in mine)
        held = sum(self.nbytes.get(lane, 0) for lane in mine)
        if may_refuse and (count >= self.limit
                           or (count and held + job.msg.nbytes > self.limit_bytes)):
            return (f"this client has {count} requests waiting on this worker behind its "
                    f"running ones, holding {held / (1 << 20):.1f} MiB, and this "
                    f"{job.msg.type} ({job.msg.nbytes / (1 << 20):.1f} MiB) would pass the "
                    f"cap of {self.limit} requests or {self.limit_bytes >> 20} MiB "
                    "(--max-queued, --max-queued-mb): wait for the answers of earlier calls "
                    "(read a result) before sending more")
        self.nbytes[job.lane] = self.nbytes.get(job.lane, 0) + job.msg.nbytes
        return None

    def taken(self, job) -> None:
        """``job`` left its lane's queue to run."""
        left = self.nbytes.get(job.lane, 0) - job.msg.nbytes
        if left > 0:
            self.nbytes[job.lane] = left
        else:
            self.nbytes.pop(job.lane, None)

    def cleared(self, lane: tuple) -> None:
        """The lane's queue was emptied (its client went)."""
        self.nbytes.pop(lane, None)
