"""A deployed model shared by name (issue 23): deploy(name=) publishes it, models() lists it
with its stages, owner and attached clients, and a client in another process that attaches
to it computes what the deployer computes; unknown and taken names, models that keep state
on the client, and a deployer's close are refused or undone clearly; ``disthook serve``
stands a saved model up under a name and stops on Ctrl-C."""
import json
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from clusters import wait_until

import disthook as torch
from disthook import nn
from disthook.distributed import RemoteError, connect, deployment_of, shipping
from disthook.distributed.registry import NameTaken, UnknownModel
from disthook.distributed.spec import module_spec
from disthook.service.rpc import Peer

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import gpt  # examples/gpt.py (the workers find it: they get this process's sys.path)

pytestmark = pytest.mark.timeout(240)
CLUSTER_WORKERS = 2

# another client: attaches by name, runs a forward and backward, says what it got
ATTACHER = textwrap.dedent("""
    import json, sys
    import disthook as torch
    from disthook.distributed import connect, deployment_of

    address, name = sys.argv[1:]
    with connect(address) as cluster:
        remote = cluster.attach(name)
        torch.manual_seed(1)
        x = torch.randn(5, 4, requires_grad=True)
        out = remote(x)
        out.pow(2).sum().backward()
        (listed,) = [m for m in cluster.models(calls=False) if m["name"] == name]
        print(json.dumps({"out": out.detach().numpy().tolist(),
                          "grad": x.grad.numpy().tolist(),
                          "class": type(remote).__name__, "me": deployment_of(remote)._hub.reply_to,
                          "attached": [a["client"] for a in listed["clients"]]}))
""")


def net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))


def loaded_stages(cluster) -> int:
    return sum(len(w.stages) for w in cluster.workers())


def test_a_client_in_another_process_attaches_by_name_and_computes_what_the_deployer_does(
        cluster):
    remote = cluster.deploy(net(), stages=2, name="shared-mlp")
    try:
        (listed,) = [m for m in cluster.models() if m["name"] == "shared-mlp"]
        assert listed["model"] == deployment_of(remote)._model_id and listed["live"]
        # named by the coordinator, never by its connection's identity (issue 32)
        assert listed["owner"].startswith("client ") and listed["writable"] is False
        assert deployment_of(remote)._hub.reply_to not in str(cluster.models())
        assert listed["class"] == "disthook.nn.modules.container:Sequential"
        assert [(s["stage"], s["worker"]) for s in listed["stages"]] == \
            [(stage, wid) for stage, wid, _ in remote.workers()]
        assert listed["clients"] == [] and listed["stages"][0]["forwards"] == 0

        run = subprocess.run([sys.executable, "-c", ATTACHER, cluster.address, "shared-mlp"],
                             capture_output=True, text=True, timeout=120, check=False)
        assert run.returncode == 0, run.stderr
        got = json.loads(run.stdout)
        # listed by a name the coordinator gives, never by its connection's identity
        assert got["class"] == "Sequential" and len(got["attached"]) == 1
        assert got["attached"][0].startswith("client ") and got["me"] not in got["attached"]
        torch.manual_seed(1)
        x = torch.randn(5, 4, requires_grad=True)
        out = remote(x)
        out.pow(2).sum().backward()
        np.testing.assert_allclose(got["out"], out.detach().numpy(), rtol=1e-6)
        np.testing.assert_allclose(got["grad"], x.grad.numpy(), rtol=1e-6)
        # the client is gone: the coordinator forgets it; its close left the stages loaded
        wait_until(lambda: [m["clients"] for m in cluster.models(calls=False)
                            if m["name"] == "shared-mlp"] == [[]], 10)
        np.testing.assert_allclose(remote(x).detach().numpy(), out.detach().numpy())
    finally:
        remote.close()


def test_an_attached_tree_model_is_an_instance_of_its_class_and_its_hooks_fire(cluster):
    torch.manual_seed(0)
    model = gpt.GPT(gpt.Config())
    local = gpt.GPT(gpt.Config())
    local.load_state_dict(model.state_dict())
    remote = cluster.deploy(model, stages=2, name="shared-gpt")
    try:
        with connect(cluster.address) as other:
            attached = other.attach("shared-gpt")
            assert isinstance(attached, gpt.GPT) and deployment_of(attached)._model_id == deployment_of(remote)._model_id
            assert deployment_of(attached)._hub.reply_to != deployment_of(remote)._hub.reply_to  # a client of its own
            x, y = next(iter(gpt.batches(gpt.Config(), 1)))
            seen = []
            attached.transformer.h[0].register_forward_hook(
                lambda m, args, out: seen.append(tuple(out.shape)))
            _, loss = attached(x, y)
            _, expected = local(x, y)
            np.testing.assert_allclose(loss.item(), expected.item(), rtol=1e-5)
            assert seen == [(4, 16, 32)]
            assert list(attached.state_dict()) == list(local.state_dict())
            np.testing.assert_allclose(attached.state_dict()["lm_head.weight"].numpy(),
                                       local.lm_head.weight.detach().numpy())
            (listed,) = [m for m in cluster.models(calls=False) if m["name"] == "shared-gpt"]
            (who,) = [a["client"] for a in listed["clients"]]  # a name, not its identity
            assert who.startswith("client ") and who != listed["owner"]
        # the attached client closed with its cluster: the deployer's stages are there
        _, again = remote(x, y)
        np.testing.assert_allclose(again.item(), expected.item(), rtol=1e-5)
    finally:
        remote.close()


