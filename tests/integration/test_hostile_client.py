"""An attached client that writes raw messages on its own connection, posing as the deployer
(issue 32): a worker takes a request's client from the connection it came on, never from a
field the sender writes, so every request either is refused or acts only as its sender, and
nothing of the deployer's changes (weights, gradients, captures, hooks, graphs). Run plain
and with keys (the attacker then holds a valid key of its own)."""
import json
import os

import numpy as np
import pytest

import disthook as torch
from disthook import nn
from disthook.distributed import RemoteError, deployment_of, hooks, local_cluster
from disthook.service.rpc import Peer
from disthook.service.security import Keys, add_client

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(params=["plain", "keys"])
def deployed(request):
    """A read-only 2-stage model, deployed and published; its deployer has a capture hook and a graph
    kept for backward; the attacker's Peer factory (its own key, with keys)."""
    secure = request.param == "keys"
    with local_cluster(workers=2, secure=secure) as cluster:
        torch.manual_seed(0)
        # (published: with keys, a model that is not is its deployer's key's alone,
        # tests/integration/test_s6_private_models.py)
        remote = cluster.deploy(nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)),
                                stages=2, name="hostile")
        remote[2].register_forward_hook(hooks.capture("acts"))
        x = torch.randn(5, 3)
        remote(x).sum().backward()  # gradients now on the workers
        kept = remote(x)  # a graph waiting for its backward
        keys = None
        if secure:
            add_client(cluster.keys.directory, "mallory")
            keys = Keys.load(cluster.keys.directory, "mallory")

        def attacker(address):
            return Peer(address, keys=keys, identity=b"mallory-" + os.urandom(8))

        yield cluster, remote, attacker, kept


def snapshot(cluster, remote):
    """What the deployer has on its workers: weights, gradients and the status counts."""
    weights = {k: v.detach().numpy().copy() for k, v in remote.state_dict().items()}
    grads = {n: None if p.grad is None else p.grad.numpy().copy()
             for n, p in remote.named_parameters()}
    graphs = {}
    for w in cluster.workers():
        with Peer(w.address, keys=cluster.keys) as peer:
            graphs[w.id] = peer.request("status", timeout=10)["result"]["contexts"]
    return weights, grads, graphs


def refused(call):
    with pytest.raises(RemoteError, match="PermissionError"):
        call()


def stage_addresses(cluster, remote) -> list[str]:
    """The endpoints of the workers holding the model's stages, in stage order."""
    held = {int(name.split()[1]): w.address for w in cluster.workers() for name in w.stages
            if name.endswith(deployment_of(remote)._model_id)}
    return [held[i] for i in sorted(held)]


