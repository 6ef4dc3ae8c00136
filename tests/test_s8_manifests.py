"""A checkpoint directory someone hands a client whose manifest is JSON but not a manifest:
nested deeper than Python recurses, a list or a string, a shard entry that is not an object
or lacks its hash, its list of shards missing. The reader failed inside itself with
a ``RecursionError``, an ``AttributeError``, a ``TypeError`` or a ``KeyError``; now each is a
``CheckpointError`` naming the manifest and what is off in it."""
import json
import os

import pytest

import disthook as torch
from disthook import nn
from disthook.distributed import checkpoint as ckpt


def _good_manifest(tmp_path) -> dict:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 2))
    shard = {f"param/{k}": v.detach()._data for k, v in net.state_dict().items()}
    ckpt.write(str(tmp_path), {"class": "disthook.nn.Sequential", "fingerprint": "f",
                               "stages": [["0"]], "step": None, "chunks": 1,
                               "schedule": "gpipe", "placement": None,
                               **ckpt._description(net, False)}, [shard])
    with open(tmp_path / ckpt.MANIFEST) as f:
        return json.load(f)


def _without(d: dict, key: str) -> dict:
    return {k: v for k, v in d.items() if k != key}


OFF = {  # the manifest's text from a good one, and what the error says
    "nested too deep": (lambda good: "[" * 100_000, "is not valid JSON: maximum recursion"),
    "a list": (lambda good: "[]", "the manifest is a JSON list, not an object"),
    "a string": (lambda good: '"s"', "the manifest is a JSON str, not an object"),
    "no shards": (lambda good: json.dumps(_without(good, "shards")),
                  "the manifest has no 'shards'"),
    "shards not a list": (lambda good: json.dumps({**good, "shards": 5}),
                          "the manifest's 'shards' is int, not list"),
    "a shard entry a number": (lambda good: json.dumps({**good, "shards": [5]}),
                               "a shard's entry is a JSON int, not an object"),
    "a shard entry without its hash": (
        lambda good: json.dumps({**good, "shards": [_without(good["shards"][0], "sha256")]}),
        "a shard's entry has no 'sha256'"),
}


@pytest.mark.parametrize("what", list(OFF))
def test_a_manifest_that_is_not_one_is_refused_saying_what_is_off(tmp_path, what):
    text, says = OFF[what]
    good = _good_manifest(tmp_path)
    assert ckpt.read(str(tmp_path))[0]["class"] == "disthook.nn.Sequential"  # as written
    with open(tmp_path / ckpt.MANIFEST, "w") as f:
        f.write(text(good))
    with pytest.raises(ckpt.CheckpointError, match=f"{os.fspath(tmp_path)}/{ckpt.MANIFEST} "
                                                    f".*{says}"):
        ckpt.read(str(tmp_path))
