"""The client's side of results sent ahead of hook answers (``ok`` with ``ahead``): a fake
worker on a real socket plays the worker's part, message by message.

The result of a pass that ran ahead of its client hooks' answers leaves the worker behind
the events of its round; the client has answered them all when it reads the result, and
uses it unless one of them changed something or failed (then the worker's answer of the
pass run again follows). An error the worker hits after such a result was used is raised
by the call during which it arrives."""
import threading

import numpy as np
import pytest
import zmq

import disthook as torch
from disthook import wire
from disthook.distributed.channel import _Hub
from disthook.service.values import pack

pytestmark = pytest.mark.timeout(60)


class FakeWorker:
    """A ROUTER that answers each request with ``script(req, send, recv)``, in a thread."""

    def __init__(self):
        self.ctx = zmq.Context.instance()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        port = self.sock.bind_to_random_port("tcp://127.0.0.1")
        self.address = f"tcp://127.0.0.1:{port}"
        self.seen: list[wire.Message] = []  # what the client sent, in order
        self.queued: list[tuple] = []  # messages of a batch not taken yet
        self.failure: BaseException | None = None

    def recv(self) -> tuple[bytes, wire.Message]:
        """The next message the client sent (the answers to a burst of events come as one
        batch: they are taken one by one)."""
        if not self.queued:
            if not self.sock.poll(10_000):
                raise TimeoutError("the client sent nothing")
            frames = self.sock.recv_multipart(copy=False)
            self.queued = [(frames[0].bytes, msg) for msg in wire.decode_all(frames[1:])]
        client, msg = self.queued.pop(0)
        self.seen.append(msg)
        return client, msg

    def serve(self, *scripts):
        """Answer one request per script, each ``script(client, msg)``."""
        def run():
            try:
                for script in scripts:
                    script(*self.recv())
            except BaseException as exc:  # noqa: BLE001 - the test reports it
                self.failure = exc

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread

    def send(self, client: bytes, msg_type: str, fields: dict, req: int) -> None:
        self.sock.send_multipart([client, *wire.encode(msg_type, fields, req=req)],
                                 copy=False)

    def event(self, client: bytes, req: int, spec: str) -> None:
        """A tensor hook event of round ``spec`` (hook 1, a gradient of ones)."""
        self.send(client, "hook_event", {"hook": 1, "kind": "tensor", "path": "w",
                                         "args": [pack(torch.ones(2))], "spec": spec}, req)


@pytest.fixture
def hub_and_worker():
    worker = FakeWorker()
    hub = _Hub("m", [worker.address], timeout=10.0)
    try:
        yield hub, worker
    finally:
        hub.socks[worker.address].close(linger=0)
        for monitor in hub.monitors:
            monitor.close(linger=0)
        worker.sock.close(linger=0)


def hook(answers: list):
    """A tensor hook that returns the next of ``answers`` each time it runs."""
    seen = []

    def fn(grad):
        seen.append(grad.numpy().copy())
        return answers[len(seen) - 1]

    return fn, seen


def test_a_result_ahead_of_answers_that_changed_nothing_is_used(hub_and_worker):
    hub, worker = hub_and_worker
    fn, seen = hook([None])
    hub.hooks[1] = (fn, "tensor", None, {})

    def script(client, msg):
        worker.event(client, 900, "r1")
        worker.send(client, "ok", {"result": "ahead", "ahead": "r1"}, msg.req)
        _, answer = worker.recv()  # the hook's answer, after the result went
        assert answer.type == "hook_reply" and answer.req == 900 and answer.get("result") is None

    thread = worker.serve(script)
    assert hub.request(worker.address, "list_hooks", {})["result"] == "ahead"
    thread.join(10)
    assert worker.failure is None
    assert len(seen) == 1


def test_a_result_ahead_of_an_answer_that_changed_something_waits_for_the_run_again(
        hub_and_worker):
    hub, worker = hub_and_worker
    fn, seen = hook([torch.zeros(2), None])  # the first answer changes the gradient
    hub.hooks[1] = (fn, "tensor", None, {})

    def script(client, msg):
        worker.event(client, 901, "r1")
        worker.event(client, 902, "r1")  # after the change: stale, its hook does not run
        worker.send(client, "ok", {"result": "void", "ahead": "r1"}, msg.req)
        _, first = worker.recv()
        _, second = worker.recv()
        assert first.get("result") is not None and second.get("stale") is True
        worker.send(client, "ok", {"result": "again"}, msg.req)  # the pass run again

    thread = worker.serve(script)
    assert hub.request(worker.address, "list_hooks", {})["result"] == "again"
    thread.join(10)
    assert worker.failure is None
    assert len(seen) == 1


def test_a_result_ahead_of_a_failing_hook_is_not_used_and_the_hook_error_is_raised(
        hub_and_worker):
    hub, worker = hub_and_worker

    def fails(grad):
        raise KeyError("looked at the wrong thing")

    hub.hooks[1] = (fails, "tensor", None, {})

    def script(client, msg):
        worker.event(client, 903, "r1")
        worker.send(client, "ok", {"result": "void", "ahead": "r1"}, msg.req)
        _, answer = worker.recv()
        assert answer.type == "error"
        # (as a worker words a client hook's error: workers/client_hooks.py _answer_of)
        worker.send(client, "error", {
            "kind": "RuntimeError", "message": "the client's tensor hook on 'x' raised "
            f"KeyError: {answer['message']}"}, msg.req)

    thread = worker.serve(script)
    with pytest.raises(KeyError, match="looked at the wrong thing"):
        hub.request(worker.address, "list_hooks", {})
    thread.join(10)
    assert worker.failure is None


def test_an_error_after_a_result_ahead_was_used_is_raised_by_a_later_call(hub_and_worker):
    hub, worker = hub_and_worker
    fn, _ = hook([None])
    hub.hooks[1] = (fn, "tensor", None, {})

    def first(client, msg):
        worker.event(client, 904, "r1")
        worker.send(client, "ok", {"result": "ahead", "ahead": "r1"}, msg.req)
        worker.recv()  # the answer; taking it fails on the worker
        worker.first_req = msg.req

    def second(client, msg):
        worker.send(client, "error", {"kind": "ValueError", "message": "bad watch index"},
                    worker.first_req)
        worker.send(client, "ok", {"result": "second"}, msg.req)

    thread = worker.serve(first, second)
    assert hub.request(worker.address, "list_hooks", {})["result"] == "ahead"
    with pytest.raises(RuntimeError, match="an earlier call on this model returned, then "
                                           "failed.*ValueError: bad watch index"):
        hub.request(worker.address, "list_hooks", {})
    thread.join(10)
    assert worker.failure is None
    assert hub.late_error is None  # said once


def test_an_error_for_a_request_not_answered_ahead_is_dropped_as_before(hub_and_worker):
    # a late error of a request whose answer did not go ahead (one that timed out) is no
    # business of later calls
    hub, worker = hub_and_worker

    def script(client, msg):
        worker.send(client, "error", {"kind": "ValueError", "message": "old"}, 123456)
        worker.send(client, "ok", {"result": np.arange(3)}, msg.req)

    thread = worker.serve(script)
    np.testing.assert_array_equal(hub.request(worker.address, "list_hooks", {})["result"],
                                  np.arange(3))
    thread.join(10)
    assert worker.failure is None and hub.late_error is None
