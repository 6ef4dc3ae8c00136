"""Roles on the coordinator (issue 32): with keys, ``shutdown`` only from the admin (the
servers' key or the cluster's own client key) and ``register`` only from workers; in every
mode a second registration under a live worker's id is refused, so newcomers are never sent
to an impostor."""
import os

import pytest

from disthook.distributed import RemoteError, local_cluster
from disthook.service.rpc import Peer
from disthook.service.security import Keys, add_client

pytestmark = pytest.mark.timeout(120)


def register_as(peer, worker, address="tcp://127.0.0.1:9"):
    return peer.request("register", {"worker": worker.id, "address": address,
                                     "pid": os.getpid(), "host": "evil"}, timeout=10)


@pytest.mark.parametrize("secure", [False, True], ids=["plain", "keys"])
def test_a_second_registration_of_a_live_worker_is_refused(secure):
    with local_cluster(workers=1, secure=secure) as cluster:
        (worker,) = cluster.workers()
        keys = cluster.keys
        if secure:  # even with the servers' key (a worker of the cluster, misconfigured)
            keys = Keys.load(cluster.keys.directory, "server")
        with Peer(cluster.address, keys=keys, identity=b"impostor") as peer:
            with pytest.raises(RemoteError, match="PermissionError: worker id .* is "
                                                  "registered by a live worker"):
                register_as(peer, worker)
            with pytest.raises(RemoteError, match="PermissionError: .* another connection"):
                peer.request("heartbeat", {"worker": worker.id}, timeout=10)
        (still,) = cluster.workers()
        assert still.address == worker.address and still.alive


def test_with_keys_a_client_may_neither_register_nor_shut_the_cluster_down():
    with local_cluster(workers=1, secure=True) as cluster:
        add_client(cluster.keys.directory, "mallory")
        mallory = Keys.load(cluster.keys.directory, "mallory")
        with Peer(cluster.address, keys=mallory) as peer:
            with pytest.raises(RemoteError, match="PermissionError: register is for workers"):
                register_as(peer, _Named("new-worker"))
            with pytest.raises(RemoteError, match="PermissionError: shutdown is for its "
                                                  "admin"):
                peer.request("shutdown", {"reason": "mallory"}, timeout=10)
        assert [w.alive for w in cluster.workers()] == [True]  # the cluster still runs
        assert len(cluster.status()["workers"]) == 1


class _Named:
    def __init__(self, worker_id):
        self.id = worker_id
