"""Threads in a test run (tests/conftest.py): where the environment sets no count, every
process of the run computes on one thread (the variables set once, inherited by all), so
that this process and the workers it starts round alike; torch computes on one thread in
the tests' own process."""
import os
import subprocess
import sys

import pytest

from deploy.threads import THREAD_VARS

try:  # at import, as the parity modules import it: before this module's first test
    import torch
except ImportError:
    torch = None

RUN_SET_THEM = os.environ.get("DISTHOOK_TEST_SET_THREADS") == "1"


@pytest.mark.skipif(torch is None, reason="torch is not installed")
def test_torch_computes_on_one_thread_here_once_imported():
    assert torch.get_num_threads() == 1


def _blas_threads_of_a_started_process() -> int:
    code = ("import numpy, threadpoolctl; print(max(p['num_threads'] for p in "
            "threadpoolctl.threadpool_info() if p['user_api'] == 'blas'))")
    return int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              check=True).stdout)


def test_this_process_and_the_processes_it_starts_compute_on_the_same_blas_threads():
    threadpoolctl = pytest.importorskip("threadpoolctl")
    here = {pool["num_threads"] for pool in threadpoolctl.threadpool_info()
            if pool["user_api"] == "blas"}
    assert here == {_blas_threads_of_a_started_process()}
    if RUN_SET_THEM:
        assert here == {1} and {os.environ[var] for var in THREAD_VARS} == {"1"}


def _omp_after_loading_the_conftest(**thread_vars) -> str:
    """OMP_NUM_THREADS in a fresh process, after tests/conftest.py has loaded there with no
    thread variable in its environment but ``thread_vars``."""
    tests = os.path.dirname(os.path.abspath(__file__))
    env = {k: v for k, v in os.environ.items()
           if k not in THREAD_VARS and k != "DISTHOOK_TEST_SET_THREADS"}
    code = ("import importlib.util, os, sys; sys.path.insert(0, sys.argv[1]); "
            "spec = importlib.util.spec_from_file_location('suite_conftest', "
            "os.path.join(sys.argv[1], 'conftest.py')); "
            "spec.loader.exec_module(importlib.util.module_from_spec(spec)); "
            "print(os.environ.get('OMP_NUM_THREADS'))")
    out = subprocess.run([sys.executable, "-c", code, tests], capture_output=True, text=True,
                         env={**env, **thread_vars}, check=False)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_a_run_sets_one_thread_where_the_environment_sets_none_and_keeps_a_users_count():
    assert _omp_after_loading_the_conftest() == "1"
    assert _omp_after_loading_the_conftest(OPENBLAS_NUM_THREADS="2") == "None"
