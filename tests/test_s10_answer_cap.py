"""How a client tells a worker that sent a frame over its cap (``max_answer_mb``) from one
that went: libzmq reports both as a closed connection, and only the redial that follows a
loss (within a millisecond) tells them apart. A redial that comes late, because this
process got no CPU for the second the client waits for it, read as the cap before: a
worker that had gone was reported as sending a frame over the cap (``AnswerTooLarge``,
telling the user to raise ``max_answer_mb``). Now the client claims the cap only when the
worker still takes a connection; one that went is ``WorkerLost``."""
import pytest
from test_answers_ahead import FakeWorker

from disthook.distributed import AnswerTooLarge, WorkerLost, answer_cap
from disthook.distributed.channel import _Hub

pytestmark = pytest.mark.timeout(60)


def _late_redial(monkeypatch):
    """Every close reads as not redialed in time (a starved ZeroMQ thread)."""
    ended = answer_cap.ended
    monkeypatch.setattr(answer_cap, "ended",
                        lambda monitor: None if ended(monitor) is None else "refused")


def test_a_worker_that_went_is_lost_even_when_its_redial_came_late(monkeypatch):
    _late_redial(monkeypatch)
    worker = FakeWorker()
    hub = _Hub("m", [worker.address], timeout=20.0, max_answer_mb=1)
    hub.holders[worker.address] = ("w9", 0)

    def go(client, msg):
        worker.sock.close(linger=0)

    try:
        worker.serve(go)
        with pytest.raises(WorkerLost) as caught:
            hub.request(worker.address, "status", {})
        assert not isinstance(caught.value, AnswerTooLarge), str(caught.value)
        assert "worker w9, holding stage 0, is lost" in str(caught.value)
    finally:
        hub.close(unload=False)


def test_a_worker_still_up_after_a_close_not_redialed_sent_over_the_cap(monkeypatch):
    _late_redial(monkeypatch)
    worker = FakeWorker()
    hub = _Hub("m", [worker.address], timeout=20.0, max_answer_mb=1)
    hub.holders[worker.address] = ("w9", 0)

    def too_large(client, msg):
        worker.sock.send_multipart([client, b"x" * (2 << 20)])

    try:
        worker.serve(too_large)
        with pytest.raises(AnswerTooLarge, match="over its cap of 1 MiB"):
            hub.request(worker.address, "status", {})
    finally:
        hub.close(unload=False)
