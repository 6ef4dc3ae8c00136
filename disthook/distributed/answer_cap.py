"""The cap on the frames a client takes from its workers (ZeroMQ's ``ZMQ_MAXMSGSIZE``), and
how a connection that the cap ended reads as such.

A worker's answer is a header (at most 1 MiB, ``wire.Limits.max_header_bytes``) and arrays,
each at most 2 GiB (``max_array_bytes``), which is all the client's decoder takes: no
legitimate answer has a larger frame. Without a cap ZeroMQ holds a frame of any size before
the decoder sees it, so a worker that lies (compromised, or not ours) could make the client
hold gigabytes more. With the cap ZeroMQ reads a frame's size first and closes the
connection of a peer that sends a larger one, unread; it reports only that the connection
closed (``EVENT_DISCONNECTED``), as when the worker dies. What tells the two apart: a
connection that closed by itself (the worker's process went, or pings went unanswered) is
dialed again at once (``EVENT_CONNECT_RETRIED``), and one closed for breaking the protocol
(a frame over the cap) is not (measured with libzmq 4.3.5: the retry comes within a
millisecond; none after a refused frame; libzmq reports nothing else that differs, see
disthook/service/frame_cap.py). A close not redialed within a second is taken for the cap
only when the worker still takes a connection (``still_up``): a redial that came late (this
process without CPU for that second) after the worker went no longer reads as the cap."""
import zmq

from disthook import wire
from disthook.service.frame_cap import EVENTS, RETRY_WITHIN_S, redialed
from disthook.service.rpc import ClusterError, WorkerLost, dial_once

__all__ = ["EVENTS", "AnswerTooLarge", "cap_bytes", "ended", "still_up"]

# the default: the largest frame the client's decoder takes anyway (an array, 2 GiB)
DEFAULT_MAX_ANSWER_MB = wire.DEFAULT_LIMITS.max_array_bytes >> 20
MIN_MAX_ANSWER_MB = wire.DEFAULT_LIMITS.max_header_bytes >> 20  # an answer's header fits


def cap_bytes(max_answer_mb) -> int:
    """``ZMQ_MAXMSGSIZE`` for ``max_answer_mb``; ``ValueError`` for a cap outside what the
    wire carries (at least an answer's header, at most an array's 2 GiB)."""
    if isinstance(max_answer_mb, bool) or not isinstance(max_answer_mb, (int, float)) or not (
            MIN_MAX_ANSWER_MB <= max_answer_mb <= DEFAULT_MAX_ANSWER_MB):
        raise ValueError(f"max_answer_mb takes a size in MiB from {MIN_MAX_ANSWER_MB} (an "
                         f"answer's header) to {DEFAULT_MAX_ANSWER_MB} (the largest array "
                         f"an answer carries), got {max_answer_mb!r}")
    return int(max_answer_mb * (1 << 20)) + wire.FRAME_SLACK


def ended(monitor: zmq.Socket) -> str | None:
    """What the event waiting on ``monitor`` says: None (no event, or not a close), "lost"
    (the connection closed and is dialed again), "refused" (it closed and is not: the
    worker sent a frame over the cap, or broke ZeroMQ's framing)."""
    from zmq.utils.monitor import recv_monitor_message

    try:
        event = recv_monitor_message(monitor, zmq.NOBLOCK)
    except zmq.Again:
        return None
    if event["event"] != zmq.EVENT_DISCONNECTED:
        return None
    return "lost" if redialed(monitor) else "refused"



class AnswerTooLarge(WorkerLost):
    """A worker sent this client a frame over its cap (``max_answer_mb``): the client closed
    that connection unread, as it would a lost worker's, and this model object is unusable."""

    def __init__(self, worker: str, stage: int, what: str, context: str | None = None, *,
                 cap_mb: float = DEFAULT_MAX_ANSWER_MB):
        super().__init__(worker, stage, what, context)
        self.cap_mb = cap_mb
        ctx = f" (context {context})" if context else ""
        self.args = ((
            f"worker {worker}, holding stage {stage}, sent this client a message over its "
            f"cap of {cap_mb:g} MiB a frame during {what}{ctx} (or one that is not ZeroMQ's "
            "framing); the client closed that connection unread, so this model object is "
            "unusable. If the model's answers are that large (an output, a gradient, a "
            "weight over the cap), connect with a larger max_answer_mb (connect(address, "
            f"max_answer_mb=...), at most {DEFAULT_MAX_ANSWER_MB}) and attach or deploy the "
            "model again; otherwise the worker is not to be trusted"),)


def still_up(address: str, keys=None) -> bool:
    """Whether the worker at ``address``, whose connection closed and was not dialed again
    (``ended`` said "refused"), still takes a connection: it does after sending a frame
    over the cap; a worker that went does not, and its close read as a refusal only for
    want of CPU in this process's ZeroMQ thread while the redial was awaited. A host that
    says nothing within ``RETRY_WITHIN_S`` is not taken for up."""
    try:
        return dial_once(address, keys=keys, within=RETRY_WITHIN_S) is True
    except (ClusterError, OSError, zmq.ZMQError):  # (refused keys, not ZeroMQ: not ours)
        return False
