"""Code by name, from a client that holds an authorized key of a shared service (workers
that take no code): a model's attribute naming a class through an allowed module
(``disthook.<mod>:tempfile._TemporaryFileCloser``: an object of it unlinks the path it holds
as it goes) and a hook by path that walks out of its allowed module (``<allowed>:os.getcwd``)
are refused before anything is made, and nothing happens on the worker."""
import numpy as np
import pytest

import disthook as torch
from disthook import nn
from disthook.distributed import RemoteError, deployment_of, hooks, local_cluster
from disthook.service.rpc import Peer
from disthook.service.security import Keys, add_client

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def service():
    """A service's workers (no code, classes from disthook only), with keys; mallory's
    keys (authorized, not the cluster's own client)."""
    with local_cluster(workers=1, secure=True, allow_code=False, allow_model_modules=(),
                       allow_hook_modules=["disthook.distributed.spec"]) as cluster:
        add_client(cluster.keys.directory, "mallory")
        yield cluster, Keys.load(cluster.keys.directory, "mallory")


def gadget(name: str, target: str) -> dict:
    """The spec of an Identity holding an object of ``name`` (a class path) that holds
    ``target`` as the path it deletes when it goes."""
    return {"class": "disthook.nn.modules.linear:Identity", "training": True, "params": {},
            "buffers": {}, "children": {},
            "attrs": {"x": {"object": {"class": name, "attrs": {
                "file": 1, "name": target, "delete": True}}}}}


@pytest.mark.parametrize("name", [
    "disthook.distributed.cluster:tempfile._TemporaryFileCloser",  # through an allowed module
    "tempfile:_TemporaryFileCloser",  # named by its own module: not allowed there
])
def test_a_model_attribute_cannot_name_a_class_outside_the_allowed_modules(service, tmp_path,
                                                                          name):
    cluster, mallory = service
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    with Peer(cluster.workers()[0].address, keys=mallory) as peer:
        with pytest.raises(RemoteError, match="not allowed|leads out of the allowed modules"):
            peer.request("load_stage", {"model": "gadget-1", "stage": 0,
                                        "spec": gadget(name, str(victim))}, timeout=30)
        peer.send("unload", {"model": "gadget-1"})
        assert peer.request("status", timeout=30)["result"] is not None  # all handled
    assert victim.read_text() == "keep me"


def test_a_hook_by_path_cannot_walk_out_of_its_allowed_module(service):
    cluster, mallory = service
    torch.manual_seed(0)
    with _client(cluster, mallory) as client:
        remote = client.deploy(nn.Sequential(nn.Linear(3, 2)), stages=1)
        x = torch.randn(2, 3)
        want = remote(x).detach().numpy()
        for target in ("disthook.distributed.spec:os.getcwd",  # a module it imported
                       "disthook.distributed.spec:walk_name.__globals__.get"):  # a dunder
            with pytest.raises(RemoteError, match="PermissionError"):
                remote[0].register_forward_hook(hooks.by_path(target))
        # its own functions still may be named, and the model computes as before
        np.testing.assert_array_equal(remote(x).detach().numpy(), want)
        remote.close()


def _client(cluster, keys):
    from disthook.distributed import connect

    return connect(cluster.address, keys=keys)


@pytest.mark.parametrize("target", ["model", "optimizer"])
def test_a_class_path_cannot_import_a_main_module_of_an_allowed_package(service, target):
    """``disthook.bench.__main__`` is under disthook, the allowed package, and importing it
    runs a benchmark and exits the process: a model's or an optimizer's class may not name a
    ``__main__`` module (the worker stays up and serves)."""
    cluster, mallory = service
    path = "disthook.bench.__main__:Foo"
    with Peer(cluster.workers()[0].address, keys=mallory) as peer:
        if target == "model":
            spec = {"class": path, "training": True, "params": {}, "buffers": {},
                    "children": {}, "attrs": {}}
            with pytest.raises(RemoteError, match="not allowed"):
                peer.request("load_stage", {"model": "main-1", "stage": 0, "spec": spec},
                             timeout=30)
        else:
            with _client(cluster, mallory) as client:
                remote = client.deploy(nn.Sequential(nn.Linear(3, 2)), stages=1,
                                       writable=True)
                step = {"model": deployment_of(remote)._model_id, "optimizer": {
                    "id": 1, "class": path, "kwargs": {}, "params": ["0.weight"],
                    "action": "step"}}
                with pytest.raises(RemoteError, match="not importable"):
                    peer.request("step", step, timeout=30)
                remote.close()
        assert peer.request("status", timeout=30)["result"] is not None  # still serving


def test_a_hook_by_path_cannot_import_a_main_module_of_an_allowed_package():
    """The same for a hook by path on a worker that allows hooks from all of disthook: the
    refusal comes before any import."""
    import sys

    from disthook.service import worker_hooks

    sys.modules.pop("disthook.bench.__main__", None)
    with pytest.raises(PermissionError, match="not allowed"):
        worker_hooks._import_allowed("disthook.bench.__main__:main", ("disthook",))
    assert "disthook.bench.__main__" not in sys.modules
    # a function of an allowed module is still found
    assert worker_hooks._import_allowed("disthook.distributed.spec:walk_name", ("disthook",))


def test_a_module_alias_cannot_import_a_main_module(service):
    """A stage's load carries the client's names for disthook's modules; one standing for
    ``disthook.bench.__main__`` is refused before it is imported (the worker serves on)."""
    cluster, mallory = service
    spec = {"class": "disthook.nn.modules.linear:Identity", "training": True, "params": {},
            "buffers": {}, "children": {}, "attrs": {}}
    with Peer(cluster.workers()[0].address, keys=mallory) as peer:
        with pytest.raises(RemoteError, match="not an alias of a disthook module"):
            peer.request("load_stage", {"model": "alias-1", "stage": 0, "spec": spec,
                                        "aliases": {"bench_main": "disthook.bench.__main__"}},
                         timeout=30)
        assert peer.request("status", timeout=30)["result"] is not None  # still serving
