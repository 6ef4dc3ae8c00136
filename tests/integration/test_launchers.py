"""Launchers: the command line of each role made in one place, the SSH launcher's commands
(no SSH needed), and the Ray launcher on this machine when Ray is installed."""
import shlex
import subprocess
import sys

import numpy as np
import pytest

import disthook as torch
from deploy import ssh
from deploy.roles import coordinator_role, worker_role
from disthook import nn

pytestmark = pytest.mark.timeout(240)

HOSTS = """
# a comment line, then hosts
node-a                 workers=1        # the coordinator's host (the first)
admin@node-b  workers=2 python=/opt/v/bin/python dir=/srv/models
node-c  advertise=10.9.8.7
"""


def test_roles_are_the_command_lines_the_processes_take():
    c = coordinator_role("tcp://0.0.0.0:5555", keys="/k", heartbeat=0.25, log_level="INFO")
    assert c.argv("py") == ["py", "-m", "coordinator", "--bind", "tcp://0.0.0.0:5555",
                            "--heartbeat", "0.25", "--keys", "/k", "--log-level", "INFO"]
    w = worker_role("tcp://h:5555", worker_id="h-0", advertise="h", keys="/k",
                    allow_hook_modules=("probes",), context_ttl=60)
    assert w.argv("py") == ["py", "-m", "workers", "--coordinator", "tcp://h:5555", "--bind",
                            "tcp://0.0.0.0:0", "--advertise", "h", "--id", "h-0",
                            "--allow-hook-module", "probes", "--context-ttl", "60",
                            "--keys", "/k"]
    for bad in ("tcp://h", "udp://h:1", "http://h:1", "tcp://h:99999"):
        with pytest.raises(ValueError, match="must look like tcp://HOST:PORT"):
            worker_role(bad)
    # HOST:PORT means tcp, written out in full for the process
    assert worker_role("h:5555").args[:2] == ("--coordinator", "tcp://h:5555")
    # what the roles build, the processes' own parsers take
    from coordinator.server import main as coordinator_main  # noqa: F401 - importable
    help_text = subprocess.run([sys.executable, "-m", "workers", "--help"],
                               capture_output=True, text=True, timeout=60).stdout
    for flag in w.args:
        if flag.startswith("--"):
            assert flag in help_text


def test_the_host_file_and_the_ssh_commands():
    hosts = ssh.parse_hosts(HOSTS)
    assert [h.target for h in hosts] == ["node-a", "admin@node-b", "node-c"]
    assert hosts[0].coordinator and not hosts[1].coordinator
    plan = ssh.commands(hosts, port=6000, keys="/etc/dh")
    assert [what for what, _ in plan] == [
        "coordinator on node-a", "worker 0 on node-a", "worker 0 on admin@node-b",
        "worker 1 on admin@node-b", "worker 0 on node-c"]
    what, argv = plan[0]
    assert argv[:6] == list(ssh.SSH) and argv[6] == "node-a"
    assert shlex.split(argv[7]) == ["exec", "python3", "-m", "coordinator", "--bind",
                                    "tcp://0.0.0.0:6000", "--keys", "/etc/dh"]
    _, argv = plan[3]
    assert argv[6] == "admin@node-b"
    words = shlex.split(argv[7])
    assert words[:4] == ["cd", "/srv/models", "&&", "exec"]
    assert words[4:] == ["/opt/v/bin/python", "-m", "workers", "--coordinator",
                         "tcp://node-a:6000", "--bind", "tcp://0.0.0.0:0", "--advertise",
                         "node-b", "--id", "node-b-1", "--allow-code", "--keys", "/etc/dh"]
    assert "--advertise 10.9.8.7" in plan[4][1][7]


def test_a_path_with_spaces_is_quoted_for_the_remote_shell():
    (host,) = ssh.parse_hosts("n1 dir=/srv/a'b")
    _, argv = ssh.commands([host])[0]
    assert shlex.split(argv[-1])[:2] == ["cd", "/srv/a'b"]


@pytest.mark.parametrize("text, message", [
    ("", "lists no hosts"),
    ("a workers=x", "line 1: workers must be a count, got 'x'"),
    ("a\nb speed=3", "line 2: expected coordinator or one of"),
    ("a coordinator\nb coordinator", "2 hosts are marked coordinator"),
    ("a workers=0", "no host runs a worker"),
])
def test_host_file_errors_name_the_line(text, message):
    with pytest.raises(ValueError, match=message):
        ssh.parse_hosts(text)


