"""Identities an authorized client could take before their owners, on a cluster with keys.

A ROUTER refuses a connection whose identity another connection holds, and any authorized
client may dial with the identity it likes. A worker dialled its neighbour stages as
``<its id>>next>0``, ``>1``, ... and the coordinator as its id: a client that dialled the
next stage's worker under those names first left the stages unable to pass each other
anything (every call of every client timed out), and one that dialled the coordinator under
a dead worker's id kept it listed alive with its heartbeats. Now the identities a worker
dials with are unguessable and only a worker's key may beat."""
import os
import signal
import time

import numpy as np
import pytest

import disthook as torch
from disthook import nn
from disthook.distributed import RemoteError, local_cluster
from disthook.service.rpc import Peer
from disthook.service.security import Keys, add_client

pytestmark = pytest.mark.timeout(180)


def mallory_of(cluster) -> Keys:
    add_client(cluster.keys.directory, "mallory")
    return Keys.load(cluster.keys.directory, "mallory")


def test_a_client_that_takes_the_identities_workers_dial_with_stops_no_stage(monkeypatch):
    monkeypatch.setenv("DISTHOOK_LOCAL_LINKS", "0")  # as between hosts: ZeroMQ only
    with local_cluster(workers=2, secure=True, timeout=20) as cluster:
        mallory = mallory_of(cluster)
        workers = cluster.workers()
        squatters = []
        try:
            for target in workers:  # every name a worker would dial the other with next
                for dialler in workers:
                    for side in ("next", "prev", "peer"):
                        for n in range(6):
                            peer = Peer(target.address, keys=mallory,
                                        identity=f"{dialler.id}>{side}>{n}".encode())
                            squatters.append(peer)
                            peer.request("status", timeout=20)  # its connection is up
            torch.manual_seed(0)
            model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
            x = torch.randn(5, 3)
            expected = model(x).detach().numpy()
            remote = cluster.deploy(model, stages=2)
            np.testing.assert_allclose(remote(x).detach().numpy(), expected, rtol=1e-6)
        finally:
            for peer in squatters:
                peer.close()


def test_a_client_cannot_beat_for_a_dead_worker():
    with local_cluster(workers=1, secure=True) as cluster:
        mallory = mallory_of(cluster)
        (worker,) = cluster.workers()
        os.kill(worker.pid, signal.SIGKILL)
        lost_after = 10 * cluster.status()["coordinator"]["heartbeat"]
        refused = pytest.raises(RemoteError, match="PermissionError: heartbeat is for workers "
                                                   "of the cluster")
        deadline = time.monotonic() + lost_after + 2
        for identity in (worker.id.encode(), b"mallory"):
            with Peer(cluster.address, keys=mallory, identity=identity) as peer:
                while time.monotonic() < deadline:
                    with refused:
                        peer.request("heartbeat", {"worker": worker.id, "answer": True,
                                                   "stages": ["stage 0 of forged"]}, timeout=10)
                    time.sleep(0.25)
            deadline = 0  # the second identity: once
        (listed,) = cluster.status()["workers"]
        assert not listed["alive"] and listed["stages"] == []
