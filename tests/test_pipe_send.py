"""How a stage's pipe records leave (workers/steps.py, disthook/service/loop.send_frames): in
the wire's short form; an array under PIPE_COPY_BELOW copied into ZeroMQ's message (no
tracked buffer, no wake-up of pyzmq's freeing thread), a larger one sent in place."""
import numpy as np
import zmq

from disthook import wire
from disthook.service.loop import PIPE_COPY_BELOW, send_frames
from workers.steps import StepHandlers


class _Stage:
    model = "m"


class _Worker:
    def __init__(self):
        self.counted = {}

    def _count(self, model, what, n):
        self.counted[what] = self.counted.get(what, 0) + n


def _through_inproc(data, copy_below="stage"):
    """The array as a receiver over inproc gets it (inproc hands over the very buffer of a
    frame sent in place): sent by a stage's own send (copy_below "stage"), or by
    send_frames with that threshold; whether the receiver's array is the sender's."""
    ctx = zmq.Context()
    a, b = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    try:
        a.bind("inproc://pipe-send")
        b.connect("inproc://pipe-send")
        if copy_below == "stage":
            stage, worker = _Stage(), _Worker()
            stage.neighbours = {"next": a}
            StepHandlers._pipe_send(worker, stage, "next", "s", "act", 0, data)
            assert worker.counted == {"bytes_to_peers": data.nbytes}
        else:
            send_frames(a, wire.encode("pipe", {"model": "m", "step": "s", "kind": "act",
                                                "mb": 0, "data": data}), copy_below)
        frames = b.recv_multipart(copy=False)
        assert bytes(frames[0].buffer[:len(wire.PIPE_MAGIC)]) == wire.PIPE_MAGIC
        got = wire.decode(frames)["data"]
        assert np.array_equal(got, data)
        return np.shares_memory(np.frombuffer(frames[1].buffer, np.uint8),
                                data.view(np.uint8))
    finally:
        a.close(linger=0)
        b.close(linger=0)
        ctx.term()


def test_an_activation_under_the_threshold_is_copied_as_it_is_sent():
    data = np.ones((32, 1024), np.float32)  # 128 KiB, a micro-batch of the bench's stages
    assert data.nbytes < PIPE_COPY_BELOW
    assert not _through_inproc(data)


def test_a_larger_array_is_sent_from_its_own_buffer():
    data = np.ones(PIPE_COPY_BELOW // 4 + 16, np.float32)
    assert _through_inproc(data)


def test_send_frames_keeps_zeromqs_threshold_by_default():
    data = np.ones(zmq.COPY_THRESHOLD // 4 + 16, np.float32)
    assert _through_inproc(data, None)


class _Sends:
    """A link's socket that records each ``sendmsg`` (or ``send`` of one buffer): the
    buffers it was handed."""

    def __init__(self, real):
        self.real, self.calls = real, []

    def sendmsg(self, buffers, *args):
        self.calls.append(list(buffers))
        return self.real.sendmsg(buffers, *args)

    def send(self, buffer, *args):
        self.calls.append([buffer])
        return self.real.send(buffer, *args)


def test_a_record_to_a_local_link_is_one_sendmsg_of_its_header_and_its_array_in_place():
    import socket

    from workers.links import Link

    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    dialled, accepted = Link(a, b"w>next>0"), Link(b, accepted=True)
    stage, worker = _Stage(), _Worker()
    stage.neighbours = {"next": dialled}
    sends = dialled.sock = _Sends(dialled.sock)
    data = np.arange(32 * 1024, dtype=np.float32).reshape(32, 1024)
    try:
        StepHandlers._pipe_send(worker, stage, "next", "s", "act", 3, data)
        (buffers,) = sends.calls  # one call: the prefix with the header, then the array
        assert len(buffers) == 2 and np.shares_memory(np.asarray(buffers[1]), data)
        (frames,) = accepted.read()
        msg = wire.decode_pipe(frames)
        assert (msg["kind"], msg["mb"]) == ("act", 3) and np.array_equal(msg["data"], data)
        assert worker.counted == {"bytes_to_peers": data.nbytes}
    finally:
        dialled.sock = sends.real
        dialled.close()
        accepted.close()


def test_a_message_of_more_frames_than_one_sendmsg_takes_goes_whole_and_in_order():
    import socket

    from workers import links

    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    dialled, accepted = links.Link(a, b"w>next>0"), links.Link(b, accepted=True)
    frames = [b"head", *(bytes([i % 251]) * (1 + i % 7) for i in range(3 * links._IOV_AT_ONCE))]
    sends = dialled.sock = _Sends(dialled.sock)
    try:
        dialled.send_multipart(frames)
        assert len(sends.calls) == 4  # (the prefix and table, then 3 x _IOV_AT_ONCE frames)
        got = []
        while not got:
            got = accepted.read()
        assert [bytes(f) for f in got[0]] == frames
    finally:
        dialled.sock = sends.real
        dialled.close()
        accepted.close()
