"""A deployed model's checkpoint directory (``remote.save``) read from hostile hands: the
manifest's shards must be plain files of the directory (no ``../``, no absolute path), and
each shard's members stored as ``np.savez`` writes them, each name once: a deflated member
(64 MiB of zeros in 64 KiB) and a name given twice are refused before an array is made."""
import hashlib
import io
import json
import zipfile

import numpy as np
import pytest

from disthook.distributed import checkpoint
from disthook.distributed.checkpoint import CheckpointError


def checkpoint_of(folder, shard: bytes, name: str = "stage-0-a.npz"):
    """A checkpoint directory whose manifest names one shard (``name``, holding ``shard``)."""
    folder.mkdir(exist_ok=True)
    if name.startswith("stage-"):
        (folder / name).write_bytes(shard)
    entry = {"file": name, "sha256": hashlib.sha256(shard).hexdigest()}
    manifest = {"format": checkpoint.FORMAT, "shards": [entry], "step": None,  # as save's
                "class": "disthook.nn.Linear", "fingerprint": "-", "stages": [[""]],
                "chunks": 1, "schedule": "gpipe", "structure": None}
    (folder / checkpoint.MANIFEST).write_text(json.dumps(manifest))
    return str(folder)


def npz(save=np.savez, **arrays) -> bytes:
    buf = io.BytesIO()
    save(buf, **arrays)
    return buf.getvalue()


def test_a_plain_shard_is_read(tmp_path):
    _, shards = checkpoint.read(checkpoint_of(tmp_path / "c", npz(**{"param/w": np.ones(3)})))
    np.testing.assert_array_equal(shards[0]["param/w"], np.ones(3))


@pytest.mark.parametrize("name", ["../outside.npz", "/etc/hostname", "..", ""])
def test_a_shard_outside_the_directory_is_refused(tmp_path, name):
    shard = npz(**{"param/w": np.ones(3)})
    (tmp_path / "outside.npz").write_bytes(shard)
    with pytest.raises(CheckpointError, match="a shard must be a file of the checkpoint's own"):
        checkpoint.read(checkpoint_of(tmp_path / "c", shard, name))


def test_a_compressed_member_is_refused_before_it_expands(tmp_path):
    bomb = npz(np.savez_compressed, **{"param/w": np.zeros(1 << 23)})  # 64 MiB of zeros
    assert len(bomb) < 1 << 20
    with pytest.raises(CheckpointError, match=r"'param/w.npy' is compressed .*\(np.savez\)"):
        checkpoint.read(checkpoint_of(tmp_path / "c", bomb))


def test_a_member_named_twice_is_refused(tmp_path):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("param/w.npy", npz_member(np.full(3, 1.0)))
        with pytest.warns(UserWarning, match="Duplicate name"):
            z.writestr("param/w.npy", npz_member(np.full(3, 2.0)))
    with pytest.raises(CheckpointError, match="holds 'param/w.npy' twice"):
        checkpoint.read(checkpoint_of(tmp_path / "c", buf.getvalue()))


def npz_member(array) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array)
    return buf.getvalue()
