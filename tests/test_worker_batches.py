"""``workers.batches.Batches`` without sockets: a batch's messages are taken one by one (one
that is off refused alone), and what a run of one client's jobs answers it goes as one
message, to a client that sent a batch itself."""
import logging

from disthook import wire
from workers import batches
from workers.batches import Batches


class _Service:
    def reply(self, sock, to, req, msg_type, fields, ctx=None):
        self._send(sock, to, wire.encode(msg_type, fields, req=req, ctx=ctx))


class _Worker(Batches, _Service):
    name = label = "worker w"
    router = object()
    _running = True

    def __init__(self):
        self._held_init()
        self.out = []  # (peer, [(type, req), ...]) per message sent
        self.peer_log = logging.getLogger("test")
        self.peer_log.warning = lambda peer, *a: None
        self.who = repr

    def _send(self, sock, to, frames):
        self.out.append((to, [(m.type, m.req) for m in wire.decode_all(frames)]))


class _Job:
    def __init__(self, sender, req, worker, then=None):
        self.sender, self.req, self.worker, self.then = sender, req, worker, then

    def __call__(self):
        if self.then is not None:
            self.then()
        self.worker.reply(self.worker.router, self.sender, self.req, "ok", {"result": None})


def _run(worker, jobs):
    worker.run_jobs(list(jobs), lambda job: job())


def _batch(*reqs):
    return [wire.encode("status", {}, req=r) for r in reqs]


def test_a_batch_is_taken_message_by_message_and_one_that_is_off_alone():
    w = _Worker()
    body = wire.encode_batch([*_batch(1), [b"\x93junk"], *_batch(2)])
    got = w.messages_in(b"a", body)
    assert [m.req for m in got] == [1, 2]
    assert w.out == [(b"a", [("error", 0)])]  # the one that is off, refused alone
    assert b"a" in w.takes_batches
    assert [m.req for m in w.messages_in(b"b", _batch(3)[0])] == [3]
    assert b"b" not in w.takes_batches  # one message: not known to take batches


def test_the_answers_of_a_run_of_one_clients_jobs_go_as_one_message():
    w = _Worker()
    w.messages_in(b"a", wire.encode_batch(_batch(1, 2)))  # a takes batches; b does not
    _run(w, [_Job(b"a", 1, w), _Job(b"a", 2, w), _Job(b"b", 3, w), _Job(b"b", 4, w),
             _Job(b"a", 5, w)])
    assert w.out == [(b"a", [("ok", 1), ("ok", 2)]), (b"b", [("ok", 3)]),
                     (b"b", [("ok", 4)]), (b"a", [("ok", 5)])]


def test_a_hook_event_goes_at_once_after_what_was_queued():
    w = _Worker()
    w.messages_in(b"a", wire.encode_batch(_batch(1, 2)))

    def event():
        w.reply(w.router, b"a", 7, "hook_event", {"hook": 1, "kind": "forward", "path": "0",
                                                  "args": []})

    _run(w, [_Job(b"a", 1, w), _Job(b"a", 2, w, then=event)])
    assert w.out == [(b"a", [("ok", 1)]), (b"a", [("hook_event", 7)]), (b"a", [("ok", 2)])]


def test_an_answer_waits_for_its_run_a_little_while_at_most(monkeypatch):
    w = _Worker()
    w.messages_in(b"a", wire.encode_batch(_batch(1, 2)))
    clock = [0.0]
    monkeypatch.setattr(batches.time, "monotonic", lambda: clock[0])

    def later():
        clock[0] += batches.HELD_AT_MOST_S * 0.8

    _run(w, [_Job(b"a", i, w, then=later) for i in range(1, 5)])
    # the first answer waited past HELD_AT_MOST_S during job 3: it went after job 3
    assert w.out == [(b"a", [("ok", 1), ("ok", 2), ("ok", 3)]), (b"a", [("ok", 4)])]
