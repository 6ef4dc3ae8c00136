"""A frame larger than any its receiver takes is refused on the wire (ZMQ_MAXMSGSIZE), before
its bytes are held: the coordinator takes no arrays (a frame past its header cap, 1 MiB, closes
the sender's connection), a worker no array past the wire's 2 GiB. Before, each received the
whole frame into memory and only then refused it: an authorized client sent the coordinator
a 96 MiB frame and its peak memory grew by 96 MiB (a frame of 100 GB, and the process every
client needs is killed for memory); a worker's grew by about 0.75 to 2 GiB for a frame of
2 GiB and 1 MiB."""
import os
import sys
import time

import numpy as np
import pytest

import disthook as torch
from disthook import nn, wire
from disthook.distributed import local_cluster
from disthook.service.rpc import Peer
from disthook.service.security import Keys, add_client

pytestmark = pytest.mark.timeout(240)


def peak_mib(pid: int) -> float:
    """The process's peak resident memory (VmHWM), MiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def growth_after_a_frame(address, keys, pid: int, nbytes: int) -> float:
    """How far process ``pid``'s peak memory grew (MiB) once a peer sent it a status request
    with a frame of ``nbytes`` bytes behind it: watched for 10 s after a plain status request
    sent next was answered (on one connection in order; after a reconnection where the
    receiver closed it). The frame is calloc's zero pages: nothing is touched here without
    keys."""
    before = peak_mib(pid)
    big = np.zeros(nbytes, np.uint8)
    with Peer(address, keys=keys, identity=b"mallory-" + os.urandom(8)) as peer:
        peer.request("status", timeout=60)  # connected
        peer._sock.send_multipart([*wire.encode("status", {}), memoryview(big)], copy=False)
        peer.request("status", timeout=120)
    deadline = time.monotonic() + 10
    while peak_mib(pid) - before < nbytes / 2**21 and time.monotonic() < deadline:
        time.sleep(0.2)
    return peak_mib(pid) - before


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_frame_past_the_coordinators_caps_is_not_held():
    with local_cluster(workers=1, secure=True, log_level="ERROR") as cluster:
        add_client(cluster.keys.directory, "mallory")
        keys = Keys.load(cluster.keys.directory, "mallory")
        (coordinator,) = [p for p in cluster._processes if p.args[2:3] == ["coordinator"]]
        assert growth_after_a_frame(cluster.address, keys, coordinator.pid, 96 << 20) < 32
        # (96 MiB more before)
        assert len(cluster.workers()) == 1  # it serves on


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_frame_past_a_workers_caps_is_not_held():
    cap = wire.DEFAULT_LIMITS.max_array_bytes
    with local_cluster(workers=1, log_level="ERROR") as cluster:
        torch.manual_seed(0)
        remote = cluster.deploy(nn.Sequential(nn.Linear(3, 2)), stages=1, name="m")
        x = torch.randn(4, 3)
        expected = remote(x).detach().numpy()
        (w,) = cluster.workers()
        assert growth_after_a_frame(w.address, None, w.pid, cap + (1 << 20)) < 512
        # (2 GiB more before)
        np.testing.assert_array_equal(remote(x).detach().numpy(), expected)
