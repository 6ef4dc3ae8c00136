"""A worker never runs the client's script: a script without the __main__ guard deploys its
classes wherever it defines them (they travel pickled by value); a worker never starts or
attaches to a cluster itself; a worker that dies importing a model's module (a model that
comes as data, its classes by import path) says why in the client's error (issue 18,
item 4)."""
import subprocess
import sys
import textwrap
import time

import pytest

from disthook import nn
from disthook.distributed import WorkerLost, local_cluster

pytestmark = pytest.mark.timeout(180)

SCRIPT = '''
import disthook as torch
from disthook.distributed import connect


class Twice(torch.nn.Module):
    def forward(self, x):
        return x * 2


cluster = connect(ADDRESS)
remote = cluster.deploy(torch.nn.Sequential(Twice(), torch.nn.Linear(3, 3)), stages=2)
print("deployed", remote(torch.randn(2, 3)).shape)
'''

DYING = '''
import os
import sys

import disthook as torch
from disthook.distributed import cluster

if cluster.IN_WORKER:  # the client imports this module too; only a worker dies of it
    sys.stderr.write("dying_layers: cannot open /dev/accelerator0 (no such device)\\n")
    sys.stderr.flush()
    os._exit(3)


class Scale(torch.nn.Module):
    def forward(self, x):
        return x * 0.5
'''


CLUSTER_WORKERS = 2  # the conftest cluster's size


def test_an_unguarded_script_deploys_its_classes_defined_above_the_connect(cluster, tmp_path):
    script = tmp_path / "unguarded.py"
    script.write_text(textwrap.dedent(SCRIPT).replace("ADDRESS", repr(cluster.address)))
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "deployed torch.Size([2, 3])"


def test_a_class_defined_below_the_connect_deploys_too(cluster, tmp_path):
    script = tmp_path / "unguarded_below.py"
    source = textwrap.dedent(SCRIPT).replace("ADDRESS", repr(cluster.address))
    head, cls, tail = source.partition("class Twice")
    body, connect, rest = tail.partition("cluster = connect")
    script.write_text(head + connect + rest.replace("remote = ", cls + body + "remote = ", 1))
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "deployed torch.Size([2, 3])"


def test_connect_and_cluster_refuse_to_run_in_a_worker(monkeypatch):
    from disthook.distributed import cluster as cluster_module

    monkeypatch.setattr(cluster_module, "IN_WORKER", True)
    for call, name in ((lambda: cluster_module.connect("tcp://127.0.0.1:9"), "connect()"),
                       (lambda: cluster_module.Cluster("tcp://127.0.0.1:9"), "Cluster()"),
                       (lambda: cluster_module.local_cluster(1), "local_cluster()")):
        with pytest.raises(RuntimeError, match=r"if __name__ == \"__main__\":") as info:
            call()
        assert str(info.value).startswith(f"{name} was called while a worker imported a "
                                          "module of the model")


def test_a_worker_dying_while_importing_a_model_module_says_why(tmp_path, monkeypatch):
    (tmp_path / "dying_layers.py").write_text(DYING)
    monkeypatch.syspath_prepend(str(tmp_path))  # before the workers start: they get it too
    from dying_layers import Scale

    # a model that comes as data (a shared service's workers take no code): the worker
    # imports the module its class comes from
    with local_cluster(workers=1, allow_code=False) as dying:
        started = time.monotonic()
        with pytest.raises(WorkerLost) as info:
            dying.deploy(nn.Sequential(Scale(), nn.Linear(2, 2)), stages=1)
        assert time.monotonic() - started < 15
        assert "cannot open /dev/accelerator0 (no such device)" in str(info.value)
        assert info.value.stderr[-1] == ("dying_layers: cannot open /dev/accelerator0 "
                                         "(no such device)")
