"""The coordinator: the registry of workers, their liveness, and the cluster's shutdown.

Workers register (their id, data-plane address, pid, host) and then send a heartbeat every
``heartbeat`` seconds, answered only when the beat asks (or to refuse it); a worker silent
for ``lost_after`` seconds (``SILENT_AFTER_BEATS`` beats) is reported as not alive. Clients ask for ``status`` and may ``shutdown`` the
cluster, which tells every worker to stop first.
The coordinator carries no activations or gradients.

It is also the registry of models shared by name (``disthook.distributed.registry``): a
deployer ``publish``es its deployment's record, clients list them (``models``), ``lookup``
one, and say when they ``attach`` and ``detach``. Clients send no heartbeats here: what the
coordinator knows of them is their connection, watched as workers watch theirs (closed, or
no answer to ZMTP pings, ``disthook.service.loop.ping_options``): a deployer whose
connection goes is unpublished (with keys its name stays its key's while its workers hold
the model), an attached client whose connection goes is forgotten. With ``--state FILE``
the published records are also kept in that file (``coordinator.registry_store``), so a
coordinator started again knows every name and its owner: until the deployer's key claims
it again (with keys) or its workers no longer hold the model, nobody else publishes under
it.
"""
from __future__ import annotations

import dataclasses
import itertools
import time
import unicodedata

import zmq
import zmq.auth

from coordinator import registry_store
from coordinator.status import StatusHandlers
from disthook import wire
from disthook.service.loop import (
    LOG_LEVELS,
    NO_REPLY,
    Service,
    log_to_stderr,
    ping_options,
    recv_now,
)
from disthook.service.security import CLIENT, Authorized, is_server_key
from disthook.wire import HEARTBEAT_S, SILENT_AFTER_BEATS

RESTORED_GRACE_S = 10.0  # a restored model's workers have this long to register again
# what one client may hold in the registry (with keys: one key, every connection of it)
MAX_PUBLISHED_PER_CLIENT = 64  # names it has published
MAX_ATTACHED_PER_CLIENT = 64  # attachments to one published model
MAX_WORKER_ADDRESS_BYTES = 256 << 10  # told to each worker (see _addresses)
MAX_LEFT_NAMES = 4096  # names kept for the key of a deployer that went (Coordinator._left)
MAX_NAME_CHARS = 256  # of a published model's name and id (its class: 4 times as many)
# what a name may not hold: control and invisible characters (a zero-width space made "gpt\u200b"
# print as "gpt"), line and paragraph separators, private use and unassigned code points
_UNSEEN = frozenset({"Cc", "Cf", "Zl", "Zp", "Co", "Cn"})


def _unseen(name: str) -> str | None:
    """The first character of ``name`` that does not show as itself, as U+XXXX, or None."""
    return next((f"U+{ord(c):04X}" for c in name if unicodedata.category(c) in _UNSEEN
                 or (c.isspace() and c != " ")), None)


def _addresses(workers) -> list[str]:
    """The addresses and local links of ``workers``, the latest registered first, up to
    ``MAX_WORKER_ADDRESS_BYTES`` in all (a worker's answer and message stay far below the
    header's cap, however many registered)."""
    out, size = {}, 0
    for r in sorted(workers, key=lambda r: r.registered, reverse=True):
        for a in (r.address, r.link):
            if a and a not in out and size + len(a) <= MAX_WORKER_ADDRESS_BYTES:
                out[a], size = None, size + len(a)
    return sorted(out)


def _look(name: str) -> str:
    """What ``name`` looks like to a reader: its compatibility form, case folded (``ｍｌｐ``,
    ``MLP`` and ``mⅼp``, whose ``ⅼ`` is a roman numeral, all look like ``mlp``), without
    spaces at either end and each run of them one (a listing shows ``'mlp '`` as ``mlp``)."""
    return " ".join(word for word in unicodedata.normalize("NFKC", name).casefold().split(" ")
                    if word)

