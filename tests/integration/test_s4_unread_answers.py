"""A client that sends the coordinator requests and reads none of the answers makes it hold
what ZeroMQ queues for that connection: 1000 answers by default (its send high-water mark
counts messages, not bytes), then 256 more kept (loop.UNROUTABLE_KEPT). 1500 unread
lookups of a published record of 1 MB held 1199 MiB of the coordinator; with 64 queued, 305
MiB."""
import time

import pytest
import zmq

from disthook import nn, wire
from disthook.service.rpc import Peer

pytestmark = pytest.mark.timeout(180)


def rss_mib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return int(status.read().split("VmRSS:")[1].split()[0]) // 1024


def test_answers_a_client_does_not_read_are_few(cluster):
    remote = cluster.deploy(nn.Sequential(nn.Linear(3, 2)), stages=1, name="s4-unread")
    pid = cluster.status()["coordinator"]["pid"]
    with Peer(cluster.address) as peer:
        record = dict(peer.request("lookup", {"name": "s4-unread"}, timeout=30)["result"])
        record.update(name="s4-big", structure={"x": ["a" * 1000] * 1000})  # 1 MB
        peer.request("publish", {"record": record}, timeout=60)
        before = rss_mib(pid)
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVHWM, 1)  # reads nothing, and takes little off the wire
        sock.setsockopt(zmq.RCVBUF, 4096)
        sock.connect(cluster.address)
        try:
            lookup = wire.encode("lookup", {"name": "s4-big"}, req=5)
            for _ in range(1500):
                sock.send_multipart(lookup)
            time.sleep(15)
            grew = rss_mib(pid) - before
        finally:
            sock.close()
    assert grew < 600, f"the coordinator holds {grew} MiB of unread answers"
    remote.close()
