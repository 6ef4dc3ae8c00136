"""ZeroMQ's pings on every process's connections (``ping_options``): one every
``PING_EVERY_BEATS`` beats, each wakes the ZeroMQ threads at both ends. A hung peer is
still dropped within 4 beats of its last word, as with a ping every beat and 3 beats to
answer it, and not before 2 (a ping's answer has 2 beats to come). No process is started."""
import zmq

from coordinator.server import Coordinator
from disthook import wire
from disthook.distributed.channel import _Hub
from disthook.service.loop import ping_options
from workers.server import Worker

BEFORE_BOUND_BEATS = 1 + wire.LOST_AFTER_BEATS  # a ping every beat, 3 beats to answer it


def _bounds(options, beat_ms):
    """(soonest, latest) a peer silent since a moment is dropped, in beats, by the pings of
    a socket with ``options``: the next ping comes within an interval, and the connection
    goes a timeout after it."""
    ivl, timeout = options[zmq.HEARTBEAT_IVL], options[zmq.HEARTBEAT_TIMEOUT]
    return timeout / beat_ms, (ivl + timeout) / beat_ms


def test_a_ping_every_two_beats_drops_a_hung_peer_within_the_bound_of_before():
    for beat_s in (0.5, 0.3, 0.1):
        beat_ms = beat_s * 1000
        options = ping_options(beat_s, ttl=True)
        assert options[zmq.HEARTBEAT_IVL] == round(wire.PING_EVERY_BEATS * beat_ms)
        soonest, latest = _bounds(options, beat_ms)
        assert latest <= BEFORE_BOUND_BEATS + 1e-9 and soonest >= 2 - 1e-9
        # the peer drops us too when nothing comes: between two pings, never
        assert options[zmq.HEARTBEAT_IVL] < options[zmq.HEARTBEAT_TTL] \
            <= BEFORE_BOUND_BEATS * beat_ms + 1e-6
    assert zmq.HEARTBEAT_TTL not in ping_options(0.5)


def _set(sock):
    return {option: sock.getsockopt(option)
            for option in (zmq.HEARTBEAT_IVL, zmq.HEARTBEAT_TIMEOUT)}


def test_every_role_pings_so():
    worker = Worker("tcp://127.0.0.1:9", worker_id="pings")
    coordinator = Coordinator("tcp://127.0.0.1:0", heartbeat=0.25)
    channel = _Hub("m", ["tcp://127.0.0.1:9"], 5.0, heartbeat=0.3)
    try:
        want = ping_options(wire.HEARTBEAT_S)
        assert _set(worker.router) == want
        assert _set(coordinator.router) == ping_options(0.25)
        (sock,) = channel.socks.values()
        assert _set(sock) == {k: v for k, v in ping_options(0.3, ttl=True).items()
                              if k != zmq.HEARTBEAT_TTL}
        assert sock.getsockopt(zmq.HEARTBEAT_TTL) == ping_options(0.3, ttl=True)[
            zmq.HEARTBEAT_TTL]
    finally:
        channel.close(unload=False)
        coordinator.close()
        worker.close()
