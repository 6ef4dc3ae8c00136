"""Several hosts on one machine: network namespaces joined by veth pairs through a bridge, on
a private test subnet that exists only inside them. The coordinator runs in one namespace, a
worker in each of two others, over TCP with keys on; the client (in the coordinator's
namespace) deploys a model on 2 stages, trains, and compares with one process. Then one
worker's link is cut and the client must get WorkerLost within 3 heartbeats.

It needs root and ``ip`` (iproute2); it is skipped with the reason otherwise. Everything it
creates is named after this process and removed at the end.
"""
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from disthook.service.endpoint import advertised_address
from disthook.service.security import generate

pytestmark = pytest.mark.timeout(240)

SUBNET = "10.231.{}.{}"  # private, and only inside the namespaces this test makes
HEARTBEAT = 0.3


@pytest.mark.parametrize("bound, advertise, expected", [
    ("tcp://10.0.0.5:7000", None, "tcp://10.0.0.5:7000"),
    ("tcp://0.0.0.0:7000", "node3", "tcp://node3:7000"),
    ("tcp://0.0.0.0:7000", "node3:9000", "tcp://node3:9000"),
    ("tcp://*:7000", "10.1.1.1", "tcp://10.1.1.1:7000"),
])
def test_advertised_address(bound, advertise, expected):
    import logging

    assert advertised_address(bound, advertise, logging.getLogger("t")) == expected


def test_a_wildcard_bind_without_advertise_uses_the_host_name_and_says_so(caplog):
    import logging
    import socket

    log = logging.getLogger("disthook.test")
    with caplog.at_level(logging.WARNING, logger="disthook.test"):
        got = advertised_address("tcp://0.0.0.0:7000", None, log)
    assert got == f"tcp://{socket.gethostname()}:7000"
    assert "without --advertise" in caplog.text


@pytest.mark.parametrize("bad", ["tcp://x:1", "host:port", ":80"])
def test_a_bad_advertise_is_refused(bad):
    import logging

    with pytest.raises(ValueError, match="--advertise takes host or host:port"):
        advertised_address("tcp://0.0.0.0:7000", bad, logging.getLogger("t"))


def ip(*args, check=True):
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30,
                          check=check)


