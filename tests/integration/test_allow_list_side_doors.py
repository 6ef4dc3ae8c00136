"""Allow-lists have no side door (issue 32): a module named by a training step's loss or a
checkpoint's manifest is checked against the allow-list before it is imported, so a module
with a side effect on import (it writes a file) is refused and its effect never happens."""
import sys

import numpy as np
import pytest

import disthook as torch
from disthook import nn
from disthook.distributed import RemoteError, deployment_of, local_cluster
from disthook.distributed import checkpoint as ckpt
from disthook.distributed.spec import SpecError
from disthook.service.rpc import Peer

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def side_effect_module(tmp_path, monkeypatch):
    """The name of a module on sys.path (here and in workers started now) that defines a
    loss module and writes ``imported`` beside itself when imported; that file's path."""
    name = f"sidefx_{tmp_path.name.replace('-', '_')}"
    marker = tmp_path / "imported"
    (tmp_path / f"{name}.py").write_text(
        f"open({str(marker)!r}, 'w').write('ran')\n"
        "from disthook import nn\n\n\n"
        "class Loss(nn.Module):\n"
        "    def forward(self, out, target):\n"
        "        return ((out - target) ** 2).mean()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}:{':'.join(p for p in sys.path if p)}")
    yield name, marker
    sys.modules.pop(name, None)


def _spec_of(cls_path: str) -> dict:
    return {"class": cls_path, "training": True, "attrs": {}, "params": {}, "buffers": {},
            "children": {}}


def test_a_train_step_loss_from_a_module_not_allowed_is_refused_before_import(
        side_effect_module):
    name, marker = side_effect_module
    with local_cluster(workers=1, allow_code=False, allow_model_modules=[]) as cluster:
        remote = cluster.deploy(nn.Sequential(nn.Linear(3, 2)), stages=1)
        (address,) = [w.address for w in cluster.workers()]
        model = deployment_of(remote)._model_id
        with Peer(address, keys=cluster.keys, identity=b"client-x") as peer, \
                pytest.raises(RemoteError, match=f"importing {name!r} is not allowed here"):
            peer.request("train_step", {
                "model": model, "step": "s1", "schedule": [],
                "reply_to": b"client-x".hex(), "inputs": [np.ones((4, 3), np.float32)],
                "targets": [np.ones((4, 2), np.float32)],
                "loss": {"module": _spec_of(f"{name}:Loss")}}, timeout=30)
        assert not marker.exists()  # refused before its import ran anything
        remote(torch.ones(4, 3))  # the worker still serves


def _manifest_naming(cls_path: str) -> dict:
    structure = ckpt._structure(nn.Sequential(nn.Linear(3, 2)))
    structure["children"]["0"]["class"] = cls_path
    return {"class": cls_path, "structure": structure}


def _shards() -> list:
    """The arrays of that manifest's tensors (a manifest's tensors must be in its shards)."""
    return [{"param/0.weight": np.zeros((2, 3), np.float32),
             "param/0.bias": np.zeros(2, np.float32)}]


def test_a_checkpoint_manifest_naming_a_module_not_imported_is_refused_before_import(
        side_effect_module):
    name, marker = side_effect_module
    manifest = _manifest_naming(f"{name}:Loss")
    with pytest.raises(SpecError, match=f"names {name!r}, which this program has not "
                                        "imported.*trust_code=True"):
        ckpt.rebuild(manifest, _shards(), path="ckpt")
    assert not marker.exists()
    # allowed by name (as disthook serve allows the served model's packages): imported
    module = ckpt.rebuild(manifest, _shards(), path="ckpt", allow_modules=[name])
    assert marker.exists() and type(module[0]).__name__ == "Loss"


def test_a_checkpoint_of_modules_already_imported_loads_as_before(side_effect_module):
    name, marker = side_effect_module
    __import__(name)  # the program imported it itself: loading imports nothing new
    marker.unlink()
    module = ckpt.rebuild(_manifest_naming(f"{name}:Loss"), _shards(), path="ckpt")
    assert type(module[0]).__name__ == "Loss" and not marker.exists()
