"""An authorized client that loads models of its own on a shared service's workers (as data,
classes from the allowed modules) is capped per key on each worker: 64 models' stages
(``--max-models``) and 8 GiB of their weights (``--max-model-mb``), counted also after the
connection that loaded them went, so reconnecting gets no more. Before, a client loaded as
many as it liked, from one connection or a fresh one each time, and they stayed loaded
after it left (here: 65 models from 65 connections, all held)."""
import contextlib
import os
import subprocess
import sys

import pytest

from disthook import nn
from disthook.distributed import RemoteError, connect
from disthook.distributed.spec import module_spec
from disthook.service.rpc import Peer
from disthook.service.security import Keys, add_client, generate

pytestmark = pytest.mark.timeout(240)


@contextlib.contextmanager
def keyed_service(keys: str, *flags: str):
    """A coordinator and one worker taking no code, with keys; the worker's address."""
    procs = []
    try:
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "coordinator", "--bind", "tcp://127.0.0.1:0", "--keys", keys,
             "--log-level", "ERROR"], stdout=subprocess.PIPE, text=True))
        coordinator = procs[0].stdout.readline().split()[-1]
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "workers", "--coordinator", coordinator, "--keys", keys,
             "--log-level", "ERROR", *flags], stdout=subprocess.PIPE, text=True))
        address = procs[1].stdout.readline().split()[-1]
        with connect(coordinator, keys=keys, timeout=30) as cluster:
            cluster.wait_for_workers(1, timeout=60)
        yield address
    finally:
        for proc in reversed(procs):
            proc.terminate()
            proc.wait(10)


def load(address, keys, model, module=None, identity=None):
    """A ``load_stage`` of ``module`` (a small Linear by default) as ``model``, from a fresh
    connection (closed after, without unloading: as a client that went away)."""
    spec = module_spec(module or nn.Sequential(nn.Linear(2, 2)))
    with Peer(address, keys=keys, identity=identity or b"mallory-" + os.urandom(8)) as peer:
        peer.request("load_stage", {"model": model, "stage": 0, "spec": spec}, timeout=30)


def test_models_a_key_keeps_loaded_are_capped_also_across_connections(tmp_path):
    keys = str(tmp_path / "keys")
    generate(keys)
    add_client(keys, "mallory")
    add_client(keys, "bob")
    mallory, bob = Keys.load(keys, "mallory"), Keys.load(keys, "bob")
    with keyed_service(keys) as address:
        for i in range(64):
            load(address, mallory, f"m{i}")
        with pytest.raises(RemoteError, match=r"RuntimeError: this client keeps 64 models' "
                                              r"stages loaded on this worker, the most one "
                                              r"client may \(--max-models\)"):
            load(address, mallory, "m64")
        load(address, bob, "b0")  # another key has its own allowance
        with Peer(address, keys=Keys.load(keys)) as admin:  # (the cluster's own key reads
            stages = admin.request("status", timeout=10)["result"]["stages"]  # every key's)
        assert len(stages) == 65


def test_the_weights_of_a_keys_models_are_capped(tmp_path):
    keys = str(tmp_path / "keys")
    generate(keys)
    add_client(keys, "mallory")
    mallory = Keys.load(keys, "mallory")
    with keyed_service(keys, "--max-model-mb", "1") as address:
        load(address, mallory, "small", nn.Sequential(nn.Linear(256, 256)))  # 257 KiB
        with pytest.raises(RemoteError, match=r"RuntimeError: this client's models loaded on "
                                              r"this worker hold 0\.3 MiB of weights, and this "
                                              r"stage's 1\.0 MiB more would pass the cap of "
                                              r"1\.0 MiB \(--max-model-mb\)"):
            load(address, mallory, "big", nn.Sequential(nn.Linear(512, 512)))
        with Peer(address, keys=mallory) as peer:
            stages = peer.request("status", timeout=10)["result"]["stages"]
        assert [name.split()[-1] for name in stages] == ["small"]  # the refused one is not held
