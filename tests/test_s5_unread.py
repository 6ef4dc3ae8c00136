"""A process's answers to a peer that reads none are bounded in bytes (UnreadAnswers): past
the limit the next large answer is replaced by an error under its own request id (each
answer of a batch by its own), and once the peer reads, answers go again."""
import time

import numpy as np
import zmq

from disthook import wire
from disthook.service.loop import _send
from disthook.service.unread import UnreadAnswers


def _answer(req: int) -> list:
    return wire.encode("ok", {"result": {"output": np.zeros(1 << 18, np.float32)}}, req=req,
                       ctx=f"c{req}")  # 1 MiB


def _pair():
    ctx = zmq.Context()
    router, dealer = ctx.socket(zmq.ROUTER), ctx.socket(zmq.DEALER)
    router.bind("inproc://s5-unread")
    dealer.setsockopt(zmq.IDENTITY, b"d")
    dealer.connect("inproc://s5-unread")
    dealer.send(b"hi")
    router.recv_multipart()  # (the route to it exists)
    return ctx, router, dealer


def test_answers_past_the_limit_become_errors_until_the_peer_reads():
    ctx, router, dealer = _pair()
    unread = UnreadAnswers(7 << 19, "--max-unread-mb")  # 3.5 MiB
    try:
        sent = []
        for req in range(1, 6):
            frames = _answer(req)
            refused = unread.refusal(b"d", frames, "worker w1")
            if refused is None:
                router.send(b"d", zmq.SNDMORE)
                unread.send(_send, router, b"d", frames)
                sent.append(req)
            else:
                (error,) = refused
                msg = wire.decode(error)
                assert (msg.type, msg.req, msg.ctx) == ("error", req, f"c{req}")
                assert msg["kind"] == "RuntimeError"
                assert "3.0 MiB of answers it has not read on worker w1" in msg["message"]
                assert "(--max-unread-mb)" in msg["message"]
        assert sent == [1, 2, 3]
        assert unread.held(b"d") == 3 * (1 << 20) + 3 * (len(_answer(1)[0]))
        for _ in sent:  # the peer reads them: ZeroMQ lets them go
            dealer.recv_multipart()
        deadline = time.monotonic() + 5
        while unread.held(b"d") and time.monotonic() < deadline:
            time.sleep(0.01)
        assert unread.held(b"d") == 0
        assert unread.refusal(b"d", _answer(6), "worker w1") is None
    finally:
        router.close(0)
        dealer.close(0)
        ctx.term()


def test_a_batch_past_the_limit_is_an_error_per_answer():
    unread = UnreadAnswers(1, "--max-unread-mb")
    unread._held[b"d"] = __import__("collections").deque([(_NotDone(), 1)])
    batch = wire.encode_batch([_answer(7), _answer(8)])
    refused = unread.refusal(b"d", batch, "worker w1")
    assert [wire.decode(f).req for f in refused] == [7, 8]


class _NotDone:
    done = False


def test_small_answers_are_left_to_zeromqs_count():
    unread = UnreadAnswers(1, "--max-unread-mb")
    unread._held[b"d"] = __import__("collections").deque([(_NotDone(), 1)])
    assert unread.refusal(b"d", wire.encode("ok", {"result": 1}, req=1), "w") is None
