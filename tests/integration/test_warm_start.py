"""Local roles forked from a preloaded process (deploy.warm) behave as roles started cold:
the same numbers, thread counts, exit codes, start-up errors and lifetimes."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from clusters import free_port, wait_until

import disthook as torch
from deploy import pids, warm
from deploy.local import _catches, spawn, why_it_ended
from deploy.roles import Role, worker_role
from disthook.distributed import local_cluster

pytestmark = [pytest.mark.timeout(180),
              pytest.mark.skipif(not sys.platform.startswith("linux"),
                                 reason="local roles start warm on Linux only")]


@pytest.fixture(params=["warm", "cold"])
def start(request, monkeypatch):
    """Each test once with warm starts and once with cold ones."""
    monkeypatch.setenv(warm.ENV_SWITCH, "1" if request.param == "warm" else "0")
    return request.param


def parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def gone(pid: int, within: float = 20.0) -> bool:
    """Whether process ``pid`` ends (or is a zombie of another parent) within ``within`` s."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if pids.gone(pid):
            return True
        time.sleep(0.05)
    return False


class BlasThreads(torch.nn.Module):
    """Appends a column holding how many threads the BLAS of the process it runs in has."""

    def forward(self, x):
        from threadpoolctl import threadpool_info

        blas = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
        return torch.cat([x, torch.full((x.shape[0], 1), float(blas[0]))], dim=1)


def run_probe(cluster):
    """The forward and the input's gradient of a layer deployed on ``cluster`` (one stage,
    so it runs there), and that worker's BLAS threads."""
    torch.manual_seed(0)
    model = cluster.deploy(torch.nn.Sequential(torch.nn.Linear(6, 3), BlasThreads()),
                           stages=1)
    x = torch.tensor(np.linspace(-1, 1, 12, dtype=np.float32).reshape(2, 6),
                     requires_grad=True)
    out = model(x)
    (out[:, :3] * torch.arange(3.0)).sum().backward()
    result = out[:, :3].detach().numpy().copy(), x.grad.numpy().copy(), int(out[0, 3].item())
    from disthook.distributed.placed import deployment_of

    deployment_of(model).close()
    return result


def test_warm_workers_are_children_of_the_preloaded_process_and_compute_as_cold_ones(
        monkeypatch):
    pytest.importorskip("threadpoolctl")
    results = {}
    for mode in ("1", "0"):
        monkeypatch.setenv(warm.ENV_SWITCH, mode)
        with local_cluster(workers=1) as cluster:
            parents = {parent_of(p.pid) for p in cluster._processes}
            kinds = {type(p).__name__ for p in cluster._processes}
            results[mode] = run_probe(cluster)
        if mode == "1":
            assert kinds == {"WarmProcess"}
            assert len(parents) == 1 and parents <= set(warm.preloaded_pids())
        else:
            assert kinds == {"Popen"} and parents == {os.getpid()}
    for warm_part, cold_part in zip(results["1"], results["0"]):
        np.testing.assert_array_equal(warm_part, cold_part)


def test_each_thread_setting_has_its_preloaded_process_and_the_counts_of_a_cold_start(
        monkeypatch):
    """numpy's BLAS takes its thread count once, as it loads: a role forked from a process
    that loaded it with another count would keep that one."""
    pytest.importorskip("threadpoolctl")
    from deploy.threads import THREAD_VARS

    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one core: every thread setting gives one thread")
    for var in THREAD_VARS:
        monkeypatch.delenv(var, raising=False)
    seen, parents = {}, {}
    for mode in ("1", "0"):
        monkeypatch.setenv(warm.ENV_SWITCH, mode)
        before = set(warm.preloaded_pids())
        for threads in (None, 1):
            with local_cluster(workers=1, threads=threads) as cluster:
                seen[mode, threads] = run_probe(cluster)[2]
                parents[mode, threads] = parent_of(cluster._processes[1].pid)  # w1's
        if mode == "1":  # a preloaded process for each setting, started on first need
            assert {parents["1", None], parents["1", 1]} <= set(warm.preloaded_pids())
            assert len(set(warm.preloaded_pids()) - before) <= 2
    assert seen["1", 1] == seen["0", 1] == 1
    assert seen["1", None] == seen["0", None] > 1
    assert parents["1", None] != parents["1", 1]
    assert parents["0", None] == parents["0", 1] == os.getpid()
    keys = {warm.start_key(sys.executable, dict(os.environ, OMP_NUM_THREADS=n))
            for n in ("1", "2")}
    assert len(keys) == 2


