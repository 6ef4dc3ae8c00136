"""The coordinator's published-model registry kept in a file, so that a coordinator started
again (``--state FILE``) still knows every name and who owns it: no other client can take
a name over while the coordinator was away.

Each entry is the deployer's ``publish`` message as it came over the wire (read back
through ``wire.decode``, with every check a message gets) and the owner: with keys, the
name of the key its deployer authenticated with (that key may unpublish and publish again
under the name); without keys, nothing a later connection could prove, so only a model no
longer held by its workers gives its name up. It is read with msgpack only (no pickle).

The file is a log: a header line, then one record per change (a name published, with its
entry; a name given up), each its length, its CRC-32 and its msgpack, appended and synced
to the disk (``fsync``) before the change is answered. So a change costs what it adds, not
what the registry holds (before, the whole registry was written again at each: 1.7 s a
change at 85 MiB). A process killed mid-append leaves a record cut short, or one whose CRC
does not match, at the end: reading stops there, so everything appended before stands
(and the change that was cut was never answered). Once the log holds more than twice what
it would written afresh (and more than ``COMPACT_FLOOR``), it is written afresh: under a
temporary name, synced, renamed into place, its directory synced, so that a crash leaves
the old log or the new one whole. A coordinator that starts writes the log afresh too,
leaving out a cut end. A file of the format before (one msgpack map) is read as well.
"""
from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Callable

import msgpack

from disthook import wire

__all__ = ["RegistryLog", "load", "save"]

FORMAT = 1  # the whole-file format before the log (read only)
MAGIC = b"disthook registry log 2\n"
_HEAD = struct.Struct(">II")  # a record's length and CRC-32
COMPACT_FLOOR = 4 << 20  # a log smaller than this is never written afresh
Entries = list[tuple[dict, "str | None"]]


def _put(record: dict, owner_key: str | None) -> dict:
    return {"op": "put", "owner_key": owner_key,
            "frames": [bytes(f) for f in wire.encode("publish", {"record": dict(record)})]}


def _framed(item: dict) -> bytes:
    body = msgpack.packb(item, use_bin_type=True)
    return _HEAD.pack(len(body), zlib.crc32(body)) + body


def _sync_dir(path: str) -> None:
    fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save(path: str, entries: Entries) -> int:
    """Write ``entries`` (each: a published record, its owner key's name or None) as a
    fresh log, whole or not at all; its size."""
    data = MAGIC + b"".join(_framed(_put(record, owner_key)) for record, owner_key in entries)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _sync_dir(path)
    return len(data)


def load(path: str) -> tuple[Entries, list[str]]:
    """The entries the file holds (none if there is no file yet), and what was dropped and
    why (a damaged entry, or a log's cut end, never stops the coordinator)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return [], []
    except OSError as exc:
        return [], [f"{path} is not a registry file ({exc}); starting with none"]
    if data.startswith(MAGIC):
        return _read_log(path, data)
    return _read_whole(path, data)


def _entry(item, where: str, dropped: list) -> tuple[dict, str | None] | None:
    try:
        msg = wire.decode(item["frames"])
        owner_key = item.get("owner_key")
        if msg.type != "publish" or not (owner_key is None or isinstance(owner_key, str)):
            raise wire.WireError("not a publish entry")
        return dict(msg["record"]), owner_key
    except (wire.WireError, KeyError, TypeError, AttributeError) as exc:
        dropped.append(f"{where}: {exc}")
        return None


def _read_log(path: str, data: bytes) -> tuple[Entries, list[str]]:
    live: dict[str, tuple[dict, str | None]] = {}
    dropped: list[str] = []
    at, n = len(MAGIC), 0
    while at < len(data):
        if at + _HEAD.size > len(data):
            dropped.append(f"{path}: a record cut short at byte {at} (a write the process "
                           "did not finish); what came before stands")
            break
        size, crc = _HEAD.unpack_from(data, at)
        body = data[at + _HEAD.size:at + _HEAD.size + size]
        if len(body) < size or zlib.crc32(body) != crc:
            dropped.append(f"{path}: record {n} at byte {at} is cut short or damaged (a "
                           "write the process did not finish); it and what follows dropped")
            break
        at, n = at + _HEAD.size + size, n + 1
        try:
            item = msgpack.unpackb(body, raw=False)
            op = item["op"]
        except (ValueError, TypeError, KeyError, msgpack.ExtraData) as exc:
            dropped.append(f"record {n - 1} of {path}: {exc}")
            continue
        if op == "drop" and isinstance(item.get("name"), str):
            live.pop(item["name"], None)
        elif op == "put":
            entry = _entry(item, f"record {n - 1} of {path}", dropped)
            if entry is not None:
                live.pop(entry[0]["name"], None)
                live[entry[0]["name"]] = entry  # (the latest last)
        else:
            dropped.append(f"record {n - 1} of {path}: not a registry change")
    return list(live.values()), dropped


def _read_whole(path: str, data: bytes) -> tuple[Entries, list[str]]:
    """The format before the log: one msgpack map of every entry."""
    try:
        whole = msgpack.unpackb(data, raw=False)
    except (ValueError, msgpack.ExtraData) as exc:
        return [], [f"{path} is not a registry file ({exc}); starting with none"]
    if not isinstance(whole, dict) or whole.get("format") != FORMAT:
        return [], [f"{path} is not a registry file of format {FORMAT}; starting with none"]
    entries, dropped = [], []
    for i, item in enumerate(whole.get("models") or ()):
        entry = _entry(item, f"entry {i} of {path}", dropped)
        if entry is not None:
            entries.append(entry)
    return entries, dropped


class RegistryLog:
    """The registry file of a coordinator: ``load`` once, then ``put`` or ``drop`` at each
    change. ``entries`` gives the registry as it is now, for a log written afresh."""

    def __init__(self, path: str, entries: Callable[[], Entries]):
        self.path, self._entries = path, entries
        self._size = 0  # of the log now
        self._fresh = 0  # of the log when last written afresh (what the registry held)

    def load(self) -> tuple[Entries, list[str]]:
        """What the file holds; then the log is written afresh from it (a cut end, or the
        format before, goes)."""
        entries, dropped = load(self.path)
        if entries or dropped or os.path.exists(self.path):
            self._size = self._fresh = save(self.path, entries)
        return entries, dropped

    def put(self, record: dict, owner_key: str | None) -> None:
        self._append(_framed(_put(record, owner_key)))

    def drop(self, name: str) -> None:
        self._append(_framed({"op": "drop", "name": name}))

    def _append(self, framed: bytes) -> None:
        if self._size == 0:  # no log yet
            self._size = self._fresh = save(self.path, [])
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        try:
            view = memoryview(framed)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        except OSError:  # (a full disk): what this wrote goes, so the next change's follows
            os.ftruncate(fd, self._size)  # the log's last whole record
            raise
        finally:
            os.close(fd)
        self._size += len(framed)
        if self._size > max(COMPACT_FLOOR, 2 * self._fresh):
            self._size = self._fresh = save(self.path, self._entries())