def test_launch_hosts_dry_run_prints_the_commands(tmp_path):
    hosts = tmp_path / "hosts.txt"
    hosts.write_text("n1 coordinator workers=2\n")
    run = subprocess.run([sys.executable, "-m", "disthook.cli", "launch", "--hosts",
                          str(hosts), "--bind", "tcp://0.0.0.0:7000", "--dry-run"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == "# coordinator on n1" and len(lines) == 6
    assert "tcp://0.0.0.0:7000" in lines[1] and "tcp://n1:7000" in lines[3]
    bad = subprocess.run([sys.executable, "-m", "disthook.cli", "launch", "--hosts",
                          str(tmp_path / "missing.txt")], capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 2 and "missing.txt" in bad.stderr


def test_the_ray_launcher_trains_like_one_process():
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install disthook[ray])")
    from deploy import ray_launcher
    from disthook.distributed import DistributedOptimizer, connect

    def make():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))

    x, y = torch.randn(10, 8), torch.randint(0, 3, (10,))
    try:
        with ray_launcher.launch(2, port=0, cpus_per_worker=0.5) as launched:
            with connect(launched.address) as cluster:
                cluster.wait_for_workers(2, timeout=120)
                remote = cluster.deploy(make(), stages=2)
                local = make()
                ropt = DistributedOptimizer(torch.optim.SGD, remote.parameters(), lr=0.1)
                lopt = torch.optim.SGD(local.parameters(), lr=0.1)
                for model, opt in ((remote, ropt), (local, lopt)):
                    opt.zero_grad()
                    nn.functional.cross_entropy(model(x), y).backward()
                    opt.step()
                state = remote.state_dict()
                for name, p in local.state_dict().items():
                    np.testing.assert_allclose(state[name].numpy(), p.numpy(), rtol=1e-6)
                assert all(w.id.startswith("ray-") for w in cluster.workers())
                remote.close()
    finally:
        ray.shutdown()


def test_the_kubernetes_manifests_run_the_roles_with_the_key_files():
    yaml = pytest.importorskip("yaml", reason="PyYAML is not installed")
    from pathlib import Path

    k8s = Path(__file__).resolve().parents[2] / "deploy" / "k8s"
    docs = {}
    for name in ("coordinator.yaml", "workers.yaml"):
        for doc in yaml.safe_load_all((k8s / name).read_text()):
            docs[(doc["kind"], doc["metadata"]["name"])] = doc
    assert set(docs) == {("Deployment", "disthook-coordinator"),
                         ("Service", "disthook-coordinator"),
                         ("Service", "disthook-workers"),
                         ("StatefulSet", "disthook-worker")}
    assert docs[("Service", "disthook-workers")]["spec"]["clusterIP"] == "None"  # headless
    helps = {module: subprocess.run([sys.executable, "-m", module, "--help"],
                                    capture_output=True, text=True, timeout=60).stdout
             for module in ("coordinator", "workers")}
    for kind, name in (("Deployment", "disthook-coordinator"),
                       ("StatefulSet", "disthook-worker")):
        pod = docs[(kind, name)]["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        module = container["command"][2]
        for flag in (a for a in container["args"] if a.startswith("--")):
            assert flag in helps[module], (name, flag)
        assert container["args"][container["args"].index("--keys") + 1] == "/keys"
        paths = {item["path"] for item in pod["volumes"][0]["secret"]["items"]}
        assert paths == {"server.key", "server.key_secret", "authorized/server.key",
                         "authorized/client.key"}  # what `disthook keys generate` makes
    worker = docs[("StatefulSet", "disthook-worker")]["spec"]["template"]["spec"]
    args = worker["containers"][0]["args"]
    assert args[args.index("--coordinator") + 1] == "tcp://disthook-coordinator:5555"
    assert args[args.index("--advertise") + 1].startswith("$(POD_NAME).disthook-workers.")


def test_the_python_of_deploy_readme_runs_against_a_launched_cluster_with_keys(tmp_path):
    """deploy/README.md's program, on a cluster launched here with keys/ (the address of
    host-a replaced by the launched one): it runs as written and prints what it says."""
    import re
    import signal
    from pathlib import Path

    from disthook.service.security import generate

    text = (Path(__file__).resolve().parents[2] / "deploy" / "README.md").read_text()
    [code] = re.findall(r"```python\n(.*?)```", text, re.S)
    generate(str(tmp_path / "keys"))
    launch = subprocess.Popen([sys.executable, "-m", "disthook.cli", "launch", "--workers", "2",
                               "--bind", "tcp://127.0.0.1:0", "--keys", "keys/",
                               "--log-level", "WARNING"], cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        address = re.search(r"coordinator (tcp://\S+),", launch.stdout.readline())
        assert address, launch.stderr.read()
        script = tmp_path / "example.py"
        script.write_text(code.replace("tcp://10.0.0.1:5555", address.group(1)))
        run = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                             text=True, timeout=120, check=False)
    finally:
        launch.send_signal(signal.SIGINT)
        try:
            launch.wait(30)
        except subprocess.TimeoutExpired:
            launch.kill()
            launch.wait()
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == ["torch.Size([32, 10])"]
