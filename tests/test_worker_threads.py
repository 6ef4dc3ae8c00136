"""A worker's BLAS and OpenMP threads: ``python -m workers --threads N`` sets them before
numpy loads, and ``local_cluster`` gives each worker its share of the cores unless the
environment already sets a count."""
import os

import pytest

from deploy import threads
from deploy.roles import worker_role


@pytest.fixture
def clean_env(monkeypatch):
    for var in threads.THREAD_VARS:
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


@pytest.mark.parametrize("argv", [["--threads", "3"], ["--bind", "x", "--threads=3"]])
def test_threads_from_the_command_line_set_every_variable(clean_env, argv):
    threads.apply_from_argv(argv)
    assert {os.environ[var] for var in threads.THREAD_VARS} == {"3"}
    assert threads.blas_threads() == 3


@pytest.mark.parametrize("argv", [[], ["--threads"], ["--threads", "0"], ["--threads", "x"],
                                  ["--threads=-2"]])
def test_no_or_a_wrong_count_sets_nothing(clean_env, argv):
    # the worker's argument parser then says what is wrong (a wrong count never applies)
    threads.apply_from_argv(argv)
    assert not any(os.environ.get(var) for var in threads.THREAD_VARS)
    assert threads.blas_threads() is None


def test_a_share_of_the_cores_unless_the_environment_sets_a_count(clean_env):
    cores = len(os.sched_getaffinity(0))
    assert threads.share_of_cores(1) == cores
    assert threads.share_of_cores(cores) == 1
    assert threads.share_of_cores(cores * 4) == 1  # never below one
    clean_env.setenv("OMP_NUM_THREADS", "2")
    assert threads.share_of_cores(1) is None  # the user's count is kept


def test_a_worker_role_carries_its_count():
    args = worker_role("tcp://127.0.0.1:5555", threads=4).args
    assert args[args.index("--threads") + 1] == "4"
    assert "--threads" not in worker_role("tcp://127.0.0.1:5555").args


def test_the_worker_refuses_a_wrong_count(capsys):
    from workers.command_line import main

    with pytest.raises(SystemExit):
        main(["--coordinator", "tcp://127.0.0.1:5555", "--threads", "0"])
    assert "expected a whole number of threads >= 1, got '0'" in capsys.readouterr().err
