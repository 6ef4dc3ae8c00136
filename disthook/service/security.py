"""Keys, encryption and peer authentication for a cluster (ZeroMQ's CURVE and ZAP).

A key directory, made by ``disthook keys generate DIR``, holds:

- ``server.key`` / ``server.key_secret``: the cluster's own pair. The coordinator and every
  worker serve with it, and use it too when they connect (a worker to the coordinator and to
  its neighbour stages), so one directory copied to every host is a whole cluster's setup.
- ``client.key`` / ``client.key_secret``: a client's pair (more with ``disthook keys add``).
- ``authorized/``: the public keys of every peer the servers accept, one ``NAME.key`` each.

With keys every socket is encrypted, and a server answers a peer only when that peer's public
key is in ``authorized/`` (read again at each new connection, so adding or deleting a file
takes effect for the next one); a refused peer is logged with its key. Without keys a server
that binds anything but loopback warns that whoever reaches its port may drive it.
"""
from __future__ import annotations

import dataclasses
import logging
import math
import os
import shutil
import stat
import time
from typing import TYPE_CHECKING

import zmq
import zmq.auth

from disthook.service.endpoint import parse

if TYPE_CHECKING:  # its module imports asyncio: only a process that uses keys loads it
    from zmq.auth.thread import ThreadAuthenticator

__all__ = [
    "AuthenticationError",
    "Authorized",
    "Keys",
    "add_client",
    "generate",
    "handshake_refusal",
    "is_loopback",
    "refusal_reason",
    "warn_if_exposed",
]

SERVER = "server"
CLIENT = "client"
AUTHORIZED = "authorized"

# what a client's monitor reports when a server refused it, or they speak different security
HANDSHAKE_FAILURES = (zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
                      | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL)


class AuthenticationError(ConnectionRefusedError):
    """A server refused this process's key, or the two sides do not use the same security."""


def generate(directory: str) -> Keys:
    """Make a key directory (server pair, one client pair, both authorized); its ``Keys``
    as a client sees them. Refuses a directory that already holds keys."""
    if os.path.exists(os.path.join(directory, f"{SERVER}.key_secret")):
        raise FileExistsError(f"{directory} already holds keys ({SERVER}.key_secret); "
                              "remove it first, or use another directory")
    os.makedirs(os.path.join(directory, AUTHORIZED), exist_ok=True)
    for folder in (directory, os.path.join(directory, AUTHORIZED)):  # whatever the umask
        os.chmod(folder, os.stat(folder).st_mode & ~0o022)
    _make_pair(directory, SERVER)
    _make_pair(directory, CLIENT)
    return Keys.load(directory)


def add_client(directory: str, name: str) -> str:
    """A new client pair ``NAME.key(_secret)`` in ``directory``, authorized; its secret file."""
    if not name.isidentifier():
        raise ValueError(f"a client name is a plain word (letters, digits, _), got {name!r}")
    if name == SERVER or os.path.exists(os.path.join(directory, f"{name}.key_secret")):
        raise FileExistsError(f"{directory} already has keys named {name!r}")
    if not os.path.isdir(os.path.join(directory, AUTHORIZED)):
        raise FileNotFoundError(f"{directory} is not a key directory (no {AUTHORIZED}/); "
                                "make one with: disthook keys generate DIR")
    return _make_pair(directory, name)


def _make_pair(directory: str, name: str) -> str:
    public, secret = zmq.auth.create_certificates(directory, name)
    os.chmod(secret, 0o600)
    authorized = os.path.join(directory, AUTHORIZED, f"{name}.key")
    shutil.copy(public, authorized)
    for path in (public, authorized):
        os.chmod(path, 0o644)
    return secret


