"""With keys, what a worker's ``status`` tells one client of the others. Any authorized key
read there, for every stage it holds, its modules, parameter count and forwards, and each
client's kept graphs and hooks: the layout of another key's unpublished model and each time
it ran, and what every other client of a shared model held. Now a client's key gets those
details for its own key's stages only; of a published model's stages the forwards (which
``models()`` shows), modules and parameters (its structure is every attached client's) and
its own entry; the cluster's own keys (the servers', the admin's) everything, as before."""
import pytest

import disthook as torch
from disthook import nn
from disthook.distributed import connect, deployment_of, local_cluster
from disthook.service.rpc import Peer
from disthook.service.security import Keys, add_client

pytestmark = pytest.mark.timeout(180)


def _status(address: str, keys) -> dict:
    with Peer(address, keys=keys) as peer:
        return peer.request("status", timeout=20)["result"]


def test_a_workers_status_details_to_a_key_only_its_own_and_what_is_published():
    with local_cluster(workers=1, secure=True) as cluster:
        keys = cluster.keys.directory
        for name in ("alice", "bob", "eve"):
            add_client(keys, name)
        (worker,) = cluster.workers()
        with connect(cluster.address, keys=keys, key_name="alice") as alice, \
                connect(cluster.address, keys=keys, key_name="bob") as bob:
            own = alice.deploy(nn.Sequential(nn.Linear(3, 5), nn.ReLU(), nn.Linear(5, 2)),
                               stages=1)
            shared = alice.deploy(nn.Sequential(nn.Linear(3, 2)), stages=1, name="s8-shared")
            own(torch.ones(1, 3))
            theirs = bob.attach("s8-shared")
            theirs[0].register_forward_hook(lambda m, a, o: None)
            kept = theirs(torch.ones(1, 3))  # a graph of bob's, kept on the worker
            private = f"stage 0 of {deployment_of(own)._model_id}"
            public = f"stage 0 of {deployment_of(shared)._model_id}"

            eve = _status(worker.address, Keys.load(keys, "eve"))
            assert eve["stages"] == [public]  # (another key's: not named, test_s12_status)
            assert list(eve["stage_stats"]) == [public]
            assert eve["stage_stats"][public] == {"forwards": 1, "modules": ["0"],
                                                  "parameters": 8, "clients": {}}

            seen = _status(worker.address, Keys.load(keys, "bob"))["stage_stats"]
            assert list(seen) == [public]
            assert list(seen[public]["clients"].values()) == [
                {"contexts": 1, "step_bytes": 0, "hooks": 1, "owner": False}]

            seen = _status(worker.address, Keys.load(keys, "alice"))["stage_stats"]
            assert seen[private]["modules"] == ["0", "1", "2"]
            assert seen[public]["hooks"] == 1  # its stage's load: every client's hooks
            assert [e["owner"] for e in seen[public]["clients"].values()] == [True]

            admin = _status(worker.address, cluster.keys)["stage_stats"]
            assert sorted(e["owner"] for e in admin[public]["clients"].values()) == [
                False, True]
            assert admin[private]["parameters"] == 32
            del kept