def test_exit_codes_and_signals_are_told_as_popen_tells_them(start):
    role = worker_role(f"tcp://127.0.0.1:{free_port()}", bind="tcp://127.0.0.1:0",
                       log_level="WARNING")
    failing = spawn(Role("workers", ("--coordinator", "tcp://127.0.0.1:1", "--bind", "x")),
                    subprocess.DEVNULL)
    killed, stopped = spawn(role.named("w1")), spawn(role.named("w2"))
    assert type(killed).__name__ == ("WarmProcess" if start == "warm" else "Popen")
    try:
        assert failing.wait(60) == 1 and failing.returncode == 1
        assert killed.poll() is None and stopped.poll() is None
        with pytest.raises(subprocess.TimeoutExpired):
            killed.wait(0.1)
        killed.kill()
        assert killed.wait(20) == -signal.SIGKILL
        wait_until(lambda: _catches(stopped.pid, signal.SIGTERM), 60)
        stopped.terminate()
        assert stopped.wait(20) == 0  # a role stops cleanly on SIGTERM
        killed.kill()  # ended already: nothing happens
        assert killed.poll() == -signal.SIGKILL
    finally:
        for proc in (failing, killed, stopped):
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)


def test_a_role_that_fails_at_start_says_why_warm_as_cold(start, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    proc = spawn(Role("workers", ("--coordinator", "tcp://127.0.0.1:1", "--bind", "nowhere")))
    proc.wait(60)
    said = why_it_ended(proc)
    assert said.startswith("exited with code 1 during start-up; its last stderr lines:"), said
    assert "--bind must look like tcp://HOST:PORT" in said


def test_warm_start_off_starts_cold(monkeypatch):
    monkeypatch.setenv(warm.ENV_SWITCH, "0")
    assert not warm.enabled()
    before = set(warm.preloaded_pids())
    with local_cluster(workers=1) as cluster:
        assert all(isinstance(p, subprocess.Popen) for p in cluster._processes)
        assert {parent_of(p.pid) for p in cluster._processes} == {os.getpid()}
    assert set(warm.preloaded_pids()) == before


def test_the_preloaded_process_and_its_roles_end_with_the_launcher(tmp_path):
    """A client killed with SIGKILL: its preloaded process sees its socket close and ends,
    and the roles forked from it, whose parent it was, end after it."""
    script = tmp_path / "client.py"
    script.write_text(textwrap.dedent("""
        import time
        from deploy import warm
        from disthook.distributed import local_cluster
        c = local_cluster(workers=2)
        print(" ".join(str(p) for p in [*warm.preloaded_pids(),
                                         *(p.pid for p in c._processes)]), flush=True)
        time.sleep(600)
    """))
    env = dict(os.environ, **{warm.ENV_SWITCH: "1"})
    client = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                              text=True, env=env)
    try:
        pids = [int(p) for p in client.stdout.readline().split()]
        assert len(pids) == 4  # the preloaded process, the coordinator, two workers
        assert {parent_of(pid) for pid in pids[1:]} == {pids[0]}
        client.kill()
        client.wait(10)
        assert all(gone(pid) for pid in pids)
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()


