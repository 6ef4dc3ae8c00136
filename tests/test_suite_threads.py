"""In the tests' own process torch computes on one thread (tests/conftest.py), and numpy's
BLAS keeps the environment's setting, as the workers the tests start have it: results of a
deployed model are compared with this process's to the last bits."""
import os
import subprocess
import sys

import pytest

try:  # at import, as the parity modules import it: before this module's first test
    import torch
except ImportError:
    torch = None


@pytest.mark.skipif(torch is None, reason="torch is not installed")
def test_torch_computes_on_one_thread_here_once_imported():
    assert torch.get_num_threads() == 1


def _blas_threads(code_prefix: str = "") -> str:
    code = (code_prefix + "import numpy, threadpoolctl; print(max(p['num_threads'] for p in "
            "threadpoolctl.threadpool_info() if p['user_api'] == 'blas'))")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, env=dict(os.environ, OPENBLAS_NUM_THREADS="2")).stdout


def test_numpy_blas_keeps_the_environments_setting_here_as_in_the_processes_started():
    threadpoolctl = pytest.importorskip("threadpoolctl")
    if os.environ.get("OPENBLAS_NUM_THREADS") or os.environ.get("OMP_NUM_THREADS"):
        pytest.skip("the environment sets BLAS threads itself")
    blas = [pool for pool in threadpoolctl.threadpool_info() if pool["user_api"] == "blas"]
    started = _blas_threads("import os; os.environ.pop('OPENBLAS_NUM_THREADS'); ")
    assert blas and {pool["num_threads"] for pool in blas} == {int(started)}, (blas, started)
    assert _blas_threads().strip() == "2"
