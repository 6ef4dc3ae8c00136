"""A worker's request path, taken apart: how its loop reads the endpoint (the monitor of
closed connections read once a burst, and again before a message whose connection is not
the one its descriptor had), how frames go out and come in, and the random stream a call
carries (set and read without JSON when it did not move). Sockets on loopback in this
process; no process is started."""
import json
import time

import numpy as np
import pytest
import zmq

import disthook
from disthook import random as streams
from disthook import wire
from disthook.service.loop import recv_now, send_frames
from workers.peers import Peers
from workers.server import Worker


@pytest.fixture
def endpoint():
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    dealers = []

    def dial(identity: bytes) -> zmq.Socket:
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.IDENTITY, identity)
        sock.connect(f"tcp://127.0.0.1:{port}")
        dealers.append(sock)
        return sock

    yield router, dial
    ctx.destroy(linger=0)


def _wait_for(sock: zmq.Socket) -> None:
    assert sock.poll(5000), "nothing came within 5 s"


class _Shell:
    """What a burst on the endpoint touches of a worker: the log says, in order, when the
    monitor was read and which message the state was handed."""

    def __init__(self, router):
        self.router, self.keys, self.label = router, None, "worker w"
        self.peers = Peers(None)
        self.takes_batches = {}
        self._gone = {}  # peers that left (Service.peer_left)
        self.log = []
        shell = self

        class _State:
            def handle(self, event):
                shell.log.append(("message", event.sender, event.msg.get("model")))
                return []

        self.state = _State()

    def read_monitor(self):
        self.log.append(("monitor",))

    def _execute(self, instructions):
        pass

    def _on_message(self, frames):
        Worker._on_message(self, frames)

    messages_in = Worker.messages_in  # (a batch's messages one by one: workers/batches.py)


def _message(model: str) -> list:
    return wire.encode("drop_values", {"model": model, "values": []})


def test_the_monitor_is_read_once_a_burst_and_before_a_connection_first_heard(endpoint):
    router, dial = endpoint
    a, b = dial(b"client-a"), dial(b"client-b")
    for sock, model in ((a, "m1"), (a, "m2"), (b, "m3")):
        sock.send_multipart(_message(model))
    _wait_for(router)
    time.sleep(0.2)  # all three in
    shell = _Shell(router)
    Worker._on_router(shell)
    # once before the burst; again before the first message of each connection (its
    # descriptor may be one a closed connection had); never before a known one's next
    # (the endpoint takes the connections in turn: the order of a's and b's may vary)
    assert shell.log[0] == ("monitor",)
    seen, got = set(), []
    for before, entry in zip(shell.log[1:], shell.log[2:]):
        if entry[0] == "message":
            got.append((entry[2], before == ("monitor",), entry[1] not in seen))
            seen.add(entry[1])
    assert sorted(model for model, *_ in got) == ["m1", "m2", "m3"]
    assert all(monitor_read == first for _, monitor_read, first in got), shell.log
    assert len(shell.log) == 1 + 2 + 3


def test_a_descriptor_known_by_another_peer_reads_the_monitor_first(endpoint):
    router, dial = endpoint
    a = dial(b"client-a")
    a.send_multipart(_message("m1"))
    _wait_for(router)
    shell = _Shell(router)
    Worker._on_router(shell)
    fd = next(iter(shell.peers.by_fd))
    shell.peers.by_fd[fd] = b"closed-one"  # as if client-a got the descriptor of a closed peer
    shell.log.clear()
    a.send_multipart(_message("m2"))
    _wait_for(router)
    Worker._on_router(shell)
    assert shell.log == [("monitor",), ("monitor",), ("message", b"client-a", "m2")]
    assert shell.peers.by_fd[fd] == b"client-a"


def test_frames_go_and_come_whole_small_and_large(endpoint):
    router, dial = endpoint
    a = dial(b"client-a")
    big = np.arange(40000, dtype=np.float32)  # 160 kB: sent from its own buffer
    small = np.arange(8, dtype=np.float32)  # copied
    a.send(b"hi")
    _wait_for(router)
    assert recv_now(router)[1].bytes == b"hi"
    assert recv_now(router) is None  # nothing more: never blocks
    for n in range(2):
        send_frames(router, [b"client-a", *wire.encode("pipe", {
            "model": "m", "step": "s", "kind": "value", "mb": n,
            "data": big if n else small, "reason": None})])
    got = []
    for _ in range(2):
        _wait_for(a)
        got.append(wire.decode(recv_now(a)))
    assert [m["mb"] for m in got] == [0, 1]  # two messages, each its own frames
    np.testing.assert_array_equal(got[0]["data"], small)
    np.testing.assert_array_equal(got[1]["data"], big)


def test_the_random_stream_comes_back_as_the_same_text_when_nothing_drew():
    disthook.manual_seed(3)
    text = streams._stream_state()
    assert json.loads(text) == streams.default_generator._rng.bit_generator.state
    streams._set_stream_state(text)
    assert streams._stream_state() is text  # nothing drew: the very text, no JSON made
    first = disthook.rand(4).numpy()
    moved = streams._stream_state()
    assert moved != text
    assert json.loads(moved) == streams.default_generator._rng.bit_generator.state
    streams._set_stream_state(text)  # set again after a draw: the stream goes back
    np.testing.assert_array_equal(disthook.rand(4).numpy(), first)
    assert streams._stream_state() == moved
    disthook.manual_seed(3)  # a new generator with the state the text says
    assert streams._stream_state() == text


class _Stage:
    def __init__(self, module):
        self.module, self.name = module, "stage 0 of m"


def test_a_call_finds_its_part_as_get_submodule_does():
    from disthook import nn
    from workers.stage_parts import _submodule

    class Shadowed(nn.Module):  # a class attribute named like a child: getattr finds it
        def __init__(self):
            super().__init__()
            self.inner = nn.Linear(2, 2)

        @property
        def head(self):
            return self.inner

    model = nn.Sequential()
    model.add_module("h", nn.ModuleList([nn.Linear(2, 2), Shadowed()]))
    shadowed = model.h[1]
    shadowed._modules["head"] = nn.ReLU()  # registered behind it: the property wins
    st = _Stage(model)
    for path in ("", "h", "h.0", "h.1", "h.1.inner", "h.1.head"):
        assert _submodule(st, path) is model.get_submodule(path), path
    assert _submodule(st, "h.1.head") is shadowed.inner
    with pytest.raises(LookupError, match="holds h, not 'x.0'"):
        _submodule(st, "x.0")
    with pytest.raises(AttributeError):
        _submodule(st, "h.5")


def test_the_request_cost_timers_count_each_cpu_second_once():
    from disthook.bench.request_cost import table
    from workers.timing import Timers

    now = [0.0]

    def spend(seconds):
        now[0] += seconds

    timers = Timers(clock=lambda: now[0])
    decode = timers.wrap("decode", lambda: spend(2))
    inner = timers.wrap("job:forward", lambda: (spend(1), decode(), spend(3)))
    loop = timers.wrap("loop", lambda: (spend(5), inner(), timers.wrap("loop", spend)(4)))
    loop()
    assert timers.seconds == {"decode": 2, "job:forward": 4, "loop": 9}  # 15 s in all
    assert timers.calls == {"decode": 1, "job:forward": 1, "loop": 2}
    rows = dict(table([{"seconds": timers.seconds, "calls": timers.calls}]))
    assert rows["the job's own Python"] == [4e6] and rows["decode"] == [2e6]
    assert rows["all but compute"] == [15e6]
