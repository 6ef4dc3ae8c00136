"""Per-peer bounds (issue 32): warnings about what one peer sends are rate-limited, and what
one client's capture buffers hold on a worker is capped and its own."""
import logging

import pytest

import disthook
from disthook.service.loop import PeerLog
from disthook.service.worker_hooks import Captures


class Clock:
    now = 0.0

    def __call__(self):
        return self.now


def test_five_thousand_bad_messages_from_one_peer_write_a_handful_of_lines(caplog):
    clock = Clock()
    log = PeerLog(logging.getLogger("test.peerlog"), burst=10, window_s=60.0, clock=clock)
    with caplog.at_level(logging.WARNING, logger="test.peerlog"):
        for i in range(5000):
            log.warning(b"mallory", "malformed message %d", i)
        log.warning(b"alice", "malformed message from alice")  # another peer has its share
        assert len(caplog.records) == 11
        assert "left out for 60s" in caplog.records[9].getMessage()
        clock.now = 61.0  # a new window says how many were left out
        log.warning(b"mallory", "again")
    assert "(4990 more such warnings about peer b'mallory' left out)" in caplog.text


def test_capture_buffers_are_per_client_and_capped():
    captures = Captures(max_bytes=100)
    captures.add(b"a", "acts", "0", "forward", disthook.zeros(10))  # 40 bytes
    captures.add(b"b", "acts", "0", "forward", disthook.zeros(20))
    assert captures.take(b"b", "acts", clear=False)[0][4].shape == (20,)
    assert len(captures.take(b"a", "acts")) == 1 and captures.take(b"a", "acts") == []
    captures.add(b"a", "acts", "0", "forward", disthook.zeros(25))  # 100 bytes: at the cap
    with pytest.raises(RuntimeError, match=r"capture 'acts' on '0': this client's capture "
                                           r"buffers on this worker hold 100 bytes.*\(--max-capture-mb\).*captured\(name\)"):
        captures.add(b"a", "acts", "0", "forward", disthook.zeros(1))
    captures.take(b"a", "acts")  # emptied: room again
    captures.add(b"a", "acts", "0", "forward", disthook.zeros(1))
    captures.forget(b"b")
    assert captures.take(b"b", "acts") == [] and b"b" not in captures.held