def test_a_client_posing_as_the_deployer_changes_nothing_of_its(deployed):
    cluster, remote, attacker, kept = deployed
    victim = deployment_of(remote)._hub.reply_to  # what an attacker would have to learn (status no more)
    model = deployment_of(remote)._model_id
    (ctx,) = kept.grad_fn._ctx_ids  # the deployer's graph kept for its backward
    before = snapshot(cluster, remote)
    step = {"id": 1, "class": "SGD", "kwargs": {"lr": 30.0}, "params": ["0.weight"],
            "action": "step"}
    a0, a1 = stage_addresses(cluster, remote)
    with attacker(a0) as s0, attacker(a1) as s1:
        x = np.ones((5, 3), np.float32)
        # a forward under the deployer's name, an optimizer step riding on it
        refused(lambda: s0.request("forward", {
            "model": model, "stage": 0, "inputs": [x], "grad_enabled": True,
            "reply_to": victim, "optimizer_calls": [[step], []]}, ctx="evil", timeout=30))
        # a backward of the deployer's graph, in its name and in its own
        refused(lambda: s1.request("backward", {
            "model": model, "stage": 1, "grads": [np.ones((5, 2), np.float32)],
            "retain_graph": False, "reply_to": victim}, ctx=ctx, timeout=30))
        with pytest.raises(RemoteError, match="no forward graph of context"):
            s1.request("backward", {
                "model": model, "stage": 1, "grads": [np.ones((5, 2), np.float32)],
                "retain_graph": False, "reply_to": s1_identity(s1)}, ctx=ctx, timeout=30)
        refused(lambda: s1.request("add_hooks", {
            "model": model, "reply_to": victim, "hooks": [{
                "hook": 1, "kind": "forward", "path": "2", "options": {},
                "worker_hook": hooks.capture("acts").spec()}]}, timeout=30))
        refused(lambda: s0.request("train_step", {
            "model": model, "step": "evil", "schedule": [], "reply_to": victim,
            "optimizer_calls": [step]}, timeout=30))
        refused(lambda: s0.request("write", {
            "model": model, "stage": 0, "parts": [[], []], "reply_to": victim}, timeout=30))
        refused(lambda: s1.request("pipe", {
            "model": model, "step": "evil", "kind": "act", "mb": 0, "data": x}, timeout=30))
        # requests that name no client act as their sender: read-only weights stay
        for msg_type, fields in [
                ("set_state", {"state": {"0.weight": np.zeros((4, 3), np.float32)}}),
                ("param_op", {"name": "0.weight", "op": "mul_", "args": {"list": [30.0]},
                              "kwargs": {"dict": {}}}),
                ("step", {"optimizer": step}),
                ("commit", {"seq": 10**6}),  # a tree-placed model's writes made visible
                # a write down the pipeline, even one for the next stage alone
                ("write", {"stage": 0, "parts": [[], [{"type": "set_state", "fields": {
                    "state": {"2.weight": np.zeros((2, 4), np.float32)}}}]]}),
                ("unload", {})]:
            refused(lambda t=msg_type, f=fields: s0.request(t, {"model": model, **f},
                                                            timeout=30))
        # its own namespace: the deployer's captures, hooks and graphs are not its own
        assert s1.request("captured", {"name": "acts", "model": model},
                          timeout=30)["result"] == []
        assert s1.request("list_hooks", {"model": model}, timeout=30)["result"] == []
        s1.request("remove_hooks", {"model": model, "hooks": [1, 2, 3, 4]}, timeout=30)
        for peer in (s0, s1):
            peer.send("release", {"model": model, "contexts": [ctx]})
            peer.request("status", timeout=10)  # the release was handled before this
        # what status tells it names no connection it could pose as
        for address in (a0, a1):
            status = s0.request("status", timeout=10)["result"] if address == a0 else \
                s1.request("status", timeout=10)["result"]
            assert victim not in json.dumps(status)
    assert _same(snapshot(cluster, remote), before)
    assert len(cluster.captured("acts")) == 2  # both forwards' captures are still its own
    kept.sum().backward()  # its graph is still there


def s1_identity(peer) -> str:
    """The identity of ``peer``'s own connection, hex (a client may name itself)."""
    import zmq

    return peer._sock.getsockopt(zmq.IDENTITY).hex()


def _same(now, before) -> bool:
    def eq(a, b):
        return a.keys() == b.keys() and all(
            (a[k] is None and b[k] is None)
            or (a[k] is not None and b[k] is not None and np.array_equal(a[k], b[k]))
            for k in a)
    return eq(now[0], before[0]) and eq(now[1], before[1]) and now[2] == before[2]


def test_captures_are_per_client(deployed):
    cluster, remote, attacker, _ = deployed
    for address in stage_addresses(cluster, remote):
        with attacker(address) as other:
            assert other.request("captured", {"name": "acts", "clear": True},
                                 timeout=30)["result"] == []
    assert len(cluster.captured("acts")) == 2  # not emptied by the other client


def test_a_client_cannot_announce_calls_or_make_a_worker_keep_versions(deployed):
    """``pin`` is a neighbour stage's notice, and a forward's ``pins`` count only when a
    neighbour carries it: a client sending either makes no worker keep weights for it."""
    cluster, remote, attacker, _ = deployed
    model = deployment_of(remote)._model_id
    _, a1 = stage_addresses(cluster, remote)
    with attacker(a1) as s1:
        refused(lambda: s1.request("pin", {"model": model, "calls": [
            ["00" * 8, f"ctx-{i}", None] for i in range(64)]}, timeout=30))
        waits = s1.request("waits", timeout=30)["result"]  # a diagnosis names no connection
        assert s1_identity(s1) not in json.dumps(waits)
        out = s1.request("forward", {
            "model": model, "stage": 1, "inputs": [np.ones((5, 4), np.float32)],
            "grad_enabled": False, "reply_to": s1_identity(s1),
            "pins": [["00" * 8, f"ctx-{i}", None] for i in range(64)]}, timeout=30)
        assert np.asarray(out["result"]["output"]).shape == (5, 2)  # it ran, as its sender
        remote.load_state_dict(remote.state_dict())  # a write: nothing kept for those
        with Peer(a1, keys=cluster.keys) as admin:  # (with keys: not the attacker's to read)
            (kept,) = admin.request("waits", timeout=30)["result"]["versions"].values()
        assert kept == {"forks": 0, "kept": 0, "announced": 0}
