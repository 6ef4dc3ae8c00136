"""A local cluster left open (unreferenced, or still open when the interpreter exits) tells
its processes to stop at once: no one asks its coordinator to shut them down, so waiting
for them first only added the grace (5 s) to the exit of a program that never closed it."""
import gc
import subprocess

from disthook.distributed.cluster import Cluster


class RunningRole:
    """A process that runs until it is signalled, as a role does; what is done to it is
    written to ``log``."""

    stdout = None

    def __init__(self, name: str, log: list):
        self.name, self.log, self.returncode = name, log, None

    def poll(self):
        return self.returncode

    def wait(self, timeout=None):
        self.log.append((self.name, "wait"))
        if self.returncode is None:
            raise subprocess.TimeoutExpired(self.name, timeout)
        return self.returncode

    def terminate(self):
        self.log.append((self.name, "terminate"))
        self.returncode = -15

    def kill(self):
        self.log.append((self.name, "kill"))
        self.returncode = -9


def test_an_unreferenced_cluster_tells_its_processes_to_stop_before_waiting():
    log = []
    cluster = Cluster("tcp://127.0.0.1:9", _processes=[RunningRole("coordinator", log),
                                                        RunningRole("w1", log)])
    del cluster
    gc.collect()
    assert log[:2] == [("coordinator", "terminate"), ("w1", "terminate")]
    assert {what for _, what in log[2:]} == {"wait"}  # then reaped, none killed
