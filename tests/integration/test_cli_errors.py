"""What the command line says when something is off: one line that says what to do, as a
newcomer meets it (nothing listening, a busy port, a bad option). Each command's start-up
path runs as a process here at least once, its first line read; what only its arguments decide
runs through the command's ``main`` in this process (``in_process``). Every process started
here is reaped."""
import socket
import subprocess
import sys
import time

import pytest
import zmq
from clusters import free_port

from disthook import cli
from disthook.distributed import ClusterError, connect, local_cluster

pytestmark = pytest.mark.timeout(120)

CLI = [sys.executable, "-m", "disthook.cli"]


def disthook(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout,
                          check=False)


def in_process(capsys, *args: str, main=cli.main) -> tuple[int, str, str]:
    """``main(args)`` here (the command's arguments and what they decide, without a process's
    start-up): its exit status (argparse's errors exit 2), stdout and stderr."""
    try:
        code = main(list(args))
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def held_port():
    """An address another process (here: a plain socket) listens at."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        yield f"tcp://127.0.0.1:{held.getsockname()[1]}"


def test_status_with_nothing_there_says_how_to_start_one_at_once():
    address = f"tcp://127.0.0.1:{free_port()}"
    started = time.monotonic()
    run = disthook("status", "--coordinator", address)
    assert run.returncode == 1
    assert run.stderr.splitlines() == [
        f"disthook status: no coordinator at {address}: nothing listens there (connection "
        f"refused); start one with `disthook launch --bind {address}`, or check the address"]
    assert time.monotonic() - started < 20  # the interpreter's start-up, not a 5 s wait


def test_status_hint_names_the_command_line_option_for_keys():
    with zmq.Context() as ctx, ctx.socket(zmq.ROUTER) as mute:  # listens, never answers
        mute.setsockopt(zmq.LINGER, 0)
        address = f"tcp://127.0.0.1:{mute.bind_to_random_port('tcp://127.0.0.1')}"
        run = disthook("status", "--coordinator", address, "--timeout", "0.5")
    assert run.returncode == 1
    (line,) = run.stderr.splitlines()
    assert line.startswith(f"disthook status: no coordinator at {address}: something listens "
                           "there but no answer to a status request within 0.5 s")
    assert line.endswith("if the cluster runs with keys, pass --keys DIR")


@pytest.mark.parametrize("bad", ["0", "-1", "soon"])
def test_status_timeout_must_be_seconds_above_zero(bad, capsys):
    code, _, err = in_process(capsys, "status", "--timeout", bad)
    assert code == 2
    assert err.splitlines()[-1].startswith("disthook status: error: argument --timeout:")


def test_status_and_connect_take_host_port_and_reject_other_schemes(cluster, capsys):
    bare = cluster.address.removeprefix("tcp://")
    with connect(bare) as other:
        assert len(other.workers()) == len(cluster.workers())
    run = disthook("status", "--coordinator", bare)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith(f"coordinator {cluster.address}")
    code, _, err = in_process(capsys, "status", "--coordinator", "http://127.0.0.1:1")
    assert code == 1
    assert err.splitlines() == [
        "disthook status: --coordinator must look like tcp://HOST:PORT (e.g. "
        "tcp://127.0.0.1:5555) or ipc://PATH, got 'http://127.0.0.1:1'"]


def test_launch_on_a_busy_port_is_one_line(held_port):
    run = disthook("launch", "--workers", "1", "--bind", held_port)
    assert run.returncode == 1
    assert run.stderr.splitlines() == [
        f"disthook launch: {held_port} is in use: another process listens there (a cluster "
        "already running?); pick another port with --bind (tcp://127.0.0.1:0 picks a free "
        "one), or stop what holds it"]


def test_launch_threads_are_for_local_workers(tmp_path, capsys):
    code, _, err = in_process(capsys, "launch", "--threads", "none")
    assert code == 2
    assert "expected 'share' or a whole number >= 1, got 'none'" in err
    hosts = tmp_path / "hosts"
    hosts.write_text("localhost\n")
    code, _, err = in_process(capsys, "launch", "--threads", "share", "--hosts", str(hosts),
                              "--dry-run")
    assert code == 1
    assert "--threads sets the threads of local workers" in err


def test_coordinator_on_a_busy_port_is_one_line(held_port):
    run = disthook("coordinator", "--bind", held_port)
    assert run.returncode == 1
    assert run.stderr.splitlines() == [
        f"disthook coordinator: {held_port} is in use: another process listens there (a "
        "cluster already running?); pick another port with --bind (tcp://127.0.0.1:0 picks a "
        "free one), or stop what holds it"]


def test_a_coordinator_that_cannot_start_gives_its_reason_to_local_cluster(held_port,
                                                                        monkeypatch):
    from disthook.distributed import cluster as cluster_module

    monkeypatch.setattr(cluster_module, "check_free", lambda address: None)  # as in a race
    port = int(held_port.rsplit(":", 1)[1])
    with pytest.raises(ClusterError, match=r"the coordinator \(pid \d+\) exited with code 1 "
                                           "before announcing its address; its last stderr "
                                           "lines:\n  disthook coordinator: "
                                           f"{held_port} is in use"):
        local_cluster(workers=1, port=port)


def test_log_level_has_choices(capsys):
    # coordinator: a role, run as its own process (python -m coordinator) whatever the
    # command line; launch: parsed by the CLI itself
    run = disthook("coordinator", "--log-level", "loud")
    assert run.returncode == 2
    assert "argument --log-level: invalid choice" in run.stderr.splitlines()[-1]
    assert "DEBUG,INFO,WARNING,ERROR" in disthook("coordinator", "--help").stdout
    code, _, err = in_process(capsys, "launch", "--log-level", "loud")
    assert code == 2 and "argument --log-level: invalid choice" in err.splitlines()[-1]
    code, out, _ = in_process(capsys, "launch", "--help")
    assert code == 0 and "DEBUG,INFO,WARNING,ERROR" in out


def test_demo_seed_hooks_runs_the_tensor_hook_examples():
    run = disthook("demo", "--seed-hooks")
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[0] == ("1. y.register_hook(print); z = torch.mean(y); "
                                          "z.backward()")


def test_a_worker_takes_the_coordinator_as_host_port_and_says_what_is_wrong_in_one_line(
        held_port, capsys):
    from workers.command_line import main as worker_main

    worker = [sys.executable, "-m", "workers"]
    run = subprocess.run([*worker, "--coordinator", "http://x:1"], capture_output=True,
                         text=True, timeout=60)
    assert (run.returncode, run.stderr.splitlines()) == (1, [
        "disthook worker: --coordinator must look like tcp://HOST:PORT (e.g. "
        "tcp://127.0.0.1:5555) or ipc://PATH, got 'http://x:1'"])
    run = subprocess.run([*worker, "--coordinator", "127.0.0.1:5555", "--bind", held_port],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 1 and len(run.stderr.splitlines()) == 1
    assert run.stderr.startswith(f"disthook worker: {held_port} is in use"), run.stderr
    code, _, err = in_process(capsys, "--coordinator", "x:1", "--log-level", "loud",
                              main=worker_main)
    assert code == 2 and "invalid choice: 'LOUD'" in err
    # HOST:PORT reaches a running coordinator
    with local_cluster(workers=1) as cluster:
        host_port = cluster.address.removeprefix("tcp://")
        proc = subprocess.Popen([*worker, "--coordinator", host_port, "--id", "by-host-port"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            cluster.wait_for_workers(2, timeout=30)
            assert "by-host-port" in [w.id for w in cluster.workers()]
        finally:
            proc.terminate()
            proc.wait(10)


def test_connect_finds_a_coordinator_that_starts_just_after_it_was_called(monkeypatch):
    """A launcher that starts the coordinator and connects at once: no race. (connect()
    tries again for a few seconds while nothing listens; a loaded machine can take longer
    than that to start a Python process, which is not what this test is about.)"""
    import disthook.distributed.cluster as cluster_module
    monkeypatch.setattr(cluster_module, "STARTING_GRACE_S", 60.0)
    address = f"tcp://127.0.0.1:{free_port()}"
    proc = subprocess.Popen([*CLI, "coordinator", "--bind", address],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with connect(address, timeout=30) as cluster:  # called while it starts
            assert cluster.status()["coordinator"]["address"] == address
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.parametrize("argv, said", [
    (["launch", "--workers", "0"],
     "disthook launch: error: argument --workers: expected a whole number >= 1, got '0'"),
    (["serve", "ckpt", "--name", "m", "--stages", "0"],
     "disthook serve: error: argument --stages: expected a whole number >= 1, got '0'"),
    (["status", "--coordinator", "http://x:1"],
     "disthook status: --coordinator must look like tcp://HOST:PORT (e.g. tcp://127.0.0.1:5555) "
     "or ipc://PATH, got 'http://x:1'"),
])
def test_cli_errors_name_the_option_the_user_typed(argv, said, capsys):
    code, _, err = in_process(capsys, *argv)
    assert code in (1, 2) and err.splitlines()[-1] == said, err
