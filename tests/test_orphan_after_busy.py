"""A worker started with ``--orphan-after S`` stops once the coordinator has not answered a
beat for S seconds, not because a job of its own ran longer than S: a job runs inline in the
worker's loop, so no beat goes while it runs, and an answer that came meanwhile waits unread
in the socket. Before, the tick after a job longer than S stopped the worker with its
coordinator up (a forward of a few seconds, or any call on a loaded machine). A fake
coordinator on a real socket; no process is started."""
import zmq

from disthook import wire
from workers.server import Worker

ORPHAN_AFTER = 1.0
JOB_S = 5.0  # how long the pretended job ran: several times ORPHAN_AFTER


def _coordinator():
    ctx = zmq.Context.instance()
    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    return router, f"tcp://127.0.0.1:{port}"


def _next(router) -> tuple[bytes, wire.Message]:
    assert router.poll(30_000), "the worker sent nothing to its coordinator"
    sender, *frames = router.recv_multipart()
    return sender, wire.decode(frames)


def _answer(router, sender, fields=None) -> None:
    router.send_multipart([sender, *wire.encode("ok", {"result": fields})])


def _registered_worker(router, address) -> tuple[Worker, bytes]:
    w = Worker(address, worker_id="busy", orphan_after=ORPHAN_AFTER)
    sender, msg = _next(router)
    assert msg.type == "register"
    _answer(router, sender, {"heartbeat": wire.HEARTBEAT_S})
    assert w.control.poll(30_000)
    w._on_control()
    assert w.registered
    return w, sender



def _pretend_a_job_ran(w, seconds: float) -> None:
    """Every time the worker noted lies ``seconds`` further back: as after a job of that
    long, inline in its loop (nothing read, nothing sent meanwhile)."""
    w.last_heard -= seconds
    w.next_beat -= seconds  # (due by now)
    if getattr(w, "asked_at", None) is not None:
        w.asked_at -= seconds


def _run_tick(w, monkeypatch) -> list:
    stops = []
    monkeypatch.setattr(w, "stop", lambda reason="": stops.append(reason))
    w.tick()
    return stops


def test_a_job_longer_than_orphan_after_does_not_stop_the_worker(monkeypatch):
    router, address = _coordinator()
    w, _ = _registered_worker(router, address)
    try:
        _pretend_a_job_ran(w, JOB_S)  # its last beat's answer came before the job
        assert _run_tick(w, monkeypatch) == []
        _, beat = _next(router)  # it asks now, and waits ORPHAN_AFTER for the answer
        assert beat.type == "heartbeat" and beat["answer"] is True
    finally:
        w.close()
        router.close()


def test_an_answer_that_came_during_a_long_job_is_heard(monkeypatch):
    router, address = _coordinator()
    w, sender = _registered_worker(router, address)
    try:
        w._beat()  # a beat, then a job: its answer comes while the job runs
        _next(router)
        _answer(router, sender)
        assert w.control.poll(30_000)  # there, unread
        _pretend_a_job_ran(w, JOB_S)
        assert _run_tick(w, monkeypatch) == []
    finally:
        w.close()
        router.close()


def test_a_coordinator_silent_past_orphan_after_still_stops_the_worker(monkeypatch):
    router, address = _coordinator()
    w, _ = _registered_worker(router, address)
    try:
        w._beat()
        _next(router)  # taken, never answered
        _pretend_a_job_ran(w, JOB_S)
        stops = _run_tick(w, monkeypatch)
        assert stops and f"for {ORPHAN_AFTER:g} s" in stops[0], stops
        # (and a silence that is not yet ORPHAN_AFTER long does not)
        w2, _ = _registered_worker(router, address)
        try:
            w2._beat()
            _next(router)
            assert _run_tick(w2, monkeypatch) == []
        finally:
            w2.close()
    finally:
        w.close()
        router.close()

