"""Where the environment turns bytecode files off, the processes a test run starts share a
bytecode directory of the run's own (removed at the end), while the pytest processes keep the
environment's setting, so that they read the bytecode installed with torch and numpy instead
of compiling them again (tests/conftest.py)."""
import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent
REPORT = '''import os, subprocess, sys
sys.path.insert(0, {tests!r})
import conftest
child = subprocess.run([sys.executable, "-c", "import sys; print(sys.pycache_prefix)"],
                       capture_output=True, text=True, check=True).stdout.strip()
print(sys.pycache_prefix, sys.dont_write_bytecode, child,
      os.path.isdir(child), "PYTHONDONTWRITEBYTECODE" in os.environ)
'''


def _start_of_run(**settings: str) -> list[str]:
    """What a pytest process sees after the conftest ran: its own prefix, whether it writes
    no bytecode, the prefix of a process it starts, whether that directory exists, and
    whether its children would be told to write no bytecode."""
    env = {key: value for key, value in os.environ.items()
           if key not in ("PYTHONPYCACHEPREFIX", "PYTHONDONTWRITEBYTECODE",
                          "DISTHOOK_TEST_BYTECODE_DIR")}
    proc = subprocess.run([sys.executable, "-c", REPORT.format(tests=str(TESTS))],
                          env={**env, **settings}, capture_output=True, text=True,
                          timeout=60, check=True)
    return proc.stdout.split()


def test_the_run_keeps_the_setting_and_its_children_share_a_directory_removed_at_the_end():
    own, no_writes, child, existed, children_told_not_to_write = _start_of_run(
        PYTHONDONTWRITEBYTECODE="1")
    assert (own, no_writes) == ("None", "True")  # torch's installed bytecode is read
    assert Path(child).name.startswith("disthook-test-bytecode-") and existed == "True"
    assert children_told_not_to_write == "False"
    assert not Path(child).exists()  # removed when the run ended


def test_an_xdist_worker_started_with_the_runs_directory_gives_it_up_for_itself(tmp_path):
    own, no_writes, child, _, _ = _start_of_run(
        PYTHONPYCACHEPREFIX=str(tmp_path), DISTHOOK_TEST_BYTECODE_DIR=str(tmp_path))
    assert (own, no_writes) == ("None", "True")
    assert child == str(tmp_path)  # the clusters it starts still share the run's directory


def test_a_directory_the_user_chose_is_left_as_it_is(tmp_path):
    own, no_writes, child, _, _ = _start_of_run(PYTHONPYCACHEPREFIX=str(tmp_path))
    assert (own, no_writes, child) == (str(tmp_path), "False", str(tmp_path))
