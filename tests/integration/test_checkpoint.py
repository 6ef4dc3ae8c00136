"""Checkpoints: save a model split over workers (with its optimizer state), stop the
cluster, start another, load, continue: the same parameters as an uninterrupted run."""
import json
import os

import numpy as np
import pytest
from test_remote import data, make_net

import disthook as torch
from disthook import nn
from disthook.distributed import DistributedOptimizer, local_cluster
from disthook.distributed.checkpoint import CheckpointError

pytestmark = pytest.mark.timeout(240)
CLUSTER_WORKERS = 2  # conftest's shared cluster, for the tests that do not stop theirs


def train(remote, opt, steps):
    x, y = data()
    for _ in range(steps):
        opt.zero_grad()
        nn.functional.cross_entropy(remote(x), y).backward()
        opt.step()


def same_state(a, b):
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_allclose(a[name].numpy(), b[name].numpy(), rtol=1e-6, atol=1e-7)


def test_save_stop_start_load_continue_equals_an_uninterrupted_run(tmp_path):
    path = str(tmp_path / "ckpt")
    with local_cluster(workers=2) as cluster:
        remote = cluster.deploy(make_net(), stages=2)
        opt = DistributedOptimizer(torch.optim.Adam, remote.parameters(), lr=1e-2)
        train(remote, opt, 2)
        remote.save(path, optimizer=opt, step=2)
        train(remote, opt, 2)
        uninterrupted = remote.state_dict()
    manifest = json.loads((tmp_path / "ckpt" / "manifest.json").read_text())
    assert manifest["step"] == 2 and len(manifest["shards"]) == 2
    assert manifest["optimizer"]["class"] == "Adam"
    with local_cluster(workers=3) as cluster:  # another cluster, other processes
        remote = cluster.deploy(make_net(seed=5), stages=2, checkpoint=path)  # other init
        opt = DistributedOptimizer(torch.optim.Adam, remote.parameters(), lr=1e-2)
        assert remote.load_checkpoint(path, optimizer=opt) == 2
        train(remote, opt, 2)
        same_state(remote.state_dict(), uninterrupted)
        # cluster.load rebuilds the model from the checkpoint alone
        loaded = cluster.load(path)
        assert [names for _, _, names in loaded.workers()] == manifest["stages"]
        x, _ = data()
        with torch.no_grad():
            np.testing.assert_allclose(loaded(x).numpy(),
                                       loaded.to_local()(x).numpy(), rtol=1e-6)


def test_a_checkpoint_of_another_model_or_a_damaged_one_is_refused(tmp_path, cluster):
    path = str(tmp_path / "ckpt")
    remote = cluster.deploy(make_net(), stages=2)
    remote.save(path)
    other = nn.Sequential(nn.Linear(8, 4), nn.ReLU(), nn.Linear(4, 3))
    with pytest.raises(CheckpointError, match="a checkpoint of another model"):
        cluster.deploy(other, stages=2, checkpoint=path)
    opt = DistributedOptimizer(torch.optim.SGD, remote.parameters(), lr=0.1)
    with pytest.raises(CheckpointError, match="saved without optimizer state"):
        remote.load_checkpoint(path, optimizer=opt)
    shard = next(f for f in os.listdir(path) if f.startswith("stage-1"))
    with open(os.path.join(path, shard), "r+b") as f:
        f.seek(100)
        f.write(b"\x00\x01\x02")
    with pytest.raises(CheckpointError, match=f"shard {shard} is damaged"):
        remote.load_checkpoint(path)
    with pytest.raises(CheckpointError, match="no checkpoint at"):
        remote.load_checkpoint(str(tmp_path / "nothing"))


def test_an_interrupted_save_leaves_the_previous_checkpoint_whole(tmp_path, monkeypatch,
                                                                 cluster):
    from disthook.distributed import checkpoint

    path = str(tmp_path / "ckpt")
    remote = cluster.deploy(make_net(), stages=2)
    remote.save(path, step=1)
    before = remote.state_dict()
    with torch.no_grad():
        remote[0].weight.fill_(7.0)
    real = checkpoint._atomic_write

    def crash_at_manifest(target, data):
        if target.endswith("manifest.json"):
            raise KeyboardInterrupt("the machine went down")
        real(target, data)

    monkeypatch.setattr(checkpoint, "_atomic_write", crash_at_manifest)
    with pytest.raises(KeyboardInterrupt):
        remote.save(path, step=2)
    monkeypatch.undo()
    assert remote.load_checkpoint(path) == 1
    same_state(remote.state_dict(), before)
    assert not [f for f in os.listdir(path) if ".tmp-" in f]
