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


def test_replies_to_a_peer_that_left_go_without_a_warning(caplog):
    """A client that leaves mid-forward (L1): the last stage's answer found no route, was
    kept 30 s and then dropped with a warning naming another client (the name of the one
    that left was given again); now the worker tells its loop the peer left and the kept
    reply goes, and so does one that comes later, at debug level."""
    service = Service("tcp://127.0.0.1:0", name="test")
    try:
        service.reply(service.router, b"left-mid-forward", 1, "ok", {"result": 1})
        assert len(service._unsent) == 1  # no route (yet): kept
        with caplog.at_level("DEBUG", logger=service.log.name):
            service.peer_left(b"left-mid-forward")
            assert service._unsent == []
            service.reply(service.router, b"left-mid-forward", 2, "ok", {"result": 2})
            assert service._unsent == []  # not kept for 30 s
        assert [r.levelname for r in caplog.records] == ["DEBUG", "DEBUG"]
        assert all("it went away" in r.getMessage() for r in caplog.records)
        service.reply(service.router, b"not-connected-yet", 3, "ok", {"result": 3})
        assert len(service._unsent) == 1  # a peer not seen leaving: kept, as before
    finally:
        service.close()