def _check_private(path: str, *, readable: bool) -> None:
    """``PermissionError`` where another user may change ``path`` (group or others may
    write it) or, with ``readable=False``, every user may read it: as ssh refuses a
    private key or an ``authorized_keys`` that others may read or change, a cluster's keys
    are refused so. A secret its group may read passes: a container reads its mounted keys
    through its group (Kubernetes' ``fsGroup``, deploy/k8s); so does what lies on a
    read-only mount, or a folder with the sticky bit (a Kubernetes secret volume's)."""
    if os.name != "posix":
        return
    st = os.stat(path)
    mode = st.st_mode & 0o777
    loose = mode & (0o022 if readable else 0o026)
    if loose & 0o022 and (os.statvfs(path).f_flag & os.ST_RDONLY  # nobody may write it
                          or (stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX)):
        loose &= ~0o022  # (a sticky folder: no one replaces what another put there)
    if loose:
        what = "changed" if readable else "read or changed"
        raise PermissionError(
            f"{path} has mode {mode:04o}: other users may {what} it, so it proves nothing "
            f"about who holds this cluster's keys; run: chmod "
            f"{'go-w' if readable else 'go-w,o-rwx'} {path}")


@dataclasses.dataclass(frozen=True)
class Keys:
    """This process's key pair and the servers' public key, from a key directory."""

    directory: str
    name: str  # which pair: "server" for the coordinator and workers, a client's name else
    public: bytes
    # never in repr: a printed Keys, or a traceback that shows its frames' locals (pytest
    # -l, rich, a debugger's), showed the secret key whole (tests/test_s7_keys.py)
    secret: bytes = dataclasses.field(repr=False)
    server_public: bytes

    @classmethod
    def load(cls, directory: str, name: str = CLIENT) -> Keys:
        def read(path: str, secret: bool) -> tuple[bytes, bytes | None]:
            if not os.path.isfile(path):
                raise FileNotFoundError(
                    f"no key file {path}; make a key directory with: disthook keys generate "
                    f"{directory}" + ("" if name in (SERVER, CLIENT) else
                                      f", then: disthook keys add {directory} {name}"))
            _check_private(path, readable=not secret)
            try:
                return zmq.auth.load_certificate(path)
            except (ValueError, OSError) as exc:
                kind = "secret" if secret else "public"
                raise ValueError(f"{path} is not a {kind} key file: {exc}") from None

        public, secret = read(os.path.join(directory, f"{name}.key_secret"), True)
        if secret is None:
            raise ValueError(f"{directory}/{name}.key_secret holds no secret key")
        server_public, _ = read(os.path.join(directory, f"{SERVER}.key"), False)
        if name == SERVER:  # who may connect: no other user may add themselves
            _check_private(directory, readable=True)
            _check_private(os.path.join(directory, AUTHORIZED), readable=True)
        return cls(os.path.abspath(directory), name, public, secret, server_public)

    @property
    def fingerprint(self) -> str:
        """The first characters of this pair's public key, as the servers' logs show keys."""
        return self.public.decode()[:8]

    def serve(self, sock: zmq.Socket) -> None:
        """Make ``sock`` (before it binds) a CURVE server with the cluster's pair."""
        sock.setsockopt(zmq.CURVE_SERVER, 1)
        sock.setsockopt(zmq.CURVE_PUBLICKEY, self.public)
        sock.setsockopt(zmq.CURVE_SECRETKEY, self.secret)

    def dial(self, sock: zmq.Socket) -> None:
        """Make ``sock`` (before it connects) a CURVE client of the cluster's servers."""
        sock.setsockopt(zmq.CURVE_SERVERKEY, self.server_public)
        sock.setsockopt(zmq.CURVE_PUBLICKEY, self.public)
        sock.setsockopt(zmq.CURVE_SECRETKEY, self.secret)

    def authorized(self) -> dict[bytes, str]:
        """The public keys (Z85) listed in ``authorized/`` now, each with its name (its
        file's, less ``.key``)."""
        folder = os.path.join(self.directory, AUTHORIZED)
        _check_private(folder, readable=True)  # (PermissionError: the gate refuses all)
        keys = {}
        for entry in sorted(os.listdir(folder)):
            if entry.endswith(".key"):
                try:
                    _check_private(os.path.join(folder, entry), readable=True)
                    public, _ = zmq.auth.load_certificate(os.path.join(folder, entry))
                except (ValueError, OSError):
                    continue  # a damaged file, or one others may change, authorizes no one
                keys.setdefault(public, entry.removesuffix(".key"))
        return keys

    def guard(self, ctx: zmq.Context, log: logging.Logger, who: str,
              authorized: Authorized) -> ThreadAuthenticator:
        """Start the ZAP handler of ``ctx``: every CURVE connection to a socket of ``ctx``
        is accepted only when its key is ``authorized``; refusals are logged as warnings."""
        from zmq.auth.thread import ThreadAuthenticator

        auth = ThreadAuthenticator(ctx, log=logging.getLogger("disthook.zap"))
        auth.start()
        auth.configure_curve_callback("*", credentials_provider=_Gate(authorized, log, who))
        return auth


