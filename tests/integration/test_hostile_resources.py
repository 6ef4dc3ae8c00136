"""An attached client with a key of its own that tries to exhaust what a shared model's
processes hold for everyone: sockets a worker dials for it, the pipeline mailbox every
client shares, values it keeps, the coordinator's registry, and the log. Each is refused
past a cap (an error that says what and why, logged a few lines a minute), the processes
stay up, and the deployer's model answers as before."""
import os
import time

import numpy as np
import pytest
import zmq
from clusters import wait_until, worker

import disthook as torch
from disthook import nn
from disthook.distributed import RemoteError, connect, deployment_of, local_cluster
from disthook.service.rpc import Peer
from disthook.service.security import Keys, add_client

pytestmark = pytest.mark.timeout(240)
FAR = 10**9  # request ids of messages sent without waiting (beyond this process's own)


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """A keyed 2-worker cluster whose servers log to a file; a read-only 2-stage model its
    deployer published as "shared"; an attacker's Peer factory (key "mallory")."""
    log = tmp_path_factory.mktemp("hostile") / "servers.log"
    with open(log, "w") as stderr, local_cluster(workers=2, secure=True, stderr=stderr,
                                                 log_level="WARNING") as cluster:
        torch.manual_seed(0)
        remote = cluster.deploy(nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)),
                                stages=2, name="shared")
        add_client(cluster.keys.directory, "mallory")
        keys = Keys.load(cluster.keys.directory, "mallory")

        def attacker(address, identity=None):
            return Peer(address, keys=keys, identity=identity or b"mallory-" + os.urandom(8))

        yield cluster, remote, attacker, log


def stages(cluster, remote):
    """(address, pid) of the workers holding the model's stages, in stage order."""
    model = deployment_of(remote)._model_id
    held = {int(name.split()[1]): (w.address, w.pid) for w in cluster.workers()
            for name in w.stages if name.endswith(model)}
    return [held[i] for i in sorted(held)]


def still_works(remote):
    x = torch.randn(5, 3)
    remote(x).sum().backward()
    assert remote[0].weight.grad is not None
    remote.zero_grad()


def test_a_client_naming_ever_new_peers_makes_a_worker_keep_few_sockets(shared):
    cluster, remote, attacker, _ = shared
    (a0, pid), _ = stages(cluster, remote)
    model = deployment_of(remote)._model_id
    before = len(os.listdir(f"/proc/{pid}/fd"))
    with attacker(a0) as peer:
        for i in range(600):  # send_value to 600 addresses: a socket dialled for each before
            peer.send("send_value", {"model": model, "values": ["v"],
                                     "to": f"tcp://127.0.0.1:{20000 + i}"}, req=FAR + i)
        # (since tests/integration/test_s11_send_value_to.py none is dialed: none is a
        # worker's)
        with pytest.raises(RemoteError, match="PermissionError: send_value goes only to the "
                                              "workers of this cluster"):
            peer.request("send_value", {"model": model, "values": ["v"],
                                        "to": "tcp://127.0.0.1:19999"}, timeout=60)
    assert len(os.listdir(f"/proc/{pid}/fd")) < before + 80  # 600 more before
    still_works(remote)


def test_values_pushed_for_no_call_fill_only_their_clients_share_of_the_mailbox(shared):
    cluster, remote, attacker, _ = shared
    (a0, _), (a1, _) = stages(cluster, remote)
    model = deployment_of(remote)._model_id
    me = b"mallory-" + os.urandom(8)  # one identity on both workers, as the client library's
    with attacker(a0, me) as s0, attacker(a1, me) as s1:
        # (the same key's connection of the test before named 64 addresses from a0: until a0
        # sees it gone, which takes a moment under load, a new address is refused)
        deadline = time.monotonic() + 30
        while not s1.request("status", timeout=30)["result"]["mailbox"]:
            assert time.monotonic() < deadline, "a1 took no value from a0"
            s0.send("send_value", {"model": model, "to": a1, "values": ["probe"]},
                    req=2 * FAR)
            time.sleep(0.5)
        for i in range(30):  # 3000 values that do not exist, pushed to the next stage
            s0.send("send_value", {"model": model, "to": a1,
                                   "values": [f"v{i}.{j}" for j in range(100)]}, req=FAR + i)
        s0.request("status", timeout=60)
        deadline = time.monotonic() + 30
        while s1.request("status", timeout=30)["result"]["mailbox"] < 1024:
            assert time.monotonic() < deadline, "the pushed values did not come"
            time.sleep(0.1)
        time.sleep(0.5)
        assert s1.request("status", timeout=30)["result"]["mailbox"] == 1024  # 4096 before
    deadline = time.monotonic() + 30  # the attacker's connections closed: its values went
    with Peer(a1, keys=cluster.keys) as peer:
        while peer.request("status", timeout=30)["result"]["mailbox"]:
            assert time.monotonic() < deadline, "the values of a client gone stayed"
            time.sleep(0.1)
    still_works(remote)


