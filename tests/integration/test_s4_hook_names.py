"""A hook's tag and a capture hook's buffer name are names, at most 256 characters: each
is kept with its hook, 4096 hooks a client, and names of 1 MiB made a worker hold 4 GiB for
one client past every cap by bytes."""
import os

import pytest

from disthook import nn
from disthook.distributed import RemoteError, deployment_of
from disthook.service.rpc import Peer

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("where", ["tag", "buffer"])
def test_a_hooks_long_name_is_refused(cluster, where):
    remote = cluster.deploy(nn.Sequential(nn.Linear(3, 2)), stages=1)
    (address,) = deployment_of(remote)._addresses
    entry = {"hook": 1, "kind": "forward", "path": "0", "options": {}}
    long_name = "n" * 100_000
    if where == "tag":
        entry["tag"] = long_name
    else:
        entry["worker_hook"] = {"name": "capture", "options": {"buffer": long_name}}
    me = b"mallory-" + os.urandom(8)
    with Peer(address, identity=me) as peer:
        with pytest.raises(RemoteError, match=f"ValueError: a hook's {where} is a name of at "
                                              "most 256 characters, got 100000"):
            peer.request("add_hooks", {"model": deployment_of(remote)._model_id,
                                       "reply_to": me.hex(), "hooks": [entry]}, timeout=30)
        assert peer.request("list_hooks", {"model": deployment_of(remote)._model_id},
                            timeout=30)["result"] == []
    remote.close()
