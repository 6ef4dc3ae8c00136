"""A client revoked by deleting its key from ``authorized/`` loses its open connections
too. The key check (ZAP) runs when a connection is made: a revoked client whose connections
were up went on running, hooking and loading models on the workers and publishing on the
coordinator for as long as it stayed connected. Now its next message, on every connection
it has, is refused, and the others' go on."""
import os
import time

import pytest

from disthook.distributed import RemoteError, local_cluster
from disthook.service.rpc import Peer
from disthook.service.security import Keys, add_client

pytestmark = pytest.mark.timeout(120)


def test_a_revoked_key_loses_the_connections_it_has():
    with local_cluster(workers=1, secure=True) as cluster:
        directory = cluster.keys.directory
        add_client(directory, "alice")
        alice = Keys.load(directory, "alice")
        (worker,) = cluster.workers()
        with Peer(worker.address, keys=alice) as on_worker, \
                Peer(cluster.address, keys=alice) as on_coordinator:
            for peer in (on_worker, on_coordinator):
                peer.request("status", timeout=20)  # connected, and served
            os.remove(os.path.join(directory, "authorized", "alice.key"))
            time.sleep(1.2)  # (the folder is read again at most every second)
            for peer in (on_worker, on_coordinator):
                # (named as the process knew it: the worker by its name, the coordinator by
                # its start, its file being gone)
                with pytest.raises(RemoteError, match="PermissionError: the key '(alice|key .*)' "
                                                      "this connection came with is no longer "
                                                      "authorized"):
                    peer.request("status", timeout=20)
        assert [w.alive for w in cluster.workers()] == [True]  # the others are served
        with Peer(worker.address, keys=cluster.keys) as peer:
            peer.request("status", timeout=20)
