"""A reply to a peer whose connection is not up yet is kept and sent at the next ticks, not
dropped (issue 32's 120 s stall: the last stage answered a client that had only just
connected to it, before its handshake was done, and the answer was lost)."""
import time

import zmq

from disthook import wire
from disthook.service import loop
from disthook.service.loop import Service


def test_a_reply_without_a_route_yet_arrives_once_the_peer_connects():
    service = Service("tcp://127.0.0.1:0", name="test")
    ctx = zmq.Context()
    dealer = ctx.socket(zmq.DEALER)
    try:
        service.reply(service.router, b"late-client", 7, "ok", {"result": 42})
        assert len(service._unsent) == 1  # no route: kept
        dealer.setsockopt(zmq.IDENTITY, b"late-client")
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.connect(service.address)
        deadline = time.monotonic() + 10
        while not dealer.poll(50):
            service.tick()
            assert time.monotonic() < deadline, "the kept reply never came"
        msg = wire.decode(dealer.recv_multipart())
        assert (msg.type, msg.req, msg["result"]) == ("ok", 7, 42)
        assert service._unsent == []
    finally:
        dealer.close(0)
        ctx.term()
        service.close()


def test_a_reply_kept_too_long_goes(monkeypatch):
    service = Service("tcp://127.0.0.1:0", name="test")
    try:
        service.reply(service.router, b"never", 1, "ok", {"result": None})
        monkeypatch.setattr(loop, "UNROUTABLE_KEEP_S", 0.0)
        time.sleep(0.01)
        service.tick()
        assert service._unsent == []
    finally:
        service.close()
