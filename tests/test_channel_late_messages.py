"""What the client takes off its sockets after a call's answers came (a worker's late
warnings, hook events): a hook served from one socket may make a call of its own that
takes what another socket had, and the client must not then wait on that socket for a
message that is no longer there (a train_step whose post-accumulate hooks read ``p.grad``
hung so, once in a few hundred steps under load). Three fake workers on real sockets play
the order of arrival that did it."""
import threading
import warnings

import pytest

import disthook as torch
from disthook.distributed.channel import _Hub
from disthook.service.values import pack
from test_answers_ahead import FakeWorker

pytestmark = pytest.mark.timeout(60)


def test_a_hook_served_late_that_takes_another_sockets_message_does_not_hang():
    a, b, c = FakeWorker(), FakeWorker(), FakeWorker()
    hub = _Hub("m", [a.address, b.address, c.address], timeout=10.0)
    go = threading.Event()
    asked = []

    def hook(grad):
        asked.append(hub.request(c.address, "status", {})["result"])

    hub.hooks[1] = (hook, "tensor", None, {})

    def answer(client, msg):  # b: the call's own answer
        b.send(client, "ok", {"result": "step done"}, msg.req)

    def late_event():  # a: a hook event that comes after the answer
        go.wait(10)
        a.send(hub.identity, "hook_event", {"hook": 1, "kind": "tensor", "path": "w",
                                            "args": [pack(torch.ones(2))]}, 901)

    def late_warning_then_status(client, msg):  # c: a warning, then the hook's call
        c.send(client, "ok", {"result": "c is up"}, msg.req)
        go.wait(10)
        c.send(client, "warning", {"category": "UserWarning", "message": "late"}, 0)
        client, msg = c.recv()
        assert msg.type == "status"
        c.send(client, "ok", {"result": "status of c"}, msg.req)

    keep = hub._keep_reply

    def keep_then_let_the_others_send(reply, replies):
        keep(reply, replies)
        if reply.get("result") == "step done":  # both there before the client looks again
            go.set()
            assert hub.socks[a.address].poll(5000) and hub.socks[c.address].poll(5000)

    try:
        threads = [c.serve(late_warning_then_status)]
        assert hub.request(c.address, "status", {})["result"] == "c is up"
        threads += [b.serve(answer), threading.Thread(target=late_event, daemon=True)]
        threads[-1].start()
        hub._keep_reply = keep_then_let_the_others_send
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert hub.request(b.address, "list_hooks", {})["result"] == "step done"
        for thread in threads:
            thread.join(10)
        assert a.failure is None and b.failure is None and c.failure is None
        assert asked == ["status of c"]
        assert [str(w.message) for w in caught] == ["late"]
    finally:
        for sock in [*hub.socks.values(), *hub.monitors]:
            sock.close(linger=0)
        for worker in (a, b, c):
            worker.sock.close(linger=0)
