"""The roles start from the installed project whatever the working directory holds, and a
role that ends during start-up says why."""
import subprocess
import sys

import pytest

from deploy.local import spawn, why_it_ended
from deploy.roles import Role
from disthook.distributed import ClusterError, local_cluster

pytestmark = pytest.mark.timeout(120)

SHADOW = "print('the user shadow {name}.py ran'); raise SystemExit(0)\n"


@pytest.fixture
def shadowed_cwd(tmp_path, monkeypatch):
    """A working directory (and script directory: first on sys.path) holding a workers.py
    and a coordinator.py, as a user's project might."""
    for name in ("workers", "coordinator"):
        (tmp_path / f"{name}.py").write_text(SHADOW.format(name=name))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_a_workers_py_in_the_working_directory_does_not_shadow_the_roles(shadowed_cwd):
    with local_cluster(workers=1, start_timeout=60) as cluster:
        assert len([w for w in cluster.workers() if w.alive]) == 1


@pytest.mark.parametrize("role", ["worker", "coordinator"])
def test_the_cli_roles_are_not_shadowed_either(shadowed_cwd, role):
    run = subprocess.run([sys.executable, "-m", "disthook.cli", role, "--help"],
                         check=False, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert "shadow" not in run.stdout and "--bind" in run.stdout


def test_a_role_that_ends_at_start_up_says_why_and_names_a_shadowing_file(shadowed_cwd):
    proc = spawn(Role("workers", ("--coordinator", "tcp://127.0.0.1:1", "--bind", "nowhere")))
    proc.wait(60)
    said = why_it_ended(proc)
    assert said.startswith("exited with code 1 during start-up; its last stderr lines:"), said
    assert "--bind must look like tcp://HOST:PORT" in said
    assert f"{shadowed_cwd / 'workers.py'} in the working directory" in said
    assert "`python -m workers` would run instead of the role: rename it" in said


def test_a_worker_refuses_an_allowed_hook_module_that_does_not_exist(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ClusterError) as caught:
        local_cluster(workers=1, allow_hook_modules=["no_such_hooks_module"], start_timeout=60)
    said = str(caught.value)
    assert said.startswith("the worker (pid "), said
    assert "exited with code 1 during start-up; its last stderr lines:" in said
    assert ("disthook worker: --allow-hook-module 'no_such_hooks_module': no module or package "
            "of that name can be imported here") in said
    assert "note:" not in said  # nothing in the working directory is named like a role


# what a role's start does not need: asyncio (pyzmq's monitor helper and ZAP thread import it;
# a process with keys loads the latter when it needs it), torch, the bench and the demo
NOT_AT_START = ("asyncio", "zmq.asyncio", "torch", "matplotlib", "disthook.bench",
                "disthook.demo")


def test_the_roles_start_without_importing_what_only_later_or_other_programs_need():
    code = ("import sys, coordinator.server, workers.server; "
            f"print(sorted(m for m in {NOT_AT_START!r} if m in sys.modules))")
    run = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]"


def test_a_role_started_from_the_projects_own_checkout_names_no_shadowing_file(monkeypatch):
    # run from the project's root its workers/__init__.py is the role's own module: before,
    # the note called it a stranger's file to rename
    from pathlib import Path

    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    proc = spawn(Role("workers", ("--coordinator", "tcp://127.0.0.1:1", "--bind", "nowhere")))
    proc.wait(60)
    said = why_it_ended(proc)
    assert "--bind must look like tcp://HOST:PORT" in said
    assert "note:" not in said, said
