"""A checkpoint manifest that lists its shards but lacks a field ``save`` writes and a reader
uses (``fingerprint``, ``class``, ``step``, the stage layout, the model's description) or
holds it as another JSON type. ``load_checkpoint`` failed with a ``KeyError`` inside
``checkpoint.load`` (``cluster.load`` likewise inside ``placed_as``); now ``read`` refuses it
with a ``CheckpointError`` naming the manifest and the field. What only deploying the model
takes (the stage layout, the description) is not asked of a checkpoint loaded onto a
deployed model."""
import json
import os

import pytest

import disthook as torch
from disthook import nn
from disthook.distributed import checkpoint as ckpt


def _saved(tmp_path) -> dict:
    """A manifest as ``save`` writes it (its fields; the fingerprint of the model)."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 2))
    shard = {f"param/{k}": v.detach()._data for k, v in net.state_dict().items()}
    ckpt.write(str(tmp_path), {"step": 3, "class": "disthook.nn.Sequential",
                               "fingerprint": ckpt.fingerprint(net), "stages": [[""]],
                               "chunks": 1, "schedule": "gpipe", "placement": None,
                               **ckpt._description(net, False)}, [shard])
    with open(tmp_path / ckpt.MANIFEST) as f:
        return json.load(f)


OFF = {  # an edit of a good manifest, and what the error says
    "no fingerprint": (lambda m: m.pop("fingerprint"), "the manifest has no 'fingerprint'"),
    "no class": (lambda m: m.pop("class"), "the manifest has no 'class'"),
    "no step": (lambda m: m.pop("step"), "the manifest has no 'step'"),
    "step a string": (lambda m: m.update(step="3"),
                      "the manifest's 'step' is str, not int or null"),
    "no stages": (lambda m: m.pop("stages"), "the manifest has no 'stages'"),
    "no chunks": (lambda m: m.pop("chunks"), "the manifest has no 'chunks'"),
    "no schedule": (lambda m: m.pop("schedule"), "the manifest has no 'schedule'"),
    "no structure": (lambda m: m.pop("structure"), "the manifest has no 'structure'"),
    "fingerprint null": (lambda m: m.update(fingerprint=None),
                         "the manifest's 'fingerprint' is null, not str"),
}


@pytest.mark.parametrize("what", list(OFF))
def test_a_manifest_without_a_field_its_readers_use_is_refused_naming_it(tmp_path, what):
    edit, says = OFF[what]
    good = _saved(tmp_path)
    manifest, _ = ckpt.read(str(tmp_path))  # as written, it reads
    assert manifest["step"] == 3 and ckpt.placed_as(manifest) == (1, {"chunks": 1,
                                                                      "schedule": "gpipe"})
    edit(good)
    with open(tmp_path / ckpt.MANIFEST, "w") as f:
        json.dump(good, f)
    with pytest.raises(ckpt.CheckpointError, match=f"{os.fspath(tmp_path)}/{ckpt.MANIFEST} "
                                                    f"is not a manifest .*: {says}"):
        ckpt.read(str(tmp_path))


@pytest.mark.parametrize("field", ["fingerprint", "class", "step"])
def test_load_checkpoint_refuses_a_manifest_without_what_it_reads(tmp_path, field):
    good = _saved(tmp_path)
    del good[field]
    with open(tmp_path / ckpt.MANIFEST, "w") as f:
        json.dump(good, f)
    # (refused before the model is looked at: a KeyError inside load before)
    with pytest.raises(ckpt.CheckpointError, match=f"{os.fspath(tmp_path)}/{ckpt.MANIFEST} "
                                                    f"is not a manifest .*: the manifest has "
                                                    f"no '{field}'"):
        ckpt.load(None, str(tmp_path))


@pytest.mark.parametrize("field", list(ckpt._DEPLOY_FIELDS))
def test_load_checkpoint_does_not_need_what_only_deploying_needs(tmp_path, field):
    """A checkpoint older than the saved placement (no stages, chunks, schedule) loads onto
    a deployed model, which needs only its weights, as before; deploying it is refused."""
    good = _saved(tmp_path)
    del good[field]
    with open(tmp_path / ckpt.MANIFEST, "w") as f:
        json.dump(good, f)
    assert ckpt.read(str(tmp_path), to_deploy=False)[0]["step"] == 3
    with pytest.raises(ckpt.CheckpointError, match=f"the manifest has no '{field}'"):
        ckpt.read(str(tmp_path))


def test_placement_and_optimizer_may_be_absent(tmp_path):
    good = _saved(tmp_path)
    del good["placement"]
    with open(tmp_path / ckpt.MANIFEST, "w") as f:
        json.dump(good, f)
    manifest, _ = ckpt.read(str(tmp_path))
    assert ckpt.placed_as(manifest) == (1, {"chunks": 1, "schedule": "gpipe"})
