"""An answer whose header is larger than a peer reads (1 MiB) is answered with an error it
can read: a long error's message and traceback are cut, any other answer is replaced by an
error that says so. Sent whole, the client's decoder refused it without reading its request
id, and the request waited for its whole deadline: a ``get_state`` naming 15000 parameters
the stage does not have was answered with a ``KeyError`` of 800 KB listing them, twice over
with its traceback, and the client heard nothing for 30 s."""
import os
import time

import pytest

from disthook import nn
from disthook.distributed import RemoteError, deployment_of
from disthook.service.loop import _cut
from disthook.service.rpc import Peer

pytestmark = pytest.mark.timeout(180)

CLUSTER_WORKERS = 1


def test_a_long_error_is_answered_cut_short(cluster):
    remote = cluster.deploy(nn.Sequential(nn.Linear(3, 2)), stages=1)
    (address,) = deployment_of(remote)._addresses
    start = time.monotonic()
    with Peer(address, identity=b"s6-" + os.urandom(4)) as peer, \
            pytest.raises(RemoteError, match="KeyError: .* has no parameters or buffers") as got:
        peer.request("get_state", {"model": deployment_of(remote)._model_id,
                                   "names": ["q" * 50] * 15000}, timeout=60)
    assert time.monotonic() - start < 20
    assert "characters, cut)" in str(got.value)
    remote.close()


def test_a_long_answer_becomes_an_error_that_says_so():
    cut = _cut("ok", {"result": ["x" * 100] * 20000}, 2_200_000, "worker w1")
    assert cut["kind"] == "RuntimeError"
    assert "header of 2200000 bytes, more than the 1048576 a peer reads" in cut["message"]