COORDINATOR_SNDHWM = 64  # answers ZeroMQ holds for one peer (then kept: loop.UNROUTABLE_KEPT)
# what its published records may hold here, as decoded (wire's Message.nbytes): a record's
# structure of 1 MiB of empty maps is 72 MiB of objects, and 64 of them were 4.6 GiB
MAX_PUBLISHED_BYTES_PER_CLIENT = 256 << 20

__all__ = ["Coordinator", "Published", "WorkerRecord"]


@dataclasses.dataclass
class WorkerRecord:
    id: str
    address: str
    pid: int
    host: str
    identity: bytes
    registered: float
    last_seen: float
    memory: int | None = None
    stages: list = dataclasses.field(default_factory=list)  # as the worker last reported
    # with keys: key name -> indices in stages of that key's unpublished stages; "" ->
    # the published ones' (the heartbeat's keepers: whom status names each stage to)
    keepers: dict = dataclasses.field(default_factory=dict)
    code: bool = False  # it takes models pickled by value from deploying clients
    # its socket for neighbour stages on its host, and what tells that host (workers/links.py)
    link: str | None = None
    link_host: str | None = None


@dataclasses.dataclass
class Published:
    """A model published by name: the deployer's record (wire's ``published_model``), the
    deployer's connection, and the clients attached (by (connection here, the client as it
    names itself: its key's name, or the identity of its sockets to the workers): (that
    connection, since, who: the key name with keys, else ``client <n>``)); a client's
    attachment is its connection's own, so no other connection replaces or detaches it."""

    record: dict
    owner: bytes | None  # None: restored from the state file, its deployer not seen since
    attached: dict = dataclasses.field(default_factory=dict)
    owner_key: str | None = None  # with keys: the name of its deployer's key
    nbytes: int = 0  # what its record holds here, as decoded (0: restored)


