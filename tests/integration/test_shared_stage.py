"""A worker serving a stage to several clients (issue 23), spoken to over the wire: weights
are its deployer's to change (others read them, and get PermissionError for writes, unloads
and optimizer classes from outside disthook), unless it was loaded writable; a worker started
with --allow-model-module takes classes only from disthook and the modules listed."""

import numpy as np
import pytest
from clusters import worker

from disthook import nn
from disthook.distributed import RemoteError
from disthook.distributed.spec import module_spec
from disthook.service.rpc import Peer

pytestmark = pytest.mark.timeout(120)


def load(peer, writable=None):
    spec = module_spec(nn.Sequential(nn.Linear(2, 2)))
    fields = {"model": "m", "stage": 0, "spec": spec}
    if writable is not None:
        fields["writable"] = writable
    peer.request("load_stage", fields, timeout=30)


def state(peer):
    return peer.request("get_state", {"model": "m"}, timeout=30)["result"]["state"]


def test_weights_are_the_deployers_to_change():
    with worker() as address, Peer(address) as owner, Peer(address) as other:
        load(owner)
        weight = state(owner)["0.weight"]
        np.testing.assert_array_equal(state(other)["0.weight"], weight)  # reading is not writing
        zeros = {"0.weight": np.zeros((2, 2), np.float32)}
        for msg_type, fields in [
                ("set_state", {"state": zeros}),
                ("param_op", {"name": "0.bias", "op": "zero_", "args": {"list": []},
                              "kwargs": {"dict": {}}}),
                ("train", {"mode": False}),
                ("step", {"optimizer": {"id": 1, "class": "SGD", "kwargs": {"lr": 0.1},
                                        "params": ["0.weight"], "action": "step"}}),
                ("unload", {})]:
            with pytest.raises(RemoteError, match="PermissionError: .*(shares read-only|only "
                                                  "the client that deployed it)"):
                other.request(msg_type, {"model": "m", **fields}, timeout=30)
        with pytest.raises(RemoteError, match="PermissionError: the optimizer class "
                                              "'json:JSONDecoder' would be imported"):
            other.request("step", {"model": "m", "optimizer": {
                "id": 2, "class": "json:JSONDecoder", "kwargs": {}, "params": ["0.weight"],
                "action": "zero_grad"}}, timeout=30)
        np.testing.assert_array_equal(state(owner)["0.weight"], weight)  # nothing changed
        owner.request("set_state", {"model": "m", "state": zeros}, timeout=30)  # its own
        load(owner, writable=True)  # loaded again, open to writes
        other.request("set_state", {"model": "m", "state": zeros}, timeout=30)


def test_a_service_takes_classes_only_from_the_modules_it_lists():
    spec = module_spec(nn.Sequential(nn.Identity()))
    spec["children"]["0"]["class"] = "json:JSONDecoder"
    with worker("--allow-model-module", "mypkg") as address, Peer(address) as peer:
        with pytest.raises(RemoteError, match="importing 'json' is not allowed here"):
            peer.request("load_stage", {"model": "m", "stage": 0, "spec": spec}, timeout=30)
        load(peer)  # disthook's own classes are


def test_per_client_limits_refuse_with_what_to_do():
    import disthook as torch
    from disthook.distributed import connect

    with worker("--max-contexts", "2", "--max-hooks", "1") as address:
        cluster = connect(address.coordinator)
        try:
            remote = cluster.deploy(nn.Sequential(nn.Linear(2, 2)), stages=1)
            x = torch.randn(3, 2)
            kept = [remote(x), remote(x)]  # two graphs waiting for their backward
            with pytest.raises(RemoteError, match=r"keeps 2 forward graphs .* the most one "
                                                  r"client may \(--max-contexts\)"):
                remote(x)
            with torch.no_grad():
                remote(x)  # keeps no graph
            kept[0].sum().backward()
            remote(x)  # room again
            remote[0].register_forward_hook(lambda m, a, o: None)
            with pytest.raises(RemoteError, match=r"holds 1 hooks .* \(--max-hooks\)"):
                remote[0].register_forward_hook(lambda m, a, o: None)
            with Peer(address) as peer:  # the worker's own status: per stage, per client
                status = peer.request("status", {}, timeout=30)["result"]
            assert status["limits"] == {"contexts": 2, "hooks": 1, "graph_bytes": 1 << 30,
                                        "value_bytes": 1 << 30}
            (stage,) = status["stage_stats"].values()
            assert list(stage["clients"].values()) == [
                {"contexts": 1, "step_bytes": 0, "hooks": 1,
                 "owner": True}]  # kept[1]; the rest dropped
        finally:
            cluster.close()


def test_the_bytes_of_a_clients_kept_graphs_are_capped_with_what_to_do():
    import disthook as torch
    from disthook.distributed import connect

    with worker("--max-graph-mb", "1") as address:
        cluster = connect(address.coordinator)
        try:
            remote = cluster.deploy(nn.Sequential(nn.Linear(64, 64), nn.Tanh()), stages=1)
            small = remote(torch.randn(256, 64))  # 64 KiB in, 64 KiB out, kept: fits
            with pytest.raises(RemoteError, match=r"hold 0\.\d MiB, and this call.s \d\.\d MiB more "
                                                  r"would pass the cap of 1\.0 MiB "
                                                  r"\(--max-graph-mb\)"):
                remote(torch.randn(4096, 64))  # 1 MiB in, more saved and out
            with torch.no_grad():
                remote(torch.randn(4096, 64))  # keeps no graph
            small.sum().backward()  # its graph goes; the worker still serves
            remote(torch.randn(256, 64)).sum().backward()
        finally:
            cluster.close()


def test_an_unload_takes_no_reply_and_unloads():
    """A closing client sends "unload" and closes its socket: a reply would find no route
    and be dropped 30 s later with a warning in the worker's log."""
    with worker() as address, Peer(address) as owner:
        load(owner)
        owner.send("unload", {"model": "m"})
        assert owner._sock.poll(1500) == 0  # nothing comes back
        with pytest.raises(RemoteError, match="holds no stage of model 'm'"):
            state(owner)  # the stage is gone