def test_a_dead_preloaded_process_leaves_the_next_role_to_start_cold(monkeypatch):
    monkeypatch.setenv(warm.ENV_SWITCH, "1")
    monkeypatch.setenv("DISTHOOK_TEST_OWN_PRELOAD", str(time.monotonic()))  # a fresh one
    role = worker_role(f"tcp://127.0.0.1:{free_port()}", bind="tcp://127.0.0.1:0")
    first = spawn(role.named("w1"), subprocess.DEVNULL)
    try:
        preloaded = parent_of(first.pid)
        assert preloaded in warm.preloaded_pids()
        os.kill(preloaded, signal.SIGKILL)
        assert first.wait(30) == warm.LOST_STATUS  # it stopped: its parent is gone
        second = spawn(role.named("w2"), subprocess.DEVNULL)
        assert isinstance(second, subprocess.Popen)
        second.kill()
        second.wait(10)
    finally:
        if first.poll() is None:
            first.kill()


def test_idle_preloaded_processes_beyond_the_last_used_are_ended(monkeypatch):
    """Each environment a program's roles had would otherwise keep a preloaded process to
    the program's end."""
    monkeypatch.setenv(warm.ENV_SWITCH, "1")
    monkeypatch.setattr(warm, "IDLE_KEPT", 1)
    role = worker_role(f"tcp://127.0.0.1:{free_port()}", bind="tcp://127.0.0.1:0")
    parents = []
    for n in range(2):
        monkeypatch.setenv("DISTHOOK_TEST_OWN_PRELOAD", f"{time.monotonic()}-{n}")
        proc = spawn(role.named(f"w{n}"), subprocess.DEVNULL)
        parents.append(parent_of(proc.pid))
        if n == 0:
            proc.terminate()
            proc.wait(20)
        else:  # the first, idle, ended when the second was started
            assert gone(parents[0]) and parents[0] not in warm.preloaded_pids()
            monkeypatch.setenv("DISTHOOK_TEST_OWN_PRELOAD", "a third")
            third = spawn(role.named("w3"), subprocess.DEVNULL)  # the second one is busy
            assert parents[1] in warm.preloaded_pids() and not pids.gone(parents[1])
            for each in (proc, third):
                each.kill()
                each.wait(20)


def test_a_fork_of_the_launcher_holds_none_of_its_preloaded_processes(monkeypatch):
    """Its copy of a preloaded process's socket would keep that one, and its roles, alive
    after the launcher is gone."""
    monkeypatch.setenv(warm.ENV_SWITCH, "1")
    role = worker_role(f"tcp://127.0.0.1:{free_port()}", bind="tcp://127.0.0.1:0")
    proc = spawn(role.named("w1"), subprocess.DEVNULL)
    try:
        sockets = {os.fstat(p.sock.fileno()).st_ino
                   for p in warm._preloaded.values() if p is not None and not p.lost}
        assert sockets
        read_end, write_end = os.pipe()
        child = os.fork()
        if child == 0:  # the fork: which of the launcher's sockets does it hold?
            held = b"0"
            for fd in os.listdir("/proc/self/fd"):
                try:
                    held = b"1" if os.fstat(int(fd)).st_ino in sockets else held
                except OSError:
                    pass
            os.write(write_end, held)
            os._exit(0)
        os.close(write_end)
        assert os.read(read_end, 1) == b"0"
        os.close(read_end)
        os.waitpid(child, 0)
    finally:
        proc.kill()
        proc.wait(20)


def test_a_removed_working_directory_starts_the_role_cold(tmp_path, monkeypatch):
    monkeypatch.setenv(warm.ENV_SWITCH, "1")
    monkeypatch.setattr(sys, "path", [os.path.abspath(p) for p in sys.path if p])
    gone_dir = tmp_path / "gone"
    gone_dir.mkdir()
    monkeypatch.chdir(gone_dir)
    gone_dir.rmdir()
    proc = spawn(Role("workers", ("--coordinator", "tcp://127.0.0.1:1", "--bind", "x")),
                 subprocess.DEVNULL)
    assert isinstance(proc, subprocess.Popen)
    assert proc.wait(60) == 1
