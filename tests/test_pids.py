"""deploy.pids.gone: whether a process still runs, a zombie counted as ended."""
import os
import subprocess
import sys
import time

from deploy.pids import gone


def test_a_running_process_an_ended_one_and_a_zombie():
    assert not gone(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 30
    while not gone(child.pid):  # ended, its status not taken yet: a zombie
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert os.path.exists(f"/proc/{child.pid}") or sys.platform != "linux"
    child.wait()
    assert gone(child.pid)  # reaped: no such process
