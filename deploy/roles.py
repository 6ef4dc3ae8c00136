"""The command line of each role of a cluster, made once for every launcher.

A ``Role`` is the module to run (``python -m coordinator`` or ``python -m workers``) and its
arguments; a launcher turns it into a local child process, an SSH command, a Ray actor's
child or a container's arguments.
"""
from __future__ import annotations

import dataclasses
import os
import shlex

__all__ = ["Role", "coordinator_role", "local_worker_id", "worker_role"]

# runs a role from this project whatever the working directory holds (its docstring says how)
ROLE_MAIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "role_main.py")


@dataclasses.dataclass(frozen=True)
class Role:
    """``python -m <module> <args>``: one process of a cluster."""

    module: str  # "coordinator" or "workers"
    args: tuple[str, ...]

    def argv(self, python: str = "python") -> list[str]:
        return [python, "-m", self.module, *self.args]

    def local_argv(self, python: str) -> list[str]:
        """The command that runs it on this machine from this installed project, so that a
        ``workers.py`` or ``coordinator.py`` in the working directory cannot shadow it
        (``argv`` is for other hosts, where the project's path is not known here)."""
        return [python, ROLE_MAIN, self.module, *self.args]

    def named(self, worker_id: str) -> Role:
        """The same role under the id ``worker_id`` (``--id``, replacing one it had): a
        launcher names each worker it starts (``local_cluster``: ``w1``, ``w2``, ...)."""
        args = list(self.args)
        if "--id" in args:
            at = args.index("--id")
            del args[at:at + 2]
        return Role(self.module, (*args, "--id", worker_id))

    def shell(self, python: str = "python") -> str:
        """The same, as one line for a shell (each word quoted as needed)."""
        return shlex.join(self.argv(python))


def local_worker_id(number: int) -> str:
    """The id of a launch's ``number``-th worker on this machine (from 1; a replacement
    takes the next number): short enough to read in every log line and status row."""
    return f"w{number}"


def _common(keys: str | None, log_level: str | None) -> list[str]:
    out = []
    if keys:
        out += ["--keys", keys]
    if log_level:
        out += ["--log-level", log_level]
    return out


def coordinator_role(bind: str, *, keys: str | None = None, heartbeat: float | None = None,
                     log_level: str | None = None, state: str | None = None) -> Role:
    """The coordinator, listening on ``bind`` (``tcp://HOST:PORT``); ``state``: the file it
    keeps the published-model registry in (one started again reads it)."""
    args = ["--bind", _endpoint(bind, "bind")]
    if heartbeat is not None:
        args += ["--heartbeat", f"{heartbeat:g}"]
    if state is not None:
        args += ["--state", state]
    return Role("coordinator", tuple(args + _common(keys, log_level)))


def worker_role(coordinator: str, *, worker_id: str | None = None,
                bind: str = "tcp://0.0.0.0:0", advertise: str | None = None,
                keys: str | None = None, log_level: str | None = None,
                allow_hook_modules=(), allow_code: bool = False,
                context_ttl: float | None = None, allow_model_modules=None,
                threads: int | None = None) -> Role:
    """A worker of the coordinator at ``coordinator``, binding ``bind`` and telling peers
    ``advertise`` (its host name or address, as they reach it). ``allow_code``: it
    takes models pickled by value (code included) from deploying clients (launchers of a
    cluster its owner deploys to; never a shared service). ``threads``: its
    BLAS and OpenMP threads (None: the environment's)."""
    args = ["--coordinator", _endpoint(coordinator, "coordinator"),
            "--bind", _endpoint(bind, "bind")]
    if advertise:
        args += ["--advertise", advertise]
    if worker_id:
        args += ["--id", worker_id]
    for module in allow_hook_modules:
        args += ["--allow-hook-module", module]
    if allow_model_modules is not None:  # None: any installed module; []: disthook only
        for module in allow_model_modules or ["disthook"]:
            args += ["--allow-model-module", module]
    if allow_code:
        args.append("--allow-code")
    if context_ttl is not None:
        args += ["--context-ttl", f"{context_ttl:g}"]
    if threads is not None:
        args += ["--threads", str(threads)]
    return Role("workers", tuple(args + _common(keys, log_level)))


def _endpoint(address: str, what: str) -> str:
    """``address`` in the ``tcp://HOST:PORT`` form every role takes (ValueError if it is
    no endpoint)."""
    from disthook.service.endpoint import parse  # not at the top: disthook imports us

    return str(parse(address, what))
