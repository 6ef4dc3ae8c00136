"""The tests' own process computes on one thread (tests/conftest.py): numpy's BLAS and
torch's threads, while the processes the tests start keep the environment's settings."""
import os
import subprocess
import sys

import pytest

threadpoolctl = pytest.importorskip("threadpoolctl")
try:  # at import, as the parity modules import it: before this module's first test
    import torch
except ImportError:
    torch = None


def test_numpy_blas_computes_on_one_thread_here():
    blas = [pool for pool in threadpoolctl.threadpool_info() if pool["user_api"] == "blas"]
    assert blas and all(pool["num_threads"] == 1 for pool in blas), blas


@pytest.mark.skipif(torch is None, reason="torch is not installed")
def test_torch_computes_on_one_thread_here_once_imported():
    assert torch.get_num_threads() == 1


def test_a_process_started_here_keeps_the_environments_setting():
    asked = {name: os.environ[name] for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")
             if name in os.environ}
    code = ("import numpy, threadpoolctl; print(max(p['num_threads'] for p in "
            "threadpoolctl.threadpool_info() if p['user_api'] == 'blas'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env=dict(os.environ, OPENBLAS_NUM_THREADS="2"))
    assert out.stdout.strip() == "2", (out.stdout, out.stderr, asked)
