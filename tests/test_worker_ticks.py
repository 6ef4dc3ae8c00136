"""A worker's loop wakes by itself once a heartbeat, no more often: each tick wakes an idle
worker (a cold round of its loop), and what a tick does (the beat, the waits' and contexts'
deadlines, the parent's check) is due at that pace. No coordinator is started."""
import time

import zmq

from disthook import wire
from workers import server
from workers.server import Worker


def _worker():
    return Worker("tcp://127.0.0.1:9", worker_id="ticks")  # (no coordinator there)


def _registered(worker, heartbeat, monkeypatch):
    """The worker reads the coordinator's answer to its registration."""
    frames = [zmq.Frame(f) for f in wire.encode("ok", {"result": {"heartbeat": heartbeat}})]
    monkeypatch.setattr(server, "recv_now", lambda sock: frames)
    worker._on_control()


def test_a_worker_ticks_once_a_heartbeat():
    w = _worker()
    try:
        assert w.tick_interval == w.heartbeat == wire.HEARTBEAT_S
        w._next_tick = w.next_beat = 0.0  # both due: the round ticks and beats
        before = time.monotonic()
        w._serve_round(start_jobs=False)
        assert w._next_tick - before >= wire.HEARTBEAT_S
        assert w.next_beat <= w._next_tick  # the next tick finds the next beat due
    finally:
        w.close()


def test_a_coordinators_faster_beat_makes_the_ticks_faster_never_slower(monkeypatch):
    w = _worker()
    try:
        _registered(w, wire.HEARTBEAT_S / 4, monkeypatch)
        assert w.registered and w.tick_interval == w.heartbeat == wire.HEARTBEAT_S / 4
        w.registered = False
        _registered(w, wire.HEARTBEAT_S * 4, monkeypatch)  # deadlines are still checked at this pace
        assert w.heartbeat == wire.HEARTBEAT_S * 4 and w.tick_interval == wire.HEARTBEAT_S
    finally:
        w.close()
