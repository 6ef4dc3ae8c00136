"""A worker that sends its client a frame of any size: the client set no ``ZMQ_MAXMSGSIZE``
on its worker sockets, so ZeroMQ held the whole frame before the decoder refused it (a
compromised worker could make a client hold gigabytes). Now the client's sockets cap a
frame at ``max_answer_mb`` (2048 MiB by default, the largest array an answer carries), and
the connection ZeroMQ closes for a larger one fails the call with ``AnswerTooLarge``, which
says so, where before the same close read as a lost worker (``WorkerLost`` blaming
unanswered pings)."""
import time

import pytest
import zmq
from test_answers_ahead import FakeWorker

from disthook.distributed import AnswerTooLarge, WorkerLost, answer_cap, connect
from disthook.distributed.channel import _Hub

pytestmark = pytest.mark.timeout(60)

TIMEOUT = 20.0


def _hub(worker, **options):
    hub = _Hub("m", [worker.address], timeout=TIMEOUT, **options)
    hub.holders[worker.address] = ("w9", 0)
    return hub


def test_the_client_caps_a_frame_at_the_largest_the_wire_carries_by_default():
    worker = FakeWorker()
    hub = _hub(worker)
    try:
        sock = hub.socks[worker.address]
        assert sock.getsockopt(zmq.MAXMSGSIZE) == (2048 << 20) + 4096
    finally:
        hub.close(unload=False)


def test_a_frame_over_the_cap_fails_the_call_saying_so():
    worker = FakeWorker()
    hub = _hub(worker, max_answer_mb=1)

    def too_large(client, msg):
        worker.sock.send_multipart([client, b"x" * (2 << 20)])

    try:
        worker.serve(too_large)
        start = time.monotonic()
        with pytest.raises(AnswerTooLarge, match=r"worker w9, holding stage 0, sent this client "
                                                 r"a message over its cap of 1 MiB a frame "
                                                 r"during status.*max_answer_mb=") as caught:
            hub.request(worker.address, "status", {})
        assert time.monotonic() - start < TIMEOUT / 4, "the request waited for its deadline"
        assert caught.value.cap_mb == 1 and isinstance(caught.value, WorkerLost)
        assert "pings" not in str(caught.value)
    finally:
        hub.close(unload=False)


def test_a_worker_that_goes_is_still_lost_not_over_the_cap():
    worker = FakeWorker()
    hub = _hub(worker, max_answer_mb=1)

    def go(client, msg):
        worker.sock.close(linger=0)

    try:
        worker.serve(go)
        with pytest.raises(WorkerLost) as caught:
            hub.request(worker.address, "status", {})
        assert not isinstance(caught.value, AnswerTooLarge)
        assert "worker w9, holding stage 0, is lost" in str(caught.value)
    finally:
        hub.close(unload=False)


@pytest.mark.parametrize("mb", [0.5, 4096, "64", True])
def test_a_cap_outside_what_the_wire_carries_is_refused(mb):
    with pytest.raises(ValueError, match="max_answer_mb takes a size in MiB from 1"):
        connect("tcp://127.0.0.1:1", max_answer_mb=mb)
    with pytest.raises(ValueError, match="max_answer_mb takes"):
        answer_cap.cap_bytes(mb)
