"""A worker never runs the client's connect()/deploy(): a worker importing a script without
the __main__ guard stops at the line that connects, keeping the classes defined above it (the
script deploys, as written); a class defined below that line fails at once with the advice,
and the workers serve on;
a worker that dies importing a model's module says why in the client's error (issue 18,
item 4)."""
import subprocess
import sys
import textwrap
import time

import pytest

import disthook as torch
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


CLUSTER_WORKERS = 2  # the conftest cluster's size; its workers import client scripts


def test_an_unguarded_script_deploys_its_classes_defined_above_the_connect(cluster, tmp_path):
    script = tmp_path / "unguarded.py"
    script.write_text(textwrap.dedent(SCRIPT).replace("ADDRESS", repr(cluster.address)))
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "deployed torch.Size([2, 3])"


def test_a_class_below_the_connect_fails_fast_with_the_advice_and_the_workers_serve_on(
        cluster, tmp_path):
    script = tmp_path / "unguarded_below.py"
    source = textwrap.dedent(SCRIPT).replace("ADDRESS", repr(cluster.address))
    head, cls, tail = source.partition("class Twice")
    body, connect, rest = tail.partition("cluster = connect")
    script.write_text(head + connect + rest.replace("remote = ", cls + body + "remote = ", 1))
    started = time.monotonic()
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, check=False)
    took = time.monotonic() - started
    assert proc.returncode != 0, proc.stdout
    assert took < 15, f"took {took:.1f} s"  # not the 30 s of a request's deadline
    assert "the worker imports it only up to the line that starts or attaches to the cluster" \
        in proc.stderr
    assert 'define it above, or put the script\'s code under if __name__ == "__main__":' \
        in proc.stderr
    # the same workers deploy and run another model at once
    assert all(w.alive for w in cluster.workers())
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    remote = cluster.deploy(net, stages=2)
    x = torch.randn(5, 3)
    np_out, np_want = remote(x).detach().numpy(), net(x).detach().numpy()
    assert np_out.shape == (5, 2) and abs(np_out - np_want).max() < 1e-6
    remote.close()


def test_connect_and_cluster_refuse_to_run_in_a_worker(monkeypatch):
    from disthook.distributed import cluster as cluster_module

    monkeypatch.setattr(cluster_module, "IN_WORKER", True)
    for call, name in ((lambda: cluster_module.connect("tcp://127.0.0.1:9"), "connect()"),
                       (lambda: cluster_module.Cluster("tcp://127.0.0.1:9"), "Cluster()"),
                       (lambda: cluster_module.local_cluster(1), "local_cluster()")):
        with pytest.raises(RuntimeError, match=r"if __name__ == \"__main__\":") as info:
            call()
        assert str(info.value).startswith(f"{name} was called while a worker imported")


def test_a_worker_dying_while_importing_a_model_module_says_why(tmp_path, monkeypatch):
    (tmp_path / "dying_layers.py").write_text(DYING)
    monkeypatch.syspath_prepend(str(tmp_path))  # before the workers start: they get it too
    from dying_layers import Scale

    with local_cluster(workers=1) as dying:
        started = time.monotonic()
        with pytest.raises(WorkerLost) as info:
            dying.deploy(nn.Sequential(Scale(), nn.Linear(2, 2)), stages=1)
        assert time.monotonic() - started < 15
        assert "cannot open /dev/accelerator0 (no such device)" in str(info.value)
        assert info.value.stderr[-1] == ("dying_layers: cannot open /dev/accelerator0 "
                                         "(no such device)")
