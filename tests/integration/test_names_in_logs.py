"""What a newcomer reads in a local cluster's logs and status (issue 34): workers named by
the launch's numbering (w1, w2, and a replacement the next number), and a peer named as a
client by number, never by the bytes of its connection's identity."""
import os
import signal
import time

import pytest
import zmq

from disthook.distributed import local_cluster

pytestmark = pytest.mark.timeout(120)

BINARY = b"\x00k\x8bE\x12"  # the kind of identity ZeroMQ gives a socket that sets none


def test_workers_are_numbered_and_a_stranger_is_a_numbered_client_in_the_logs(tmp_path):
    log_path = tmp_path / "cluster.log"
    with open(log_path, "w") as log, local_cluster(2, log_level="INFO", stderr=log) as cluster:
        workers = cluster.workers()
        assert sorted(w.id for w in workers) == ["w1", "w2"]
        assert sorted(w["id"] for w in cluster.full_status()["workers"]) == ["w1", "w2"]
        ctx = zmq.Context()
        try:
            sock = ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.IDENTITY, BINARY)
            sock.connect(workers[0].address)
            sock.send_multipart([b"not a disthook message"])
            assert sock.poll(10_000), "the worker did not answer the malformed message"
            sock.close()
        finally:
            ctx.term()
        deadline = time.monotonic() + 10
        while "refused a message" not in log_path.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
    text = log_path.read_text()
    refused = [line for line in text.splitlines() if "refused a message" in line]
    said = f"worker {workers[0].id}: refused a message from client 1:"
    assert refused and said in refused[0], text
    assert "worker w1: registered at" in text and "worker w2: registered at" in text, text
    assert "worker w1 stopping:" in text and "worker w2 stopping:" in text, text
    for raw in (BINARY.hex(), repr(BINARY), "\\x00k"):
        assert raw not in text


def test_a_replacement_worker_takes_the_next_number():
    with local_cluster(2, restart=True) as cluster:
        victim = next(w for w in cluster.workers() if w.id == "w1")
        os.kill(victim.pid, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            alive = sorted(w.id for w in cluster.workers() if w.alive)
            if "w3" in alive:
                break
            time.sleep(0.2)
        assert "w3" in alive and "w2" in alive, alive