class _Gate:
    """The ZAP decision: a peer's key is in ``authorized/``, or it is refused (and logged)."""

    def __init__(self, authorized: Authorized, log: logging.Logger, who: str):
        from disthook.service.loop import PeerLog

        self.authorized, self.log, self.who = authorized, log, who
        # one allowance for every refusal (a peer may offer a fresh key each connection)
        self.refusals = PeerLog(log, name=lambda _: "refused keys")

    def callback(self, domain: str, key: bytes) -> bool:
        """Called in the authenticator's one thread, a connection at a time."""
        try:
            allowed = key.decode() in self.authorized.read()
        except OSError as exc:
            self.refusals.warning(b"", "%s: cannot read the authorized keys (%s); refusing",
                                  self.who, exc)
            return False
        if not allowed:
            self.refusals.warning(b"", "%s: refused a connection from an unauthorized key "
                                  "%s...", self.who, key.decode()[:8])
        return allowed


class Bindings:
    """With keys: which key each connection identity authenticated with first. A ROUTER
    takes a peer's identity from the peer; an identity seen under one key and later offered
    under another (a client taking over another's identity once it went away) is refused,
    so an identity always stands for one key. Bounded: the oldest are forgotten first."""

    def __init__(self, limit: int = 65536):
        self.limit = limit
        self._keys: dict[bytes, str] = {}

    def check(self, identity: bytes, user_id: str | None) -> bool:
        """Whether ``identity`` may speak with key ``user_id`` (bound on first sight)."""
        held = self._keys.get(identity)
        if held is None:
            self._keys[identity] = user_id or ""
            while len(self._keys) > self.limit:
                del self._keys[next(iter(self._keys))]
            return True
        return held == (user_id or "")


REREAD_AUTHORIZED_S = 1.0  # how old the list of authorized keys a message is checked with may be


