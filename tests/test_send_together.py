"""``Together``: requests made in one burst go as one message per worker, in order, cut
where one message would pass the frame cap a worker checks."""
import zmq

from disthook import wire
from disthook.distributed.send_together import Together


class _Sock:
    """A PUSH socket whose messages a PULL end keeps (``sent``: each one's frames)."""

    _n = 0

    def __init__(self):
        ctx = zmq.Context.instance()
        _Sock._n += 1
        self.push, self.pull = ctx.socket(zmq.PUSH), ctx.socket(zmq.PULL)
        self.pull.bind(f"inproc://together-{_Sock._n}")
        self.push.connect(f"inproc://together-{_Sock._n}")
        self._sent = []

    @property
    def sent(self):
        while self.pull.poll(50):
            self._sent.append(self.pull.recv_multipart())
        return self._sent


def _socks(*names):
    made = {name: _Sock() for name in names}
    return made, {name: s.push for name, s in made.items()}


def _msg(req: int) -> list:
    return wire.encode("drop_values", {"model": "m", "values": [f"v{req}"]}, req=req)


def test_a_burst_goes_as_one_batch_per_worker_in_order():
    socks, pushes = _socks("a", "b")
    together = Together(pushes)
    together.send("a", _msg(1))  # outside a burst: at once
    assert len(socks["a"].sent) == 1
    with together:
        together.send("a", _msg(2))
        with together:  # nested: the outermost ends the burst
            together.send("b", _msg(3))
            together.send("a", _msg(4))
        assert len(socks["a"].sent) == 1 and not socks["b"].sent
    assert [m.req for m in wire.decode_all(socks["a"].sent[1])] == [2, 4]
    assert [m.req for m in wire.decode_all(socks["b"].sent[0])] == [3]  # one: as it is
    assert not socks["b"].sent[0][0].startswith(wire.BATCH_MAGIC)
    assert together.sent == 3


def test_a_burst_ended_by_an_error_still_goes():
    socks, pushes = _socks("a")
    together = Together(pushes)
    try:
        with together:
            together.send("a", _msg(1))
            raise KeyError("x")
    except KeyError:
        pass
    assert [m.req for m in wire.decode_all(socks["a"].sent[0])] == [1]


def test_a_burst_past_the_frame_cap_is_cut_into_batches_a_worker_takes():
    socks, pushes = _socks("a")
    together = Together(pushes)
    cap = wire.DEFAULT_LIMITS.max_frames
    with together:
        for req in range(1, cap + 2):  # one frame each: more than one batch may hold
            together.send("a", _msg(req))
    reqs = []
    for frames in socks["a"].sent:
        assert len(frames) <= cap
        reqs += [m.req for m in wire.decode_all(frames)]
    assert len(socks["a"].sent) == 2 and reqs == list(range(1, cap + 2))