def test_refusals_are_logged_a_few_lines_a_minute(shared):
    cluster, remote, _, log = shared
    (a0, _), _ = stages(cluster, remote)
    model = deployment_of(remote)._model_id
    # a key of its own: a key's lines share one allowance, which the other tests' refusals
    # of "mallory" may have taken this minute
    add_client(cluster.keys.directory, "trudy")
    with Peer(a0, keys=Keys.load(cluster.keys.directory, "trudy")) as peer:
        for i in range(200):  # writes of a read-only model
            peer.send("set_state", {"model": model, "state": {}}, req=FAR + i)
        with pytest.raises(RemoteError, match="PermissionError: .*read-only"):
            peer.request("set_state", {"model": model, "state": {}}, timeout=60)
    time.sleep(0.5)
    with open(log) as lines:
        lines = [line for line in lines if "refused set_state" in line]
    assert 1 <= len(lines) <= 10, len(lines)  # 201 before
    still_works(remote)


def test_the_registry_keeps_each_clients_attachments_its_own_and_bounded(shared):
    cluster, remote, attacker, log = shared
    model = deployment_of(remote)._model_id
    fields = {"name": "shared", "model": model}
    cluster._coordinator.request("attach", {**fields, "client": "client"})

    def clients():
        (published,) = [m for m in cluster.models() if m["name"] == "shared"]
        return sorted(c["client"] for c in published["clients"])

    with attacker(cluster.address) as peer:
        # attaching under the deployer's name adds its own entry; it replaces none
        peer.request("attach", {**fields, "client": "client"}, timeout=30)
        assert clients() == ["client", "mallory"]
        peer.request("detach", {**fields, "client": "client"}, timeout=30)  # its own only
        assert clients() == ["client"]
        for i in range(100):
            peer.send("attach", {**fields, "client": f"x{i}"}, req=FAR + i)
        with pytest.raises(RemoteError, match="RuntimeError: this client holds 64 "
                                              "attachments to 'shared', the most"):
            peer.request("attach", {**fields, "client": "one more"}, timeout=30)
        assert clients().count("mallory") == 64
        record = peer.request("lookup", {"name": "shared"}, timeout=30)["result"]
        for i in range(70):
            peer.send("publish", {"record": {**record, "name": f"squat{i}"}}, req=FAR + i)
        with pytest.raises(RemoteError, match="RuntimeError: this client holds 64 published "
                                              "models, the most one client may"):
            peer.request("publish", {"record": {**record, "name": "one more"}}, timeout=30)
        assert sum(m["name"].startswith("squat") for m in cluster.models()) == 64
    with attacker(cluster.address) as peer:  # records that models() could not list any more
        stages = [{"stage": i, "worker": "w" * 100, "address": "a" * 100} for i in range(4000)]
        for name, made_up in [("long", {"workers": stages}), ("x" * 300000, {}),
                              ("twice", {"workers": record["workers"] * 2})]:
            with pytest.raises(RemoteError, match="ValueError: not a deployment on this "
                                                  "cluster's workers: its "):
                peer.request("publish", {"record": {**record, "name": name, **made_up}},
                             timeout=30)
        assert "shared" in [m["name"] for m in cluster.models()]  # listed, and answered
    wait_until(lambda: clients() == ["client"], 30)  # its connection closed: they went
    with open(log) as lines:
        assert any("refused the client with key 'mallory'" in line for line in lines)
    still_works(remote)


def test_a_clients_kept_values_are_capped_in_bytes():
    with worker("--max-value-mb", "40") as address, connect(address.coordinator,
                                                           timeout=30) as cluster:
        remote = cluster.deploy(nn.Sequential(nn.Linear(3, 64)))
        model = deployment_of(remote)._model_id
        with Peer(address, identity=b"mallory-" + os.urandom(8)) as peer:
            me = peer._sock.getsockopt(zmq.IDENTITY).hex()
            x = np.ones((65536, 3), np.float32)  # an output of 16 MiB, kept on the worker

            def keep(i):
                return peer.request("forward", {
                    "model": model, "stage": 0, "inputs": [], "grad_enabled": True,
                    "reply_to": me, "path": "0", "keep": True, "call": {"tuple": [
                        {"tuple": [{"tensor": x, "requires_grad": True}]}, {"dict": {}}]}},
                    ctx=f"c{i}", timeout=60)

            keep(0), keep(1)
            with pytest.raises(RemoteError, match=r"RuntimeError: this client's values kept "
                                                  r"on worker .* hold 32.0 MiB, and 16.0 MiB "
                                                  r"more would pass the cap of 40.0 MiB "
                                                  r"\(--max-value-mb\)"):
                keep(2)
            status = peer.request("status", timeout=30)["result"]
            assert status["values"] == 2 and status["contexts"] == 2  # the refused kept none
            assert status["limits"]["value_bytes"] == 40 << 20
        still_works(remote)  # the deployer's calls go on