class Hosts:
    """Namespaces ``<tag>-n<i>`` joined through a bridge in ``<tag>-br``; host i has
    address 10.231.<net>.<i+1>."""

    def __init__(self, count: int):
        self.tag = f"dh{os.getpid() % 100000}"
        self.net = os.getpid() % 200 + 20
        self.bridge = f"{self.tag}-br"
        self.names = [f"{self.tag}-n{i}" for i in range(count)]
        self.made: list[str] = []
        self.procs: list[subprocess.Popen] = []

    def up(self) -> None:
        ip("netns", "add", self.bridge)
        self.made.append(self.bridge)
        ip("-n", self.bridge, "link", "add", "dhbr", "type", "bridge")
        ip("-n", self.bridge, "link", "set", "dhbr", "up")
        for i, ns in enumerate(self.names):
            ip("netns", "add", ns)
            self.made.append(ns)
            inner, outer = f"{self.tag}i{i}", f"{self.tag}o{i}"
            ip("link", "add", inner, "type", "veth", "peer", "name", outer)
            ip("link", "set", inner, "netns", ns)
            ip("link", "set", outer, "netns", self.bridge)
            ip("-n", self.bridge, "link", "set", outer, "master", "dhbr")
            ip("-n", self.bridge, "link", "set", outer, "up")
            ip("-n", ns, "addr", "add", f"{self.address(i)}/24", "dev", inner)
            ip("-n", ns, "link", "set", inner, "up")
            ip("-n", ns, "link", "set", "lo", "up")

    def address(self, i: int) -> str:
        return SUBNET.format(self.net, i + 1)

    def cut(self, i: int) -> None:
        """Take host i off the network (its link goes down; its processes live on)."""
        ip("-n", self.names[i], "link", "set", f"{self.tag}i{i}", "down")

    def run(self, i: int, args: list[str], **kwargs) -> subprocess.Popen:
        proc = subprocess.Popen(["ip", "netns", "exec", self.names[i], sys.executable, *args],
                                **kwargs)
        self.procs.append(proc)
        return proc

    def down(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(10)
        for ns in reversed(self.made):
            ip("netns", "del", ns, check=False)


def can_make_namespaces() -> str | None:
    if sys.platform != "linux":
        return "network namespaces are Linux only"
    if os.geteuid() != 0:
        return "needs root to make network namespaces"
    if shutil.which("ip") is None:
        return "needs ip (iproute2)"
    probe = f"dhprobe{os.getpid()}"
    made = ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"cannot make a network namespace here: {made.stderr.strip()}"
    ip("netns", "del", probe, check=False)
    return None


CLIENT = textwrap.dedent("""
    import sys, time
    import numpy as np
    import disthook as torch
    from disthook import nn
    from disthook.distributed import DistributedOptimizer, WorkerLost, connect

    address, keys = sys.argv[1], sys.argv[2]
    def make():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(),
                             nn.Linear(32, 4))
    torch.manual_seed(1)
    x, y = torch.randn(24, 16), torch.randint(0, 4, (24,))
    with connect(address, keys=keys) as cluster:
        cluster.wait_for_workers(2, timeout=60)
        remote = cluster.deploy(make(), stages=2, chunks=2, schedule="1f1b")
        print("hosts", sorted({w[1].rsplit("-", 1)[0] for w in remote.workers()}), flush=True)
        print("addresses", sorted(w.address for w in cluster.workers()), flush=True)
        local = make()
        ropt = DistributedOptimizer(torch.optim.SGD, remote.parameters(), lr=0.1)
        lopt = torch.optim.SGD(local.parameters(), lr=0.1)
        for _ in range(3):
            ropt.zero_grad(); lopt.zero_grad()
            remote.train_step(x, y, nn.functional.cross_entropy)
            nn.functional.cross_entropy(local(x), y).backward()
            ropt.step(); lopt.step()
        state = remote.state_dict()
        diff = max(float(np.abs(state[k].numpy() - v.numpy()).max())
                   for k, v in local.state_dict().items())
        print("max difference", diff, flush=True)
        sys.stdin.readline()  # the test cuts a worker's link now
        started = time.monotonic()
        try:
            with torch.no_grad():
                remote(x)
            print("no error", flush=True)
        except WorkerLost as exc:
            print("lost after", round(time.monotonic() - started, 2), "s:", exc, flush=True)
""")


def test_two_stages_on_two_hosts_with_keys_then_a_cut_link(tmp_path):
    reason = can_make_namespaces()
    if reason:
        pytest.skip(reason)
    keys = str(tmp_path / "keys")
    generate(keys)
    hosts = Hosts(3)
    try:
        hosts.up()
        coordinator = f"tcp://{hosts.address(0)}:5555"
        log = open(tmp_path / "servers.txt", "w")
        hosts.run(0, ["-m", "coordinator", "--bind", coordinator, "--keys", keys,
                      "--heartbeat", str(HEARTBEAT), "--log-level", "INFO"],
                  stdout=subprocess.DEVNULL, stderr=log)
        for i in (1, 2):  # a wildcard bind, told which address to give out
            hosts.run(i, ["-m", "workers", "--coordinator", coordinator, "--bind",
                          "tcp://0.0.0.0:0", "--advertise", hosts.address(i), "--keys", keys,
                          "--id", f"host{i}-w", "--log-level", "INFO"],
                      stdout=subprocess.DEVNULL, stderr=log)
        client = hosts.run(0, ["-c", CLIENT, coordinator, keys], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lines = []
        while len(lines) < 3:
            line = client.stdout.readline()
            assert line, f"client ended early: {client.stderr.read()}\n" \
                         f"servers: {(tmp_path / 'servers.txt').read_text()}"
            lines.append(line.strip())
        assert lines[0] == "hosts ['host1', 'host2']"
        for i in (1, 2):  # the advertised addresses, not 0.0.0.0
            assert f"tcp://{hosts.address(i)}:" in lines[1]
        assert float(lines[2].split()[-1]) < 1e-5, lines[2]
        hosts.cut(2)
        client.stdin.write("go\n")
        client.stdin.flush()
        out, err = client.communicate(timeout=60)
        assert out.startswith("lost after"), out + err
        waited = float(out.split()[2])
        assert waited < 3 * HEARTBEAT + 2.0, out
        assert "host2-w" in out
    finally:
        hosts.down()
    leftover = ip("netns", "list").stdout
    assert hosts.tag not in leftover
