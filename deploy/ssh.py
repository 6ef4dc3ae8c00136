"""The SSH launcher: a cluster across the hosts of a host file (``disthook launch --hosts``).

The host file has one host per line, then options (``#`` starts a comment)::

    # host              options
    gpu-a               coordinator workers=1
    gpu-b               workers=2 python=/opt/venv/bin/python dir=/srv/model
    admin@10.0.0.7      workers=1 advertise=10.0.0.7

``coordinator`` marks the host that runs the coordinator (default: the first); ``workers``
is how many workers it runs (default 1); ``python`` the interpreter with disthook installed
(default ``python3``); ``dir`` where to start (for model modules beside a script); and
``advertise`` the address peers reach it at (default the host name as written, without
``user@``). Each process runs under ``ssh -tt``, so ending the launcher (Ctrl-C) hangs up
its session and the remote process ends with it. The key directory (``--keys``) must be at
the same path on every host.
"""
from __future__ import annotations

import dataclasses
import shlex

from deploy.roles import coordinator_role, worker_role
from disthook.service.endpoint import DEFAULT_PORT

__all__ = ["Host", "commands", "parse_hosts"]

SSH = ("ssh", "-tt", "-o", "BatchMode=yes", "-o", "ServerAliveInterval=5")
_OPTIONS = {"workers", "python", "dir", "advertise"}


@dataclasses.dataclass(frozen=True)
class Host:
    target: str  # what ssh is given: host or user@host
    workers: int = 1
    coordinator: bool = False
    python: str = "python3"
    dir: str | None = None
    advertise: str | None = None

    @property
    def name(self) -> str:
        """The host without ``user@``: the address peers use unless ``advertise`` says."""
        return self.target.rpartition("@")[2]


def parse_hosts(text: str, source: str = "host file") -> list[Host]:
    """The hosts of a host file; errors name the line and what is wrong with it."""
    hosts = []
    for number, raw in enumerate(text.splitlines(), 1):
        words = raw.split("#", 1)[0].split()
        if not words:
            continue
        where = f"{source}, line {number}"
        target, fields = words[0], {}
        for word in words[1:]:
            if word == "coordinator":
                fields["coordinator"] = True
                continue
            key, sep, value = word.partition("=")
            if not sep or key not in _OPTIONS or not value:
                raise ValueError(f"{where}: expected coordinator or one of "
                                 f"{', '.join(sorted(_OPTIONS))} as key=value, got {word!r}")
            if key == "workers":
                if not value.isdigit():
                    raise ValueError(f"{where}: workers must be a count, got {value!r}")
                fields[key] = int(value)
            else:
                fields[key] = value
        hosts.append(Host(target, **fields))
    if not hosts:
        raise ValueError(f"{source} lists no hosts")
    marked = [h for h in hosts if h.coordinator]
    if len(marked) > 1:
        raise ValueError(f"{source}: {len(marked)} hosts are marked coordinator "
                         f"({', '.join(h.target for h in marked)}); mark one")
    if not marked:
        hosts[0] = dataclasses.replace(hosts[0], coordinator=True)
    if not sum(h.workers for h in hosts):
        raise ValueError(f"{source}: no host runs a worker (workers=0 everywhere)")
    return hosts


def commands(hosts: list[Host], *, port: int = DEFAULT_PORT, keys: str | None = None,
             log_level: str | None = None, heartbeat: float | None = None,
             ssh: tuple[str, ...] = SSH) -> list[tuple[str, list[str]]]:
    """(what, argv) of every process: the coordinator first, then each host's workers."""
    head = next(h for h in hosts if h.coordinator)
    address = f"tcp://{head.advertise or head.name}:{port}"
    out = [(f"coordinator on {head.target}",
            _over_ssh(ssh, head, coordinator_role(f"tcp://0.0.0.0:{port}", keys=keys,
                                                  heartbeat=heartbeat, log_level=log_level)))]
    for host in hosts:
        for i in range(host.workers):
            role = worker_role(address, worker_id=f"{host.name}-{i}", bind="tcp://0.0.0.0:0",
                               advertise=host.advertise or host.name, keys=keys,
                               log_level=log_level, allow_code=True)
            out.append((f"worker {i} on {host.target}", _over_ssh(ssh, host, role)))
    return out


def _over_ssh(ssh: tuple[str, ...], host: Host, role) -> list[str]:
    line = "exec " + role.shell(host.python)
    if host.dir:
        line = f"cd {shlex.quote(host.dir)} && {line}"
    return [*ssh, host.target, line]
