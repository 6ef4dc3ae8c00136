"""A deployer that goes without ``close()`` (its script ends, it is killed inside a call)
leaves nothing loaded on the workers: nobody else can reach an unpublished model's stages,
so they are unloaded when its connection closes. A published model stays (the clients
attached to it use it on). Before, every such session left its stages loaded, with their connections, for the
workers' life: 14 stages per worker after 40 sessions of a shared cluster."""
import os
import signal
import subprocess
import sys
import textwrap

import pytest
from clusters import wait_until, worker_statuses

import disthook as torch
from disthook import nn
from disthook.distributed import local_cluster

pytestmark = pytest.mark.timeout(180)

SESSION = textwrap.dedent("""
    import sys, time
    import disthook as torch
    from disthook import nn
    from disthook.distributed import connect

    cluster = connect(sys.argv[1])
    name = sys.argv[3] or None
    model = cluster.deploy(nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3)),
                           stages=2, name=name)
    model(torch.ones(2, 4)).sum().item()
    if name:  # published: ends once told (others attach meanwhile)
        print("published", flush=True)
        sys.stdin.readline()
    if sys.argv[2] == "killed":  # killed while the worker waits for its hook's answer
        model[2].register_forward_hook(lambda *a: (print("in hook", flush=True),
                                                   time.sleep(60)))
        model(torch.ones(2, 4))
    print("done", flush=True)  # and the script ends without close()
""")


@pytest.fixture(scope="module")
def cluster():
    with local_cluster(workers=2) as c:
        yield c


def _session(cluster, how: str, name: str = "", meanwhile=None) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.Popen([sys.executable, "-c", SESSION, cluster.address, how, name],
                            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        if name:
            assert proc.stdout.readline().strip() == "published"
            meanwhile()
            proc.stdin.write("end\n")
            proc.stdin.flush()
        line = proc.stdout.readline().strip()
        assert line == ("in hook" if how == "killed" else "done"), line
        if how == "killed":
            os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(60)
        proc.stdin.close()
        proc.stdout.close()


def _stages(cluster) -> list[str]:
    return sorted(st for s in worker_statuses(cluster).values() for st in s["stages"])


@pytest.mark.parametrize("how", ["ended", "killed"])
def test_a_deployer_gone_without_close_leaves_no_stage_loaded(cluster, how):
    for _ in range(3):
        _session(cluster, how)
    wait_until(lambda: _stages(cluster) == [], 10)
    # and the workers serve on
    with torch.no_grad():
        model = cluster.deploy(nn.Sequential(nn.Linear(4, 2), nn.Tanh(), nn.Linear(2, 1)),
                               stages=2)
        assert model(torch.ones(1, 4)).shape == (1, 1)
        model.close()


def test_a_published_model_stays_for_its_clients_when_its_deployer_ends(cluster):
    attached = []
    _session(cluster, "ended", name="t6-stays",
             meanwhile=lambda: attached.append(cluster.attach("t6-stays")))
    x = torch.ones(2, 4)
    want = attached[0](x).detach().numpy().copy()
    for _ in range(3):  # past the workers' handling of the deployer's connection closing
        assert (attached[0](x).detach().numpy() == want).all()
    assert len(_stages(cluster)) == 2
    attached[0].close()