class Authorized:
    """Whether a connection's key is still in ``authorized/``, for each message it sends. ZAP
    checks a key only when a connection is made: a key deleted from the folder (a client
    revoked) kept its open connections, and with them its models, hooks and allowances, for
    as long as they lasted. The folder is read again at most every ``REREAD_AUTHORIZED_S``
    seconds; the servers' key always holds (the cluster's own workers)."""

    def __init__(self, keys: Keys, clock=time.monotonic):
        self.keys, self.clock = keys, clock
        self._held: dict[str, str] = {}  # key (Z85) -> its name
        self._read_at = -math.inf
        self._mark: tuple | None = None  # the folder's own stat when it was read

    def read(self) -> dict[str, str]:
        """The keys in ``authorized/`` now (``OSError`` where it cannot be read): the ZAP
        gate's check of each new connection, which its messages are checked with after.
        Its files are read again when a file came or went (the folder's own stat changed:
        at once) and at least every ``REREAD_AUTHORIZED_S`` seconds (a file changed in
        place, or its mode): every handshake read and parsed them all, which a peer with no
        key made for the cost of a key pair (24 ms a handshake with 202 keys authorized)."""
        st = os.stat(os.path.join(self.keys.directory, AUTHORIZED))
        mark, now = (st.st_mtime_ns, st.st_ino, st.st_mode), self.clock()
        if mark == self._mark and now - self._read_at < REREAD_AUTHORIZED_S:
            return self._held
        held = {key.decode(): name for key, name in self.keys.authorized().items()}
        self._held, self._read_at, self._mark = held, now, mark
        return held

    def holds(self, user_id: str) -> bool:
        if is_server_key(self.keys, user_id):
            return True
        return user_id in self._fresh()

    def name(self, user_id: str) -> str:
        """The name of the authorized key whose public half is ``user_id`` (the Z85 text a
        connection authenticated with, ZeroMQ's User-Id), or its first characters where its
        file is gone. (Each name was the whole folder read and parsed: a client asking the
        coordinator anything that names it cost it that much.)"""
        return self._fresh().get(user_id) or f"key {user_id[:8]}..."

    def _fresh(self) -> dict[str, str]:
        """The keys as read at most ``REREAD_AUTHORIZED_S`` seconds ago."""
        if self.clock() - self._read_at >= REREAD_AUTHORIZED_S:
            try:
                self.read()
            except OSError:  # unreadable, or others may change it: it authorizes no one
                self._held, self._read_at, self._mark = {}, self.clock(), None
        return self._held

    @staticmethod
    def refusal(name: str, req: int) -> PermissionError:
        """The refusal of request ``req`` from a connection whose key ``name`` was revoked."""
        exc = PermissionError(f"the key {name!r} this connection came with is no longer "
                              "authorized on this cluster (removed from its authorized/): "
                              "its connections are refused from now on; ask the cluster's "
                              "admin for a key")
        exc.req = req
        return exc


def is_server_key(keys: Keys | None, user_id: str | None) -> bool:
    """Whether a connection authenticated with the servers' key (a coordinator or worker
    of the cluster; with keys only)."""
    return keys is not None and bool(user_id) and user_id == keys.server_public.decode()


def is_loopback(address: str) -> bool:
    """True for endpoints only this machine can reach: ipc, tcp on 127.x/::1/localhost."""
    return parse(address).loopback


def warn_if_exposed(address: str, keys: Keys | None, log: logging.Logger, who: str) -> None:
    if keys is None and not is_loopback(address):
        log.warning("%s: listening on %s WITHOUT keys: anyone who can reach this port can "
                    "deploy models and run their code here; start every process with "
                    "--keys DIR (made by: disthook keys generate DIR)", who, address)


def handshake_refusal(monitor: zmq.Socket) -> str | None:
    """Read one event from a monitor made with ``HANDSHAKE_FAILURES``: why the handshake
    failed, or None for another event (or none waiting)."""
    from zmq.utils.monitor import recv_monitor_message

    try:
        event = recv_monitor_message(monitor, zmq.NOBLOCK)
    except zmq.Again:
        return None
    return refusal_reason(event)


def refusal_reason(event: dict, keyed: bool = True) -> str | None:
    """Why a handshake failed for the two sides' security, for a monitor event (as pyzmq
    parses it); None for another event. ``keyed``: this side uses keys, and every failed
    handshake is then about them. Without keys a protocol error is theirs only when it is a
    mechanism mismatch (one side uses keys); any other comes from a peer that speaks
    something else (None). A failure without detail is a server with keys that hung up."""
    if event["event"] == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
        return f"the server refused this key (status {event['value']})"
    if event["event"] & HANDSHAKE_FAILURES and (
            keyed or event["event"] != zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
            or event["value"] == zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH):
        return ("the security handshake failed: one side uses keys and the other does not, "
                "or they are of different clusters")
    return None

