"""A worker's beat is answered only when it asks (a worker that stops after
``--orphan-after`` seconds without word from the coordinator asks at every beat), and a beat
the coordinator refuses is always answered: each answer wakes the worker's loop and ZeroMQ
thread, on a machine where the workers share the cores. No process is started."""
import zmq

from coordinator.server import Coordinator
from disthook import wire
from disthook.service.loop import NO_REPLY
from workers.server import Worker


def _msg(msg_type, fields):
    return wire.decode(wire.encode(msg_type, fields))


def test_the_coordinator_answers_a_beat_only_when_asked_and_always_refuses_aloud():
    c = Coordinator("tcp://127.0.0.1:0")
    try:
        c.on_register(_msg("register", {"worker": "w1", "address": "tcp://127.0.0.1:9",
                                        "pid": 1}), b"conn-1")
        beat = {"worker": "w1", "memory": 5, "stages": ["stage 0 of m"]}
        before = c.workers["w1"].last_seen
        assert c.on_heartbeat(_msg("heartbeat", beat), b"conn-1") is NO_REPLY
        seen = c.workers["w1"]
        assert seen.last_seen >= before and seen.memory == 5 and seen.stages == ["stage 0 of m"]
        assert c.on_heartbeat(_msg("heartbeat", {**beat, "answer": True}), b"conn-1") is None
        try:  # refused: raised, so the worker is told (and registers again)
            c.on_heartbeat(_msg("heartbeat", {"worker": "w2"}), b"conn-1")
        except LookupError as exc:
            assert "not registered" in str(exc)
        else:
            raise AssertionError("a beat of an unknown worker was not refused")
    finally:
        c.close()


def _sent_beat(monkeypatch, orphan_after):
    w = Worker("tcp://127.0.0.1:9", worker_id="beats", orphan_after=orphan_after)
    sent = []
    monkeypatch.setattr(w, "_to_coordinator", lambda kind, fields: sent.append((kind, fields)))
    try:
        w.registered = True
        w._beat()
    finally:
        w.close()
    ((kind, fields),) = sent
    assert kind == "heartbeat"
    wire.encode(kind, fields)  # within the schema
    return fields


def test_a_worker_asks_for_an_answer_only_when_it_awaits_one(monkeypatch):
    assert "answer" not in _sent_beat(monkeypatch, None)
    assert _sent_beat(monkeypatch, 30.0)["answer"] is True


def test_a_worker_hears_the_coordinator_in_an_answer(monkeypatch):
    from workers import server

    w = Worker("tcp://127.0.0.1:9", worker_id="heard", orphan_after=30.0)
    try:
        w.registered, w.last_heard = True, 0.0
        frames = [zmq.Frame(f) for f in wire.encode("ok", {"result": None})]
        monkeypatch.setattr(server, "recv_now", lambda sock: frames)
        w._on_control()
        assert w.last_heard > 0.0 and w.registered
    finally:
        w.close()


def test_a_worker_encodes_its_beat_once_per_placement_and_each_beat_says_its_memory(
        monkeypatch):
    from workers import server

    w = Worker("tcp://127.0.0.1:9", worker_id="wé", orphan_after=30.0)
    sent, encoded, memory = [], [], [7]
    real_encode = wire.encode
    monkeypatch.setattr(wire, "encode", lambda *a, **k: encoded.append(a[0]) or real_encode(*a, **k))
    monkeypatch.setattr(server, "rss_bytes", lambda: memory[0])
    monkeypatch.setattr(w.control, "send_multipart", lambda frames, *a, **k: sent.append(frames))
    try:
        w.registered = True
        for memory[0] in (7, 0, 2 ** 40 + 3, 2 ** 64 - 1, 123456789):
            w._beat()
        assert encoded == ["heartbeat"]  # built once: later beats only write their memory
        w.stages["m"] = type("Held", (), {"name": "stage 1 of m"})()  # a placement changes
        memory[0] = 99
        w._beat()
        memory[0] = None  # no /proc: the whole message, without memory
        w._beat()
        memory[0] = 2 ** 64  # too wide for the slot: the whole message (refused by its schema)
        try:
            w._beat()
        except wire.WireError:
            pass
    finally:
        w.stages.clear()
        w.close()
    got = [wire.decode([bytes(f) for f in frames]) for frames in sent]
    assert [m.get("memory") for m in got] == [7, 0, 2 ** 40 + 3, 2 ** 64 - 1, 123456789, 99, None]
    assert all(m.type == "heartbeat" and m["worker"] == "wé" and m["answer"] is True for m in got)
    assert [m["stages"] for m in got] == [[]] * 5 + [["stage 1 of m"]] * 2
    assert encoded == ["heartbeat"] * 4  # again for the new placement, and each whole one
