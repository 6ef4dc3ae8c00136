"""A model's id is at most 256 characters on a worker, as on the coordinator. Every heartbeat
and every ``status`` of a worker names each stage it holds by its model's id, which the
client that loads the stage chooses: a client that loaded two models of its own under ids of
600 KB (a class's long name made one) made the worker's heartbeat pass the coordinator's
1 MiB cap, so the coordinator dropped it and listed the worker dead: the models published on
it were no longer live (their names free for anyone) and no newcomer could deploy."""
import os

import pytest

from disthook import nn
from disthook.distributed import RemoteError, connect
from disthook.distributed.spec import module_spec
from disthook.service.rpc import Peer

pytestmark = pytest.mark.timeout(180)

CLUSTER_WORKERS = 1


def test_a_long_model_id_is_refused_and_the_worker_stays_listed(cluster):
    (worker,) = cluster.workers()
    spec = module_spec(nn.Sequential(nn.Linear(3, 2)))
    with Peer(worker.address, identity=b"s6-" + os.urandom(4)) as peer:
        for i in range(2):
            with pytest.raises(RemoteError, match="a model's id is at most 256 characters, "
                                                  "got 600002"):
                peer.request("load_stage", {"model": f"m{i}" + "x" * 600_000, "stage": 0,
                                            "spec": spec}, timeout=30)
        peer.request("load_stage", {"model": "s6-" + "x" * 200, "stage": 0, "spec": spec},
                     timeout=30)  # (a long name within the cap)
        peer.send("unload", {"model": "s6-" + "x" * 200})  # (answered with nothing)

    class Long(nn.Sequential):  # a long class name, whose model id the client cuts
        pass

    Long.__name__ = "L" + "x" * 600
    with connect(cluster.address, timeout=30) as client:
        model = client.deploy(Long(nn.Linear(3, 2)), stages=1)
        assert any(name.startswith("stage 0 of Lxxx") for name in
                   next(w for w in cluster.workers() if w.id == worker.id).stages)
        model.close()
    assert [w.alive for w in cluster.workers()] == [True]
