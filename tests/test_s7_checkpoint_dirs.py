"""A checkpoint directory someone hands a client (``cluster.load(path)``): its manifest
declares each tensor's shape and dtype, its shards hold the arrays. Before, a tensor the
shards lacked was made of zeros of whatever the manifest declared (a checkpoint of a few KiB
declaring a 2 GiB weight made the client allocate 2 GiB and send it to a worker, whose
connection closed under it), the zeros were made at the declared size even for a tensor the
shards held (a declared 64 TiB raised MemoryError), a declaration that disagreed with the
shard's array went unseen, and a dtype no tensor has ('O', 'V1000000') failed later saying
only that such a tensor cannot require gradients. bfloat16 weights (kept as 2-byte voids by
npz) did not load at all."""
import json
import os

import pytest

import disthook as torch
from disthook import nn
from disthook.distributed import checkpoint as ckpt


def _net():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))
    net[1].register_buffer("scratch", torch.ones(4), persistent=False)
    return net


def _write(path, net, edit=None, drop=()):
    manifest = {"step": None, "class": "disthook.nn.Sequential", "fingerprint": "-",
                "stages": [[""]], "chunks": 1, "schedule": "gpipe", "placement": None,
                **ckpt._description(net, False)}  # as save writes it
    shard = {f"param/{k}": v.detach()._data for k, v in net.state_dict().items()
             if k not in drop}
    if edit is not None:
        edit(manifest["structure"])
    ckpt.write(str(path), manifest, [shard])
    return str(path)


def _load(path):
    manifest, shards = ckpt.read(path)
    return ckpt.rebuild(manifest, shards, path=path)


def _weight(structure):
    return structure["children"]["0"]["params"]["weight"]


def test_an_honest_checkpoint_loads_with_its_unsaved_buffer_as_zeros(tmp_path):
    net = _net()
    got = _load(_write(tmp_path / "a", net))
    for (k, v), (k2, v2) in zip(net.state_dict().items(), got.state_dict().items()):
        assert k == k2 and torch.equal(v, v2)
    assert got[1].scratch.tolist() == [0.0] * 4  # not saved: zeros, as the docs say


def test_bfloat16_weights_load_as_they_were_saved(tmp_path):
    net = _net()
    net[0].to(torch.bfloat16)
    got = _load(_write(tmp_path / "b", net))
    assert got[0].weight.dtype == torch.bfloat16
    assert torch.equal(got[0].weight, net[0].weight)


@pytest.mark.parametrize("case", ["missing", "missing-huge", "declared-huge", "disagrees",
                                  "object", "void", "text", "unsaved-huge"])
def test_what_a_manifest_declares_is_checked_before_anything_is_made(tmp_path, case):
    net = _net()
    edit, drop, message = None, (), None
    if case == "missing":
        drop, message = ("0.weight",), "no shard holds tensor '0.weight'"
    elif case == "missing-huge":
        edit = lambda s: _weight(s).update(shape=[2**14, 2**15])
        drop, message = ("0.weight",), "no shard holds tensor '0.weight'"
    elif case == "declared-huge":
        edit = lambda s: _weight(s).update(shape=[2**22, 2**22])
        message = r"declares tensor '0.weight' as \[4194304, 4194304\] <f4, its shard holds"
    elif case == "disagrees":
        edit = lambda s: _weight(s).update(shape=[7, 7])
        message = r"declares tensor '0.weight' as \[7, 7\]"
    elif case in ("object", "void", "text"):
        code = {"object": "|O", "void": "|V1000000", "text": "<U5"}[case]
        edit = lambda s: _weight(s).update(dtype=code)
        drop, message = ("0.weight",), "declared of dtype .*, which no tensor has"
    else:  # a buffer save does not keep may be declared without bytes: up to a cap
        edit = lambda s: s["children"]["1"]["buffers"]["scratch"].update(
            shape=[2**20, 2**20])
        message = "non-persistent buffer '1.scratch' is declared as .* more than"
    path = _write(tmp_path / case, net, edit, drop)
    with pytest.raises(ckpt.CheckpointError, match=message):
        _load(path)
    with open(os.path.join(path, ckpt.MANIFEST)) as f:  # (the file itself is sound JSON)
        assert json.load(f)["shards"]
