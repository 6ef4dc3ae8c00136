"""``send_value`` has a worker dial the address its client names (``to``) and push the
client's values there. Who names it: any client the worker serves, so before, a client of a
shared model made a worker open a connection to any host and port it chose, the workers'
own hosts included (another port of the worker's machine, a host of their network the
client cannot reach itself), and send there a ZeroMQ greeting and, to whatever speaks
ZeroMQ without keys, the values. Now a worker sends values only to the workers registered
at its coordinator (the coordinator tells each worker their addresses); any other address
is refused with ``PermissionError`` before anything is dialed."""
import os
import socket

import pytest

import disthook as torch
from disthook import nn
from disthook.distributed import RemoteError, deployment_of, local_cluster
from disthook.distributed.spec import module_spec
from disthook.service.rpc import Peer
from disthook.service.security import Keys, add_client

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def shared():
    with local_cluster(workers=2, secure=True, log_level="WARNING") as cluster:
        torch.manual_seed(0)
        remote = cluster.deploy(nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)),
                                stages=2, name="shared")
        add_client(cluster.keys.directory, "mallory")
        keys = Keys.load(cluster.keys.directory, "mallory")
        yield cluster, remote, keys


def _stage_addresses(cluster, remote):
    model = deployment_of(remote)._model_id
    held = {int(name.split()[1]): w.address for w in cluster.workers()
            for name in w.stages if name.endswith(model)}
    return [held[i] for i in sorted(held)], model


def test_a_client_cannot_have_a_worker_dial_an_address_of_its_choosing(shared):
    cluster, remote, keys = shared
    (a0, a1), model = _stage_addresses(cluster, remote)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(5)
    port = listener.getsockname()[1]
    try:
        with Peer(a0, keys=keys, identity=b"mallory-" + os.urandom(8)) as peer:
            for to in (f"tcp://127.0.0.1:{port}", f"127.0.0.1:{port}", "ipc:///tmp/s11-x"):
                with pytest.raises(RemoteError, match="PermissionError: send_value goes only "
                                                      "to the workers of this cluster"):
                    peer.request("send_value", {"model": model, "values": ["v"], "to": to},
                                 timeout=20)
            with pytest.raises(socket.timeout):
                conn, _ = listener.accept()  # before: the worker dialed it at once
                conn.close()
            # a worker of the cluster is named as before (the value's absence goes there)
            peer.send("send_value", {"model": model, "values": ["v"], "to": a1}, req=10**9)
            assert peer.request("status", timeout=60)["result"]
    finally:
        listener.close()
    x = torch.randn(5, 3)
    assert remote(x).shape == (5, 2)


def test_a_client_cannot_have_a_worker_dial_neighbours_of_its_choosing(shared, tmp_path):
    """``load_stage`` names the stage's neighbours, which the worker dials: their ZeroMQ
    addresses, and on one host their local links (a Unix socket's path). Any client may
    load a model of its own; before, one named any host and port, or any Unix socket of the
    worker's host (with its host's token, which status() lists), and the worker dialed it."""
    cluster, remote, keys = shared
    (a0, _), _ = _stage_addresses(cluster, remote)
    token = next(w.link_host for w in cluster.workers() if w.address == a0)
    tcp, unix = socket.socket(), socket.socket(socket.AF_UNIX)
    tcp.bind(("127.0.0.1", 0))
    path = str(tmp_path / "s11.sock")
    unix.bind(path)
    for s in (tcp, unix):
        s.listen(8)
        s.settimeout(3)
    spec = module_spec(nn.Sequential(nn.Linear(3, 4)))
    try:
        with Peer(a0, keys=keys, identity=b"mallory-" + os.urandom(8)) as peer:
            for fields in ({"next": f"tcp://127.0.0.1:{tcp.getsockname()[1]}"},
                           {"prev": a0, "prev_link": path, "prev_link_host": token}):
                with pytest.raises(RemoteError, match="PermissionError: load_stage's "
                                                      "(next|prev_link) goes only to"):
                    peer.request("load_stage", {"model": "mallory-1", "stage": 1,
                                                "spec": spec, **fields}, timeout=20)
        for s in (tcp, unix):
            with pytest.raises(socket.timeout):
                s.accept()[0].close()  # before: the worker dialed it
    finally:
        tcp.close()
        unix.close()
