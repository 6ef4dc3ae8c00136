"""The registry of published models survives a coordinator restart (issue 32): the
coordinator keeps it in a file (local_cluster(restart=True) gives it one), so after the
coordinator process is killed and started again an attached client still finds the model,
another client cannot publish under its name, and its deployer still owns it. Plain and
with keys (the other client then holds a valid key of its own)."""
import time

import numpy as np
import pytest

import disthook as torch
from disthook import nn
from disthook.distributed import RemoteTimeout, connect, local_cluster
from disthook.service.security import add_client

pytestmark = pytest.mark.timeout(180)


def make_net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))


def restart_coordinator(cluster, timeout=30.0):
    first = cluster._processes[0]
    first.kill()
    first.wait(10)
    deadline = time.monotonic() + timeout
    while True:  # the restarter starts a new one; the workers register with it again
        try:
            workers = [w for w in cluster.workers() if w.alive]
        except RemoteTimeout:
            workers = []
        if len(workers) == 2 and all(w.stages for w in workers) \
                and cluster._processes[0].pid != first.pid:
            return
        assert time.monotonic() < deadline, "the coordinator and workers did not come back"
        time.sleep(0.2)


@pytest.mark.parametrize("secure", [False, True], ids=["plain", "keys"])
def test_the_registry_survives_a_coordinator_restart_with_names_owned(secure):
    with local_cluster(workers=2, restart=True, secure=secure, timeout=5) as cluster:
        keys = cluster.keys.directory if secure else None
        if secure:
            add_client(keys, "mallory")
        remote = cluster.deploy(make_net(), stages=2, name="shared")
        with connect(cluster.address, keys=keys) as reader:
            attached = reader.attach("shared")
            restart_coordinator(cluster)
            # an attached client still finds it, and a newcomer attaches
            assert [m["name"] for m in reader.models()] == ["shared"]
            with torch.no_grad():
                np.testing.assert_allclose(attached(torch.ones(1, 3)).numpy(),
                                           make_net()(torch.ones(1, 3)).numpy(), rtol=1e-6)
            with connect(cluster.address, keys=keys) as newcomer:
                newcomer.attach("shared")
            # another client cannot take the name over
            with connect(cluster.address, keys=keys,
                         key_name="mallory" if secure else None) as other:
                with pytest.raises(Exception, match="the name 'shared' is taken"):
                    other.deploy(nn.Linear(3, 2), stages=1, name="shared")
                assert [m["model"] for m in other.models()] == [
                    m["model"] for m in reader.models()]  # still the deployer's
            attached.close()
        # its deployer still owns it: closing frees the name (with keys at once, by its key;
        # plain, once its workers no longer hold it)
        remote.close()
        deadline = time.monotonic() + 20
        with connect(cluster.address, keys=keys) as later:
            while True:
                try:
                    later.deploy(nn.Linear(3, 2), stages=1, name="shared").close()
                    break
                except Exception as exc:  # noqa: BLE001 - the name frees within a beat or two
                    assert "is taken" in str(exc) and time.monotonic() < deadline, exc
                    time.sleep(0.3)
