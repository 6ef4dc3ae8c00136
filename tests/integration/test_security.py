"""A cluster with keys: every connection is encrypted, and the coordinator and the workers
answer only peers whose public key is authorized; refusals are logged by the servers.
Without keys, a server bound beyond loopback warns."""
import logging
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest
import zmq

import disthook as torch
from disthook import nn
from disthook.distributed import AuthenticationError, connect, local_cluster
from disthook.service.loop import Service
from disthook.service.rpc import Peer, RemoteTimeout
from disthook.service.security import Keys, add_client, generate, is_loopback

pytestmark = pytest.mark.timeout(180)


def make_net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    """A 2-worker cluster with keys; its servers' stderr goes to a file the tests read."""
    log = tmp_path_factory.mktemp("log") / "stderr.txt"
    with open(log, "w") as err, local_cluster(2, secure=True, stderr=err,
                                              log_level="INFO") as cluster:
        yield cluster, log


def server_log(path, needle, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = path.read_text()
        if needle in text:
            return text
        time.sleep(0.05)
    raise AssertionError(f"the servers never logged {needle!r}; they logged:\n{path.read_text()}")


def test_with_the_key_deploy_train_and_read_like_one_process(secure):
    cluster, _ = secure
    net = make_net()
    remote = cluster.deploy(make_net(), stages=2)
    try:
        x = torch.randn(5, 6)
        out = remote(x)
        out.sum().backward()
        want = net(x)
        want.sum().backward()
        np.testing.assert_allclose(out.detach().numpy(), want.detach().numpy(), rtol=1e-6)
        grads = remote.named_gradients()
        for name, p in net.named_parameters():
            np.testing.assert_allclose(grads[name].numpy(), p.grad.numpy(), rtol=1e-5)
        # a second client with the cluster's key directory sees the same cluster
        with connect(cluster.address, keys=cluster.keys.directory) as other:
            assert sorted(w.id for w in other.workers()) == sorted(
                w.id for w in cluster.workers())
    finally:
        remote.close()


def test_a_client_of_another_cluster_or_without_keys_gets_nothing(secure, tmp_path):
    cluster, log = secure
    generate(tmp_path / "other")
    for keys in (tmp_path / "other", None):
        with pytest.raises(AuthenticationError, match="refused the connection"):
            connect(cluster.address, keys=keys, timeout=5)
    server_log(log, "coordinator: refused a connection: the security handshake failed")
    # nor can it reach a worker's data plane directly: no answer to status or load_stage
    worker = cluster.workers()[0]
    for keys in (Keys.load(tmp_path / "other"), None):
        with Peer(worker.address, keys=keys) as peer, pytest.raises(AuthenticationError):
            peer.request("status", timeout=5)
    sock = zmq.Context.instance().socket(zmq.DEALER)  # a raw socket: silence, then timeout
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(worker.address)
    try:  # (its connection may already have been refused: then there is nowhere to queue it)
        sock.send_multipart([b"DH1", b"\x80"], zmq.NOBLOCK)
    except zmq.Again:
        pass
    assert sock.poll(500) == 0
    sock.close()
    assert cluster.workers()  # the cluster serves its own client still


def test_an_unlisted_client_key_is_refused_and_a_listed_one_gets_in(secure, tmp_path):
    cluster, log = secure
    mine = tmp_path / "copy"
    shutil.copytree(cluster.keys.directory, mine)
    add_client(mine, "mallory")  # the right server key, but not authorized on the servers
    with pytest.raises(AuthenticationError, match="the server refused this key"):
        connect(cluster.address, keys=mine, key_name="mallory", timeout=5)
    mallory = Keys.load(mine, "mallory")
    server_log(log, f"refused a connection from an unauthorized key {mallory.fingerprint}")
    # authorizing a key takes effect for the next connection, without a restart
    shutil.copy(mine / "authorized" / "mallory.key",
                os.path.join(cluster.keys.directory, "authorized", "mallory.key"))
    with connect(cluster.address, keys=mine, key_name="mallory", timeout=5) as c:
        assert len(c.workers()) == 2


def test_keys_cli_makes_a_directory_and_launch_uses_it(tmp_path):
    keys = tmp_path / "keys"
    cli = [sys.executable, "-m", "disthook.cli"]
    made = subprocess.run([*cli, "keys", "generate", str(keys)], capture_output=True,
                          text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    assert "start every process with --keys" in made.stdout
    for name in ("server", "client"):
        assert oct((keys / f"{name}.key_secret").stat().st_mode & 0o777) == "0o600"
        assert (keys / "authorized" / f"{name}.key").is_file()
    again = subprocess.run([*cli, "keys", "generate", str(keys)], capture_output=True,
                           text=True, timeout=60)
    assert again.returncode == 1 and "already holds keys" in again.stderr
    added = subprocess.run([*cli, "keys", "add", str(keys), "alice"], capture_output=True,
                           text=True, timeout=60)
    assert added.returncode == 0 and (keys / "authorized" / "alice.key").is_file()
    with local_cluster(1, keys=keys) as cluster:
        status = subprocess.run([*cli, "status", "--coordinator", cluster.address,
                                 "--keys", str(keys), "--key-name", "alice"],
                                capture_output=True, text=True, timeout=60)
        assert status.returncode == 0, status.stderr
        assert "modules" in status.stdout  # the table, with what the workers said (keys)
        refused = subprocess.run([*cli, "status", "--coordinator", cluster.address,
                                  "--timeout", "3"], capture_output=True, text=True,
                                 timeout=60)
        assert refused.returncode == 1 and "refused the connection" in refused.stderr


def test_bad_key_directories_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="no key file .*disthook keys generate"):
        Keys.load(tmp_path / "none")
    generate(tmp_path / "k")
    with pytest.raises(FileNotFoundError, match="disthook keys add .* bob"):
        Keys.load(tmp_path / "k", "bob")
    (tmp_path / "k" / "client.key_secret").write_text("not a key\n")
    with pytest.raises(ValueError, match="client.key_secret"):
        Keys.load(tmp_path / "k")
    with pytest.raises(ValueError, match="a plain word"):
        add_client(tmp_path / "k", "../evil")


@pytest.mark.parametrize("address, loopback", [
    ("tcp://127.0.0.1:5555", True), ("tcp://127.3.2.1:1", True), ("tcp://[::1]:80", True),
    ("tcp://localhost:9", True), ("ipc:///tmp/x", True), ("tcp://0.0.0.0:5555", False),
    ("tcp://*:5555", False), ("tcp://10.1.2.3:5555", False), ("tcp://node7:5555", False),
])
def test_which_addresses_are_loopback(address, loopback):
    assert is_loopback(address) is loopback


def test_binding_beyond_loopback_without_keys_warns(caplog, tmp_path):
    with caplog.at_level(logging.WARNING, logger="disthook.service"):
        exposed = Service("tcp://0.0.0.0:0")
        exposed.close()
        quiet = Service("tcp://127.0.0.1:0")
        quiet.close()
        keyed = Service("tcp://0.0.0.0:0", keys=Keys.load(generate(tmp_path / "k").directory,
                                                          "server"))
        keyed.close()
    warnings = [r.getMessage() for r in caplog.records if "WITHOUT keys" in r.getMessage()]
    assert len(warnings) == 1 and "tcp://0.0.0.0:" in warnings[0]


def test_a_timeout_stays_a_timeout_when_nobody_listens():
    with Peer("tcp://127.0.0.1:9") as peer, pytest.raises(RemoteTimeout):
        peer.request("status", timeout=0.3)