class Coordinator(StatusHandlers, Service):
    role = "coordinator"

    def __init__(self, bind: str, *, heartbeat: float = HEARTBEAT_S,
                 lost_after: float | None = None,
                 parent_pid: int | None = None, keys=None, state: str | None = None):
        # a client's connection that closes, or stops answering pings, is a client gone
        # (on_disconnected): its publications and attachments go with it
        super().__init__(bind, parent_pid=parent_pid, name="coordinator", keys=keys,
                         watch_disconnects=True, router_options={
                             **ping_options(heartbeat),
                             # it takes no arrays: a larger frame closes its connection
                             zmq.MAXMSGSIZE: wire.DEFAULT_LIMITS.frame_cap(arrays=False),
                             # answers waiting in ZeroMQ for a peer that reads none: a
                             # client asks one thing at a time (1000 by default, and 1500
                             # unread lookups of a 1 MB record held 1.2 GiB here)
                             zmq.SNDHWM: COORDINATOR_SNDHWM})
        self.heartbeat = heartbeat
        self.lost_after = (lost_after if lost_after is not None
                           else SILENT_AFTER_BEATS * heartbeat)
        self.workers: dict[str, WorkerRecord] = {}
        self.models: dict[str, Published] = {}  # by name
        # with keys: names whose deployer's connection went while its workers hold its
        # model; each stays its key's as long as they do (see _check_left)
        self._left: dict[str, Published] = {}
        self._peers: dict[int, bytes] = {}  # connection's file descriptor -> peer identity
        self._user_ids: dict[bytes, str] = {}  # with keys: peer identity -> its public key
        self._labels: dict[bytes, str] = {}  # without keys: how models() names a client
        self._label_ids = itertools.count(1)
        self.started = time.time()
        self._restored_at = time.monotonic()
        self.state = state  # the file the registry is kept in (None: memory only)
        self._store = None if state is None else registry_store.RegistryLog(
            state, lambda: [(p.record, p.owner_key) for p in self.models.values()])
        if state is not None:
            entries, dropped = self._store.load()
            for why in dropped:
                self.log.warning("coordinator: %s", why)
            for record, owner_key in entries:
                self.models[record["name"]] = Published(record, None, owner_key=owner_key)
            if entries:
                self.log.info("coordinator: %d published model(s) restored from %s",
                              len(entries), state)

    def _save(self, name: str) -> None:
        """Keep the registry in the state file (if any): after every change of it, that of
        ``name`` (published, or given up), appended (registry_store.py)."""
        if self._store is not None:
            published = self.models.get(name)
            if published is None:
                self._store.drop(name)
            else:
                self._store.put(published.record, published.owner_key)

    def _owns(self, published: Published, sender: bytes) -> bool:
        """Whether the connection ``sender`` is the deployer of ``published``: the connection
        that published it, or, for a record restored after a restart, with keys, a
        connection of the key that did (without keys nothing proves it)."""
        if published.owner is not None:
            return published.owner == sender
        user_id = self._user_ids.get(sender)
        return (self.keys is not None and bool(user_id) and published.owner_key is not None
                and self.authorized.name(user_id) == published.owner_key)

    def on_socket(self, sock: zmq.Socket) -> None:
        """As ``Service``'s, noting which connection each peer's messages come on, so that
        a connection that closes names the peer that went (see the worker's)."""
        if sock is not self.router:
            super().on_socket(sock)
            return
        self.read_monitor()  # a closed connection first: its descriptor may come back
        frames = recv_now(self.router)
        if frames is not None:
            self._peers[frames[0].get(zmq.SRCFD)] = frames[0].bytes
            if self.keys is not None:  # the public key the connection authenticated with
                self._user_ids[frames[0].bytes] = frames[0].get("User-Id")
            self.handle(frames[0].bytes, frames[1:], self.router)

    def on_disconnected(self, fd: int) -> None:
        sender = self._peers.pop(fd, None)
        if sender is None:
            return
        self._user_ids.pop(sender, None)
        self._labels.pop(sender, None)
        for name, published in list(self.models.items()):
            if published.owner == sender:
                del self.models[name]
                self._save(name)
                if published.owner_key is not None:
                    published.owner = None  # (live while its workers hold it: _live)
                    self._left[name] = published
                    while len(self._left) > MAX_LEFT_NAMES:
                        del self._left[next(iter(self._left))]
                self.log.info("coordinator: %r unpublished: its deployer %s is gone", name,
                              published.record["owner"])
                continue
            for client, (connection, _, who) in list(published.attached.items()):
                if connection == sender:
                    del published.attached[client]
                    self.log.info("coordinator: client %s left %r (gone)", who, name)

    # ---- roles --------------------------------------------------------------------------------
    def _require(self, role: str, sender: bytes, what: str) -> None:
        """``PermissionError`` unless the connection ``sender`` may act as ``role``: with keys,
        a worker is a peer with the servers' key, the admin one with the servers' key or the
        cluster's own client key (made with it); without keys nothing is authenticated and
        every peer may (docs/security.md)."""
        if self.keys is None:
            return
        user_id = self._user_ids.get(sender)
        if is_server_key(self.keys, user_id):
            return
        if role == "admin" and user_id and self.authorized.name(user_id) == CLIENT:
            return
        who = self.authorized.name(user_id) if user_id else "an unknown peer"
        self.peer_log.warning(sender, "coordinator: refused %s from %s (not %s)", what, who,
                              "a worker" if role == "worker" else "the admin")
        raise PermissionError(
            f"{what} is for {'workers of the cluster' if role == 'worker' else 'its admin'} "
            f"(the {'servers' if role == 'worker' else 'servers or the cluster'}' own key), "
            f"not for the key {who!r}")

    # ---- from workers ------------------------------------------------------------------------
    def on_register(self, msg, sender: bytes):
        self._require("worker", sender, "register")
        wid = msg["worker"]
        now = time.monotonic()
        old = self.workers.get(wid)
        if (old is not None and old.identity != sender
                and now - old.last_seen <= self.lost_after):
            self.peer_log.warning(sender, "coordinator: refused a second registration of "
                                  "live worker %r (pid %d at %s; registered: pid %d at %s)",
                                  wid, msg["pid"], msg["address"], old.pid, old.address)
            raise PermissionError(
                f"worker id {wid!r} is registered by a live worker (pid {old.pid} at "
                f"{old.address}); start this one with another --id, or wait until that one "
                f"has been silent {self.lost_after:g} s")
        if old is not None and old.pid != msg["pid"]:
            self.log.warning("coordinator: worker id %r re-registered by pid %d (was %d)",
                             wid, msg["pid"], old.pid)
        self.workers[wid] = WorkerRecord(wid, msg["address"], msg["pid"],
                                         msg.get("host") or "?", sender, now, now,
                                         code=bool(msg.get("code")), link=msg.get("link"),
                                         link_host=msg.get("link_host"))
        self.log.info("coordinator: worker %s registered (pid %d, %s)", wid, msg["pid"],
                      msg["address"])
        # every worker knows the others' addresses and local links: a client has a worker
        # dial only those (send_value, load_stage's neighbours). Those not heard from lately
        # too: a worker whose job runs long sends no beat meanwhile
        addresses = _addresses(self.workers.values())
        frames = wire.encode("workers", {"addresses": addresses})  # (once for them all)
        for record in self.workers.values():
            if record.identity != sender:
                self._send(self.router, record.identity, frames)
        return {"heartbeat": self.heartbeat, "workers": addresses}

    def on_heartbeat(self, msg, sender: bytes):
        # (with keys, from a worker's key only: a client that dialled with a dead worker's
        # identity kept it listed alive, with the stages it said it held)
        self._require("worker", sender, "heartbeat")
        record = self.workers.get(msg["worker"])
        if record is None:  # a worker the coordinator does not know: it must register again
            raise LookupError(f"worker {msg['worker']!r} is not registered")
        if record.identity != sender:  # only the connection that registered it beats for it
            raise PermissionError(f"worker {msg['worker']!r} is registered on another "
                                  "connection")
        record.last_seen = time.monotonic()
        record.memory = msg.get("memory")
        record.stages = list(msg.get("stages") or [])
        record.keepers = msg.get("keepers") or {}
        # answered only when asked: each answer wakes the worker's loop and I/O thread, and
        # a worker needs one only to know that the coordinator is there (--orphan-after);
        # a beat the coordinator refuses is always answered (the worker registers again)
        return None if msg.get("answer") else NO_REPLY

    # ---- from clients ------------------------------------------------------------------------
    def peer_name(self, identity: bytes) -> str:
        """A peer as the logs name it: a registered worker by its id, a client as models()
        names it (with keys, its key's name), never by the identity it chose."""
        worker = next((r.id for r in self.workers.values() if r.identity == identity), None)
        if worker is not None:
            return f"worker {worker}"
        name = self._client_name("", identity)
        return name if name.startswith("client ") else f"the client with key {name!r}"

    def admit(self, sender: bytes, msg) -> None:
        user_id = self._user_ids.get(sender)
        if self.authorized is not None and not self.authorized.holds(user_id or ""):
            raise Authorized.refusal(self.authorized.name(user_id or ""), msg.req)

    def log_account(self, identity: bytes) -> bytes | str:
        """With keys, a peer's warnings share its key's allowance (see ``Service``)."""
        return self._user_ids.get(identity) or identity

    # ---- models shared by name (from clients) ------------------------------------------------
    def _client_name(self, claimed: str, sender: bytes) -> str:
        """Who a client is: with keys, the name of the authorized key its connection
        authenticated with (whatever it claims); without, what it says (its identity)."""
        user_id = self._user_ids.get(sender)
        if self.keys is None or not user_id:
            # never the identity it claims (that of its sockets to the workers): listed to
            # everyone, another client could pose as it there
            label = self._labels.get(sender)
            if label is None:
                label = self._labels[sender] = f"client {next(self._label_ids)}"
            return label
        return self.authorized.name(user_id)

    def on_publish(self, msg, sender: bytes):
        record = dict(msg["record"])
        self._check_record(record, sender)
        if _unseen(record["name"]):
            raise ValueError(f"the name {record['name']!r} holds {_unseen(record['name'])}, a "
                             "character that does not show (a control, format or separator "
                             "character): models() would list it as a name it is not; "
                             "choose one of characters that show")
        record["owner"] = self._client_name(record["owner"], sender)
        name = record["name"]
        self._check_left(name, sender)
        held = self.models.get(name)
        if held is not None and not self._owns(held, sender) and self._live(held):
            was = held.record
            raise PermissionError(
                f"the name {name!r} is taken: {was['class']} (model {was['model']}) published "
                f"by {was['owner']} {time.time() - was['created']:.0f} s ago is live; its "
                "deployer's close() frees the name, or choose another")
        alike = next((n for n, p in self.models.items() if n != name and _look(n) == _look(name)
                      and not self._owns(p, sender) and self._live(p)), None)
        if alike is not None:
            was = self.models[alike].record
            raise PermissionError(
                f"the name {name!r} reads as {alike!r}, published by {was['owner']} and live: "
                "a client attaching by the name it reads in models() could take one for the "
                "other; choose a name that reads differently")
        user_id = self._user_ids.get(sender)
        owner_key = self.authorized.name(user_id) if self.keys is not None and user_id else None
        mine = [p for n, p in self.models.items() if n != name and (
            p.owner == sender or (owner_key is not None and p.owner_key == owner_key))]
        self._check_room(sender, "published models", MAX_PUBLISHED_PER_CLIENT, mine,
                         "close the deployments it no longer shares")
        held = sum(p.nbytes for p in mine)
        if held + msg.nbytes > MAX_PUBLISHED_BYTES_PER_CLIENT:
            self.peer_log.warning(sender, "coordinator: refused %s a record of %d bytes past "
                                  "its published records' %d", self.peer_name(sender),
                                  msg.nbytes, held)
            raise RuntimeError(
                f"this client's published records hold {held >> 20} MiB here, and this one "
                f"({msg.nbytes >> 20} MiB as decoded) would pass the cap of "
                f"{MAX_PUBLISHED_BYTES_PER_CLIENT >> 20} MiB: close the deployments it no "
                "longer shares")
        self.models[name] = Published(record, sender, owner_key=owner_key, nbytes=msg.nbytes)
        self._save(name)
        self.log.info("coordinator: %s published %r (%s, %d stage(s))", record["owner"], name,
                      record["class"], len(record["workers"]))

    def _check_left(self, name: str, sender: bytes) -> None:
        """With keys, refuse (``PermissionError``) another key a name that reads as one whose
        deployer's connection went while its workers still hold its model: it stays that
        key's while they do. Before, the name was free at once, and a client that published
        under it had the inputs of every client that attached by it (they expected the model
        still loaded there)."""
        user_id = self._user_ids.get(sender)
        key = self.authorized.name(user_id) if self.keys is not None and user_id else None
        for left, published in list(self._left.items()):
            if not self._live(published):
                del self._left[left]
            elif published.owner_key != key and _look(left) == _look(name):
                was = published.record
                alike = f"the name {name!r}" + (f" reads as {left!r}, which" if left != name
                                                  else "")
                raise PermissionError(
                    f"{alike} stays {was['owner']}'s: its "
                    f"deployer's connection went while its model {was['model']} is still "
                    "loaded on its workers, and a client attaching by that name expects "
                    "that deployer's model; it is free once they no longer hold it, or "
                    "choose another name")

    def on_unpublish(self, msg, sender: bytes):
        held = self.models.get(msg["name"])
        if held is None or held.record["model"] != msg["model"]:
            return False  # gone already (its deployer reconnected, or it was replaced)
        if not self._owns(held, sender) and (held.owner is not None or self._live(held)):
            raise PermissionError(f"{msg['name']!r} was published by {held.record['owner']}: "
                                  "only its deployer unpublishes it (by closing it)")
        del self.models[msg["name"]]
        self._save(msg["name"])
        self.log.info("coordinator: %r unpublished by its deployer", msg["name"])
        return True

    def on_models(self, msg, sender: bytes):
        key = self._status_key(sender)
        return [self._summary(published, None if key is None or published.owner_key == key
                              else sender) for published in self.models.values()]

    def on_lookup(self, msg, sender: bytes):
        return self._find(msg["name"]).record

    def on_attach(self, msg, sender: bytes):
        published = self._find(msg["name"], msg["model"])
        client = self._client_name(msg["client"], sender)
        if (sender, msg["client"]) not in published.attached:
            self._check_room(sender, f"attachments to {msg['name']!r}", MAX_ATTACHED_PER_CLIENT,
                             [a for a in published.attached.values()
                              if self._same_client(a[0], sender)],
                             "close the attached models it no longer uses")
        published.attached[(sender, msg["client"])] = (sender, time.time(), client)
        self.log.info("coordinator: client %s attached to %r", client, msg["name"])

    def on_detach(self, msg, sender: bytes):
        published = self.models.get(msg["name"])
        if published is not None and published.record["model"] == msg["model"]:
            published.attached.pop((sender, msg["client"]), None)  # (only its own)

    def _check_record(self, record: dict, sender: bytes) -> None:
        """Refuse (``ValueError``, logged) a record that is not a deployment on this cluster's
        workers: each stage on a registered worker, at its address, one stage a worker, and
        its names short. ``models()`` lists every record to every client, so one client's
        made-up stage lists or names would otherwise make it too large to answer anyone."""
        why = next((f"its {key} has {len(record[key])} characters, more than {cap}"
                    for key, cap in (("name", MAX_NAME_CHARS), ("model", MAX_NAME_CHARS),
                                     ("class", 4 * MAX_NAME_CHARS))
                    if len(record[key]) > cap), None)
        seen: set[str] = set()
        for s in record["workers"] if why is None else ():
            worker = self.workers.get(s["worker"])
            if worker is None or worker.address != s["address"] or s["worker"] in seen:
                why = (f"its stage {s['stage']} is on {s['worker'][:64]!r} at "
                       f"{s['address'][:64]!r}, " + ("a worker that holds another stage of it"
                                                     if s["worker"] in seen else
                                                     "which is no worker registered here"))
                break
            seen.add(s["worker"])
        if why is not None:
            self.peer_log.warning(sender, "coordinator: refused to publish a record of %s: %s",
                                  self.peer_name(sender), why)
            raise ValueError(f"not a deployment on this cluster's workers: {why}; publish a "
                             "model deployed on this cluster (deploy(..., name=...))")

    def _same_client(self, connection: bytes, sender: bytes) -> bool:
        """Whether ``connection`` counts as the client ``sender`` (with keys: the same key)."""
        if connection == sender:
            return True
        user_id = self._user_ids.get(sender)
        return self.keys is not None and bool(user_id) and \
            self._user_ids.get(connection) == user_id

    def _check_room(self, sender: bytes, what: str, cap: int, held: list, advice: str) -> None:
        """Refuse (``RuntimeError``, logged) one more of ``what`` for a client that holds
        ``held`` already, ``cap`` or more."""
        if len(held) < cap:
            return
        self.peer_log.warning(sender, "coordinator: refused %s one more of its %d %s (the "
                              "most one client may)", self.peer_name(sender), len(held), what)
        raise RuntimeError(f"this client holds {len(held)} {what}, the most one client may "
                           f"({cap}): {advice}")

    def _find(self, name: str, model: str | None = None) -> Published:
        published = self.models.get(name)
        if published is None or model not in (None, published.record["model"]):
            names = ", ".join(repr(n) for n in sorted(self.models)) or "none"
            raise LookupError(f"no model is published as {name!r} on this cluster (published: "
                              f"{names})")
        return published

    def _worker_alive(self, worker_id: str, now: float) -> bool:
        record = self.workers.get(worker_id)
        return record is not None and now - record.last_seen <= self.lost_after

    def _live(self, published: Published) -> bool:
        """A deployment is live while its deployer is connected (else it is not listed) and
        every worker holding a stage of it is alive. One restored from the state file is
        live while its workers, registered again, hold its stages (and for a grace period
        after the restart, while they have not registered yet)."""
        now = time.monotonic()
        if published.owner is not None:
            return all(self._worker_alive(s["worker"], now)
                       for s in published.record["workers"])
        model, grace = published.record["model"], now - self._restored_at < RESTORED_GRACE_S
        for s in published.record["workers"]:
            worker = self.workers.get(s["worker"])
            if worker is None or worker.last_seen == worker.registered:  # no beat yet
                if not grace:
                    return False
            elif not (self._worker_alive(s["worker"], now)
                      and f"stage {s['stage']} of {model}" in worker.stages):
                return False
        return True

    def _summary(self, published: Published, asker: bytes | None = None) -> dict:
        """A published model as ``models`` lists it (the record less its structure); of the
        clients attached, to ``asker`` its own key's only (None: every one, for the model's
        deployer's key and the cluster's own keys, and without keys). Before, every key
        read who was attached to every model and since when
        (tests/integration/test_s12_models.py)."""
        record, now = published.record, time.monotonic()
        return {
            "name": record["name"], "model": record["model"], "class": record["class"],
            "owner": record["owner"], "writable": record["writable"],
            "created": record["created"], "live": self._live(published),
            "stages": [{"stage": s["stage"], "worker": s["worker"], "address": s["address"],
                        "alive": self._worker_alive(s["worker"], now)}
                       for s in record["workers"]],
            "clients": [{"client": who, "since": since}  # attached
                        for connection, since, who in published.attached.values()
                        if asker is None or self._same_client(connection, asker)],
        }

    def on_shutdown(self, msg, sender: bytes):
        self._require("admin", sender, "shutdown")
        reason = msg.get("reason") or "a client asked"
        for record in self.workers.values():
            self.reply(self.router, record.identity, 0, "shutdown", {"reason": reason})
        self.stop(reason)



