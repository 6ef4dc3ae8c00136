"""Fixtures shared by the integration tests: real processes on loopback, always reaped.
Helper functions (free ports, waits, the workers' own status) are in ``clusters.py``."""
import pytest
from clusters import SharedClusters


@pytest.fixture(scope="session")
def shared_clusters():
    """One plain local cluster per size, started when a module first asks for that size and
    reaped at the end of the session (of this xdist worker)."""
    clusters = SharedClusters()
    yield clusters
    clusters.close()


@pytest.fixture(scope="module")
def cluster(request, shared_clusters):
    """A coordinator and workers for the tests of one module: 3, or the module's
    ``CLUSTER_WORKERS``. The cluster is shared with the other modules that ask for the same
    size: it comes with every worker alive and holding nothing, and whatever the module
    deployed is closed after it (a cluster the module left otherwise is reaped, not shared).
    Tests that kill or reconfigure a cluster start their own with ``local_cluster``."""
    with shared_clusters.lend(getattr(request.module, "CLUSTER_WORKERS", 3)) as c:
        yield c


@pytest.fixture(scope="module", params=[2, 3], ids=lambda n: f"{n}-workers")
def cluster_2_or_3(request, shared_clusters):
    """A shared cluster of 2 workers, then one of 3 (``c.stages``: its size), for the tests
    of a module that run on both."""
    with shared_clusters.lend(request.param) as c:
        c.stages = request.param
        yield c
