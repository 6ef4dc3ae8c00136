"""A checkpoint someone hands a victim whose manifest or shard is not a file: a named pipe
(FIFO), or a link to a device (``/dev/zero``), which the link passes as a file of the
checkpoint's own directory by its name. Before, the reader opened and read it whole: a
pipe no one writes held ``load``/``deploy`` for ever, and ``/dev/zero`` read until the
process had no memory left. Now each is opened without waiting and refused, with
``CheckpointError`` naming it, unless it is a regular file; a regular file is read up to
the size it had when opened (one that grows meanwhile is refused, not read without end)."""
import os
import threading

import numpy as np
import pytest

from disthook.distributed import checkpoint
from disthook.distributed.checkpoint import CheckpointError

pytestmark = pytest.mark.timeout(60)


def _saved(tmp_path):
    path = str(tmp_path / "ck")
    checkpoint.write(path, {"fingerprint": "f", "class": "x:Y", "step": None},
                     [{"param/w": np.ones(3, np.float32)}])
    return path


def _read_in_thread(path):
    """``checkpoint.read(path)``'s outcome, or "hung" when it has none within 10 s."""
    out = {}

    def run():
        try:
            out["value"] = checkpoint.read(path, to_deploy=False)
        except Exception as exc:  # noqa: BLE001 - checked by the test
            out["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(10)
    return "hung" if t.is_alive() else out


def _unblock(fifo):
    """Let a reader that hung on ``fifo`` go (opening its other end, writing nothing)."""
    fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    os.close(fd)


def test_a_regular_checkpoint_still_reads(tmp_path):
    _, shards = checkpoint.read(_saved(tmp_path), to_deploy=False)
    np.testing.assert_array_equal(shards[0]["param/w"], np.ones(3, np.float32))


@pytest.mark.parametrize("which", ["manifest", "shard"])
def test_a_pipe_in_place_of_a_file_is_refused_at_once(tmp_path, which):
    path = _saved(tmp_path)
    name = (checkpoint.MANIFEST if which == "manifest"
            else next(f for f in os.listdir(path) if f.endswith(".npz")))
    target = os.path.join(path, name)
    if which == "manifest":
        os.remove(target)
        os.mkfifo(target)
    else:
        os.rename(target, target + ".real")
        os.mkfifo(target)
    got = _read_in_thread(path)
    if got == "hung":
        _unblock(target)
    assert got != "hung", "the reader waits on the pipe for ever"
    assert isinstance(got.get("error"), CheckpointError), got
    assert "not a regular file" in str(got["error"]) and name in str(got["error"])


def test_a_link_to_a_device_is_refused_unread(tmp_path):
    path = _saved(tmp_path)
    shard = next(f for f in os.listdir(path) if f.endswith(".npz"))
    os.remove(os.path.join(path, shard))
    os.symlink("/dev/null", os.path.join(path, shard))  # (/dev/zero: read without end)
    with pytest.raises(CheckpointError, match=f"{shard}.*not a regular file"):
        checkpoint.read(path, to_deploy=False)