def main(argv=None) -> int:
    import argparse
    import sys

    from disthook.service.endpoint import DEFAULT_COORDINATOR, EndpointInUse, parse

    p = argparse.ArgumentParser(prog="disthook coordinator",
                                description="Run the coordinator of a disthook cluster.")
    p.add_argument("--bind", default=DEFAULT_COORDINATOR,
                   help="endpoint to listen on; port 0 picks a free one "
                        f"(default {DEFAULT_COORDINATOR}, loopback only)")
    p.add_argument("--heartbeat", type=float, default=HEARTBEAT_S,
                   help=f"seconds between heartbeats (default {HEARTBEAT_S})")
    p.add_argument("--parent-pid", type=int, help="stop when this parent process is gone")
    p.add_argument("--keys", metavar="DIR",
                   help="key directory (disthook keys generate DIR): encrypt every connection "
                        "and accept only the peers it authorizes")
    p.add_argument("--state", metavar="FILE",
                   help="keep the published-model registry in FILE, so that a coordinator "
                        "started again knows every name and its owner")
    p.add_argument("--log-level", default="INFO", type=str.upper, choices=LOG_LEVELS,
                   help="the least severe messages logged to stderr (default INFO)")
    args = p.parse_args(argv)
    log_to_stderr(args.log_level)
    from disthook.service.security import SERVER, Keys

    try:
        keys = Keys.load(args.keys, SERVER) if args.keys else None
        parse(args.bind, "--bind")
        coordinator = Coordinator(args.bind, heartbeat=args.heartbeat,
                                  parent_pid=args.parent_pid, keys=keys, state=args.state)
    except EndpointInUse as exc:
        print(f"disthook coordinator: {exc.advice('--bind')}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as exc:  # a bad address, unreadable key files
        print(f"disthook coordinator: {exc}", file=sys.stderr)
        return 1
    # the first line on stdout is the endpoint, for launchers that asked for port 0
    print(f"disthook coordinator listening on {coordinator.address}", flush=True)
    coordinator.serve_forever()
    return 0

