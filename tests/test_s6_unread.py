"""The large answers a worker holds unread are weighed per client as the worker counts its
clients (with keys, per key), not per connection: each connection had a limit of its own, so
a client that opened ten connections and read none of its answers made a worker hold ten
times ``--max-unread-mb``."""
import zmq
from test_s5_unread import _answer

from disthook import wire
from disthook.service.loop import _send
from disthook.service.unread import UnreadAnswers


def test_the_connections_of_one_key_share_one_limit():
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.bind("inproc://s6-unread")
    dealers = []
    for name in (b"alice-1", b"alice-2", b"bob"):
        dealer = ctx.socket(zmq.DEALER)
        dealer.setsockopt(zmq.IDENTITY, name)
        dealer.connect("inproc://s6-unread")
        dealer.send(b"hi")
        router.recv_multipart()  # (the route to it exists)
        dealers.append(dealer)
    unread = UnreadAnswers(7 << 19, "--max-unread-mb",  # 3.5 MiB
                           account=lambda peer: peer.split(b"-")[0])
    try:
        for req, peer in enumerate([b"alice-1", b"alice-1", b"alice-2"], 1):  # 3 MiB unread
            assert unread.refusal(peer, _answer(req), "worker w1") is None
            router.send(peer, zmq.SNDMORE)
            unread.send(_send, router, peer, _answer(req))
        (error,) = unread.refusal(b"alice-2", _answer(4), "worker w1")  # its other connection
        msg = wire.decode(error)
        assert (msg.type, msg.req) == ("error", 4)
        assert "3.0 MiB of answers it has not read" in msg["message"]
        assert unread.refusal(b"bob", _answer(5), "worker w1") is None  # another client
    finally:
        for sock in (router, *dealers):
            sock.close(0)
        ctx.term()
