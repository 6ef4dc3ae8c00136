"""Where a cluster's processes listen: the one parser of endpoints and the default port.

Every process and launcher reads an address through ``parse``: ``tcp://HOST:PORT``,
``HOST:PORT`` (taken as tcp) or ``ipc://PATH``; anything else is a ``ValueError`` that shows
the expected form, raised before any socket is made.
"""
from __future__ import annotations

import dataclasses
import errno
import ipaddress
import socket

__all__ = [
    "DEFAULT_COORDINATOR",
    "DEFAULT_PORT",
    "FORM",
    "Endpoint",
    "EndpointInUse",
    "advertised_address",
    "check_free",
    "parse",
    "unknown_host",
]

DEFAULT_PORT = 5555
DEFAULT_COORDINATOR = f"tcp://127.0.0.1:{DEFAULT_PORT}"
FORM = f"tcp://HOST:PORT (e.g. {DEFAULT_COORDINATOR}) or ipc://PATH"


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """A parsed address: ``tcp`` with host and port (0: any free port), or ``ipc`` with a
    path. ``str()`` gives the ZeroMQ form."""

    scheme: str
    host: str = ""
    port: int = 0
    path: str = ""

    def __str__(self) -> str:
        if self.scheme == "ipc":
            return f"ipc://{self.path}"
        return f"tcp://{self.host}:{self.port}"

    @property
    def loopback(self) -> bool:
        """True when only this machine can reach it: ipc, or tcp on 127.x, ::1, localhost."""
        if self.scheme == "ipc" or self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host.strip("[]")).is_loopback
        except ValueError:
            return False  # a host name or interface name: assume reachable

    def with_port(self, port: int) -> Endpoint:
        return dataclasses.replace(self, port=port)


def parse(address: str, what: str = "the address") -> Endpoint:
    """``address`` as an ``Endpoint``; a ``ValueError`` naming ``what`` and the expected
    form for anything but ``tcp://HOST:PORT``, ``HOST:PORT`` or ``ipc://PATH``. A port of
    ``*`` (ZeroMQ's wildcard) is 0, any free port."""
    if not isinstance(address, str):
        raise ValueError(f"{what} must look like {FORM}, got {address!r}")
    scheme, sep, rest = address.strip().partition("://")
    if not sep:  # HOST:PORT
        scheme, rest = "tcp", address.strip()
    if scheme == "ipc" and rest:
        return Endpoint("ipc", path=rest)
    host, _, port = rest.rpartition(":")
    if scheme == "tcp" and _plain(host) and (port == "*" or port.isdigit()):
        number = 0 if port == "*" else int(port)
        if number <= 65535:
            return Endpoint("tcp", host=host, port=number)
    raise ValueError(f"{what} must look like {FORM}, got {address!r}")


def _plain(host: str) -> bool:
    return bool(host) and not any(c in host for c in "/ \t@")


class EndpointInUse(OSError):
    """Another process already listens at the endpoint a server was to bind. The message
    says what to do; ``advice(option)`` words it for a command line (``"--bind"``)."""

    def __init__(self, address: str):
        self.address = address
        super().__init__(errno.EADDRINUSE, self.advice(None))

    def advice(self, option: str | None) -> str:
        """The message, naming the command line's ``option`` (None: Python's port=)."""
        endpoint = parse(self.address)
        if option is None:
            other = "pass another port (0 picks a free one)"
        else:
            other = f"pick another port with {option} ({endpoint.with_port(0)} picks a free one)"
        return (f"{self.address} is in use: another process listens there (a cluster already "
                f"running?); {other}, or stop what holds it")

    def __str__(self) -> str:
        return self.strerror


def check_free(address: str) -> None:
    """``EndpointInUse`` at once when another process listens at tcp ``address`` (port 0
    and ipc always pass): a launcher calls it before starting a process that would fail."""
    endpoint = parse(address)
    if endpoint.scheme != "tcp" or endpoint.port == 0 or endpoint.host == "*":
        return
    host = endpoint.host.strip("[]")
    try:
        infos = socket.getaddrinfo(host, endpoint.port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        return  # the process's own bind names the host
    family, kind, proto, _, where = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as ZeroMQ binds
        try:
            probe.bind(where)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise EndpointInUse(str(endpoint)) from None


def unknown_host(endpoint) -> str | None:
    """The endpoint's host when it has no address (a typo), else None."""
    if endpoint.scheme != "tcp":
        return None
    try:
        socket.getaddrinfo(endpoint.host.strip("[]"), endpoint.port)
    except (socket.gaierror, UnicodeError):
        return endpoint.host
    return None


def advertised_address(bound: str, advertise: str | None, log) -> str:
    """The endpoint peers reach this worker at: ``advertise`` ("host" or "host:port"; the
    port defaults to the bound one), else the bound endpoint. A wildcard bind (0.0.0.0, *,
    ::) without ``advertise`` falls back to this host's name, with a warning."""
    scheme, _, rest = bound.partition("://")
    host, _, port = rest.rpartition(":")
    if advertise:
        if "://" in advertise:
            raise ValueError(f"--advertise takes host or host:port, got {advertise!r}")
        a_host, sep, a_port = advertise.rpartition(":")
        if not sep:  # no port given
            a_host, a_port = advertise, port
        elif not a_port.isdigit() or not a_host:
            raise ValueError(f"--advertise takes host or host:port, got {advertise!r}")
        return f"{scheme}://{a_host}:{a_port}"
    if host in ("0.0.0.0", "*", "[::]", "::"):
        name = socket.gethostname()
        log.warning("bound to %s without --advertise: peers are told tcp://%s:%s (this host's "
                    "name); pass --advertise HOST if they cannot resolve it", bound, name, port)
        return f"{scheme}://{name}:{port}"
    return bound
