"""Who is on the other end of each of a worker's connections: taken from the transport,
never from what a message says.

A peer is known by its connection's routing identity. With keys, the key it authenticated
with in the handshake (ZeroMQ's ``User-Id``) tells a worker of the cluster (the servers'
key) from a client (any other authorized key), and an identity stays with the key it came
with first. Without keys nothing is authenticated: a neighbour stage is told by the identity
it dials with (``neighbour_identity``), and anyone who can reach the port is trusted as much
as a worker (docs/security.md).
"""
from __future__ import annotations

import itertools
import re
import secrets

from disthook.service.security import Authorized, Bindings, Keys, is_server_key

__all__ = ["NEIGHBOUR_IDENTITY", "Peers", "neighbour_identity"]

NEIGHBOUR_IDENTITY = re.compile(rb".+>(prev|next|peer)>[0-9]+")


def neighbour_identity(worker_id: str, side: str) -> bytes:
    """The identity a worker dials a neighbour stage (or, ``side`` "coordinator", the
    coordinator) with: fresh per connection, since a ROUTER refuses a peer whose identity is
    still held by the connection it replaces, and unguessable, for the same reason: any
    client may dial with an identity it chooses, and one that took it first had the
    worker's own connection refused (a counter's next values: no stage could pass another
    anything; the worker's id: it could not register)."""
    return f"{worker_id}>{side}>{secrets.randbits(64)}".encode()


class Peers:
    """The peers of one worker's endpoint: by connection, their key's name (with keys),
    whether they are workers of the cluster, and how status names them."""

    def __init__(self, keys: Keys | None, authorized: Authorized | None = None):
        self.keys = keys
        self.by_fd: dict[int, bytes] = {}  # connection's file descriptor -> peer identity
        self.names: dict[bytes, str] = {}  # with keys: peer identity -> its key's name
        self._bindings = Bindings()  # with keys: each identity stays with its first key
        self.authorized = authorized  # (with keys: the worker's, Service.authorized)
        self._labels: dict[bytes, str] = {}  # how status names a client
        self._workers: dict[bytes, str] = {}  # the transport says: a worker; -> its id
        self._dialled: dict[bytes, bool] = {}  # without keys: whether it dials as a worker
        self._label_ids = itertools.count(1)

    def arrived(self, fd: int, identity: bytes, user_id: str | None) -> bool:
        """A message came from ``identity`` on connection ``fd``: whether the peer is a
        worker of the cluster (it may carry a client's call). ``PermissionError`` when the
        identity belongs to another key."""
        self.by_fd[fd] = identity
        if self.keys is None:
            worker = self._dialled.get(identity)
            if worker is None:  # once per peer (forgotten with it)
                worker = self._dialled[identity] = NEIGHBOUR_IDENTITY.fullmatch(identity) is not None
        else:
            if not self._bindings.check(identity, user_id):
                raise PermissionError("this connection's identity came with another key "
                                      "before; connect with a fresh identity")
            if identity not in self.names:
                self.names[identity] = self.authorized.name(user_id)
            worker = is_server_key(self.keys, user_id)
        if worker and identity not in self._workers:  # a neighbour dials as neighbour_identity
            dialled = NEIGHBOUR_IDENTITY.fullmatch(identity)
            self._workers[identity] = (identity.split(b">")[0].decode(errors="replace")
                                       if dialled else "of the cluster")
        return worker

    def revoked(self, identity: bytes, user_id: str | None, req: int) -> Exception | None:
        """With keys, the refusal of request ``req`` when the key ``identity`` came with was
        removed from ``authorized/`` since its connection was made; else None."""
        if self.authorized is None or self.authorized.holds(user_id or ""):
            return None
        return Authorized.refusal(self.names.get(identity, "?"), req)

    def linked(self, identity: bytes) -> None:
        """A neighbour stage linked over a local socket (``workers.links``) as ``identity``:
        a worker of the cluster (its uid checked by the kernel, its hello by the link)."""
        self._workers[identity] = identity.split(b">")[0].decode(errors="replace")

    def gone(self, fd: int) -> bytes | None:
        """The connection ``fd`` closed: the identity it had (None if it sent nothing)."""
        return self.by_fd.pop(fd, None)

    def forget(self, identity: bytes) -> None:
        self.names.pop(identity, None)
        self._labels.pop(identity, None)
        self._workers.pop(identity, None)
        self._dialled.pop(identity, None)

    def account(self, identity: bytes) -> bytes | str:
        """Whom what a peer holds or causes here is counted against: with keys its key's
        name (every connection of one key shares one allowance, so opening more gets no
        more, and it outlasts the connection), without keys its connection."""
        return self.names.get(identity, identity)

    def is_worker(self, identity: bytes) -> bool:
        """Whether ``identity`` is a worker of the cluster (as ``arrived`` or ``linked`` said)."""
        return identity in self._workers

    def who(self, identity: bytes) -> str:
        """A peer as the logs name it: a worker of the cluster by its id, a client as
        status names it (``client 2 (alice)``), never by its identity (bytes it chose)."""
        worker = self._workers.get(identity)
        return f"worker {worker}" if worker is not None else self.label(identity)

    def label(self, identity: bytes) -> str:
        """A client as status names it: ``client <n>`` (numbered here in order of first
        sight) and its key's name, never its identity, which another client could use."""
        label = self._labels.get(identity)
        if label is None:
            label = f"client {next(self._label_ids)}"
            name = self.names.get(identity)
            label = f"{label} ({name})" if name else label
            self._labels[identity] = label
        return label
