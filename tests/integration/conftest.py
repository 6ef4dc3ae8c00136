"""Fixtures shared by the integration tests: real processes on loopback, always reaped.
Helper functions (free ports, waits, the workers' own status) are in ``clusters.py``."""
import pytest

from disthook.distributed import local_cluster


@pytest.fixture(scope="module")
def cluster(request):
    """A coordinator and workers for the tests of one module: 3, or the module's
    ``CLUSTER_WORKERS``."""
    with local_cluster(workers=getattr(request.module, "CLUSTER_WORKERS", 3)) as c:
        yield c