def test_an_unknown_name_lists_the_published_ones(cluster):
    remote = cluster.deploy(net(), stages=1, name="known")
    try:
        with connect(cluster.address) as other, \
                pytest.raises(UnknownModel, match=r"no model is published as 'unknown'.*"
                                                  r"published: 'known'") as caught:
            other.attach("unknown")
        assert isinstance(caught.value, KeyError)
    finally:
        remote.close()


def test_a_live_name_is_refused_naming_its_owner_and_nothing_loads(cluster):
    remote = cluster.deploy(net(), stages=2, name="taken")
    try:
        before = loaded_stages(cluster)
        # the deployer is named as the coordinator numbers it (the shared cluster's client
        # need not be its first)
        owner = next(m["owner"] for m in cluster.models() if m["name"] == "taken")
        assert re.fullmatch(r"client \d+", owner), owner
        with connect(cluster.address) as other, pytest.raises(
                NameTaken, match=f"'taken' is taken.*published by {owner} is live"):
            other.deploy(net(), stages=2, name="taken")
        assert loaded_stages(cluster) == before
    finally:
        remote.close()


def test_the_deployers_close_unpublishes_and_frees_the_name(cluster):
    remote = cluster.deploy(net(), stages=2, name="short-lived")
    remote.close()
    assert [m for m in cluster.models() if m["name"] == "short-lived"] == []
    with pytest.raises(UnknownModel):
        cluster.attach("short-lived")
    again = cluster.deploy(net(), stages=2, name="short-lived")
    again.close()


def test_a_model_that_keeps_weights_on_the_client_is_not_published(cluster):
    before = loaded_stages(cluster)
    with pytest.raises(ValueError, match=r"cannot publish.*on this client \(1.weight, 1.bias\)"):
        cluster.deploy(nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2)), stages=1,
                       placement={"0": 0}, name="half-here")
    # unloaded (workers report it; an earlier test's stage may still be going meanwhile)
    wait_until(lambda: loaded_stages(cluster) <= before, 10)
    assert [m for m in cluster.models() if m["name"] == "half-here"] == []


def test_serve_stands_a_checkpoint_up_by_name_and_stops_on_ctrl_c(cluster, tmp_path):
    saved = cluster.deploy(net(), stages=2)
    saved.save(str(tmp_path / "ckpt"))
    local = saved.to_local()
    saved.close()
    proc = subprocess.Popen(
        [sys.executable, "-m", "disthook.cli", "serve", str(tmp_path / "ckpt"), "--name", "mlp",
         "--workers", "2", "--bind", "tcp://127.0.0.1:0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        found = re.search(r"attach with connect\('([^']+)'\)\.attach\('mlp'\)", line)
        assert found, f"serve printed {line!r}; stderr: {proc.stderr.read() if not line else ''}"
        x = torch.randn(6, 4)
        with connect(found.group(1)) as client:
            (listed,) = client.models()
            assert listed["name"] == "mlp" and len(listed["stages"]) == 2
            np.testing.assert_allclose(client.attach("mlp")(x).detach().numpy(),
                                       local(x).detach().numpy(), rtol=1e-6)
            # a shared service: classes only from disthook and the served model's packages
            spec = module_spec(nn.Sequential(nn.Identity()))
            spec["children"]["0"]["class"] = "json:JSONDecoder"
            with Peer(client.workers()[0].address) as peer:
                with pytest.raises(RemoteError, match="importing 'json' is not allowed"):
                    peer.request("load_stage", {"model": "m", "stage": 0, "spec": spec},
                                 timeout=30)
                # and no code: a model pickled by value is refused before it is unpickled
                assert not any(w.code for w in client.workers())
                blob, arrays = shipping.dumps(nn.Sequential(nn.Linear(2, 2)))
                with pytest.raises(RemoteError, match="this worker takes no code"):
                    peer.request("load_stage", {"model": "m", "stage": 0, "code": blob,
                                                "arrays": arrays}, timeout=30)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0
        assert "stopping the cluster" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()
