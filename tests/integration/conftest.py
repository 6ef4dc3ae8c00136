"""Fixtures shared by the integration tests: real processes on loopback, always reaped."""
import pytest

from disthook.distributed import local_cluster


@pytest.fixture(scope="module")
def cluster():
    """A coordinator and 3 workers for the tests of one module."""
    with local_cluster(workers=3) as c:
        yield c
