"""With keys, what a worker's ``status`` and ``waits`` tell a key of the others. Before,
every key read the names of all the stages a worker held (another key's model ids, which
the client library makes from the model's class), the worker's totals over every client
(kept graphs, kept values, training steps' bytes and mailbox, waits, queued requests,
messages decoded), which moved with each call of another client, and, from ``waits``,
every client's running and queued calls with their models and key names. Now a key reads
the names of its own and the published stages, its own key's totals, its own calls; the
cluster's own keys read everything, as before. An error that says what a worker holds
(a request naming a model it does not) named every stage too."""
import threading
import time

import pytest

import disthook as torch
from disthook import nn
from disthook.distributed import RemoteError, connect, deployment_of, local_cluster
from disthook.service.rpc import Peer
from disthook.service.security import Keys, add_client

pytestmark = pytest.mark.timeout(180)


def _ask(address: str, keys, what: str = "status") -> dict:
    with Peer(address, keys=keys) as peer:
        return peer.request(what, timeout=20)["result"]


def test_a_key_reads_its_own_stages_and_totals_not_another_keys():
    with local_cluster(workers=1, secure=True) as cluster:
        keys = cluster.keys.directory
        for name in ("alice", "bob"):
            add_client(keys, name)
        (worker,) = cluster.workers()
        with connect(cluster.address, keys=keys, key_name="alice") as alice:
            own = alice.deploy(nn.Sequential(nn.Linear(3, 5), nn.ReLU()), stages=1)
            shared = alice.deploy(nn.Sequential(nn.Linear(3, 2)), stages=1, name="s12-shared")
            private = f"stage 0 of {deployment_of(own)._model_id}"
            public = f"stage 0 of {deployment_of(shared)._model_id}"
            bob = Keys.load(keys, "bob")
            before = _ask(worker.address, bob)
            kept = [own(torch.ones(2, 3, requires_grad=True)) for _ in range(3)]  # alice's
            after = _ask(worker.address, bob)
            assert before["stages"] == after["stages"] == [public]  # before: private too
            for total in ("contexts", "values", "step_bytes", "mailbox", "waits", "queued"):
                assert before[total] == after[total] == 0, (total, before, after)
            assert "messages" not in after  # (every client's messages: the cluster's keys)
            assert private not in str(after)
            with Peer(worker.address, keys=bob) as peer, pytest.raises(
                    RemoteError, match="holds no stage of model 'nope'") as no:
                peer.request("get_state", {"model": "nope"}, timeout=20)  # (nor an error's)
            assert private not in str(no.value) and public in str(no.value), no.value

            # a call of alice's that waits on her hook: bob's ``waits`` does not show it
            entered, go_on = threading.Event(), threading.Event()

            def hook(module, args, output):
                entered.set()
                go_on.wait(30)

            handle = own[0].register_forward_hook(hook)
            call = threading.Thread(target=own, args=(torch.ones(2, 3),))
            call.start()
            try:
                assert entered.wait(30)
                waits = _ask(worker.address, bob, "waits")
                assert private not in str(waits) and "alice" not in str(waits), waits
                assert _ask(worker.address, bob)["waits"] == 0
                seen = _ask(worker.address, cluster.keys, "waits")  # the admin's: all
                assert private in str(seen) and "alice" in str(seen), seen
            finally:
                go_on.set()
                call.join(30)
            handle.remove()

            mine = _ask(worker.address, Keys.load(keys, "alice"))
            assert sorted(mine["stages"]) == sorted([private, public])
            assert mine["contexts"] == 3  # alice's own graphs
            admin = _ask(worker.address, cluster.keys)
            assert sorted(admin["stages"]) == sorted([private, public])
            assert admin["contexts"] == 3 and admin["messages"] > 0
            del kept


def test_the_coordinators_status_names_to_a_key_its_own_and_the_published_stages():
    """The coordinator's ``status`` (``workers()``) listed every worker's stages by name to
    every key: another key's unpublished model ids. Now a key reads its own and the
    published ones by name, and of another key's only that there is one (a deploy places
    stages on the workers holding the fewest); the cluster's own keys read every name."""
    with local_cluster(workers=1, secure=True) as cluster:
        keys = cluster.keys.directory
        for name in ("alice", "bob"):
            add_client(keys, name)
        with connect(cluster.address, keys=keys, key_name="alice") as alice, \
                connect(cluster.address, keys=keys, key_name="bob") as bob:
            own = alice.deploy(nn.Sequential(nn.Linear(3, 5), nn.ReLU()), stages=1)
            shared = alice.deploy(nn.Sequential(nn.Linear(3, 2)), stages=1, name="s12-seen")
            theirs = bob.deploy(nn.Sequential(nn.Linear(3, 2)), stages=1)
            private, public, bobs = (f"stage 0 of {deployment_of(m)._model_id}"
                                     for m in (own, shared, theirs))
            every = {private, public, bobs}
            deadline = time.monotonic() + 30  # (the worker's next beat names them)
            while set(cluster.workers()[0].stages) != every:
                assert time.monotonic() < deadline, cluster.workers()
                time.sleep(0.2)
            (seen,) = bob.workers()
            assert set(seen.stages) == {public, bobs, "stage 0 of another key's model (1)"}
            assert private not in str(bob.status())  # before: every key read it
            assert "messages" not in bob.status()["coordinator"]
            (seen,) = alice.workers()
            assert set(seen.stages) == {private, public, "stage 0 of another key's model (1)"}
            assert "messages" in cluster.status()["coordinator"]
