"""On a cluster with keys, a model its deployer did not publish is its deployer's key's own.
Its id is no secret (a worker's ``status`` lists every stage it holds, and so does the
coordinator's), and any other authorized key read its weights (``get_state``), ran it,
hooked it and trained it by that id. Now every request about it from another key is refused
with ``PermissionError``; a published model is every client's to use, as before, and the
deployer's key may use its own model from any of its connections."""
import os

import numpy as np
import pytest

import disthook as torch
from disthook import nn
from disthook.distributed import RemoteError, deployment_of, local_cluster
from disthook.service.rpc import Peer
from disthook.service.security import Keys, add_client

pytestmark = pytest.mark.timeout(180)


def _model_id(model) -> str:
    return deployment_of(model)._model_id


def test_another_keys_client_cannot_use_a_model_that_was_not_published():
    with local_cluster(workers=1, secure=True) as cluster:
        torch.manual_seed(0)
        own = cluster.deploy(nn.Sequential(nn.Linear(3, 2)), stages=1)
        shared = cluster.deploy(nn.Sequential(nn.Linear(3, 2)), stages=1, name="s6-shared")
        add_client(cluster.keys.directory, "mallory")
        mallory = Keys.load(cluster.keys.directory, "mallory")
        (worker,) = cluster.workers()
        me = b"mallory-" + os.urandom(4)
        with Peer(worker.address, keys=mallory, identity=me) as peer:
            own_id, shared_id = _model_id(own), _model_id(shared)
            stages = peer.request("status", timeout=20)["result"]["stages"]
            # not named to another key (test_s12_status.py), and refused when it is known
            assert f"stage 0 of {own_id}" not in stages and f"stage 0 of {shared_id}" in stages
            x = np.ones((1, 3), np.float32)
            hook = {"hook": 1, "kind": "forward", "path": "0", "options": {},
                    "worker_hook": {"name": "capture", "options": {"buffer": "stolen"}}}
            for msg_type, fields in [
                    ("get_state", {}),
                    ("forward", {"stage": 0, "inputs": [x], "grad_enabled": False,
                                 "reply_to": me.hex()}),
                    ("add_hooks", {"hooks": [hook], "reply_to": me.hex()}),
                    ("list_hooks", {}),
                    ("form", {})]:
                with pytest.raises(RemoteError, match="PermissionError: .* is its deployer's "
                                                      "own: it was not published"):
                    peer.request(msg_type, {"model": own_id, **fields}, timeout=20)
                peer.request(msg_type, {"model": shared_id, **fields}, timeout=20)  # served
        # the deployer's key, on another connection than the deployment's: its own model
        with Peer(worker.address, keys=cluster.keys) as peer:
            state = peer.request("get_state", {"model": own_id}, timeout=20)["result"]["state"]
            stats = peer.request("status", timeout=20)["result"]["stage_stats"]
        np.testing.assert_array_equal(state["0.weight"], own[0].weight.detach().numpy())
        assert stats[f"stage 0 of {own_id}"]["hooks"] == 0  # nothing hooked it
