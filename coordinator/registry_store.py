"""The coordinator's published-model registry kept in a file, so that a coordinator started
again (``--state FILE``) still knows every name and who owns it: no other client can take
a name over while the coordinator was away.

Each entry is the deployer's ``publish`` message as it came over the wire (read back
through ``wire.decode``, with every check a message gets) and the owner: with keys, the
name of the key its deployer authenticated with (that key may unpublish and publish again
under the name); without keys, nothing a later connection could prove, so only a model no
longer held by its workers gives its name up. The file is written whole under a temporary
name and renamed into place, and is read with msgpack only (no pickle).
"""
from __future__ import annotations

import os

import msgpack

from disthook import wire

__all__ = ["load", "save"]

FORMAT = 1


def save(path: str, entries: list[tuple[dict, str | None]]) -> None:
    """Write ``entries`` (each: a published record, its owner key's name or None)."""
    out = {"format": FORMAT, "models": [
        {"owner_key": owner_key,
         "frames": [bytes(f) for f in wire.encode("publish", {"record": dict(record)})]}
        for record, owner_key in entries]}
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(msgpack.packb(out, use_bin_type=True))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def load(path: str) -> tuple[list[tuple[dict, str | None]], list[str]]:
    """The entries ``save`` wrote (none if there is no file yet), and what was dropped and
    why (a damaged entry never stops the coordinator)."""
    try:
        with open(path, "rb") as f:
            data = msgpack.unpackb(f.read(), raw=False)
    except FileNotFoundError:
        return [], []
    except (OSError, ValueError, msgpack.ExtraData) as exc:
        return [], [f"{path} is not a registry file ({exc}); starting with none"]
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        return [], [f"{path} is not a registry file of format {FORMAT}; starting with none"]
    entries, dropped = [], []
    for i, entry in enumerate(data.get("models") or ()):
        try:
            msg = wire.decode(entry["frames"])
            owner_key = entry.get("owner_key")
            if msg.type != "publish" or not (owner_key is None or isinstance(owner_key, str)):
                raise wire.WireError("not a publish entry")
            entries.append((dict(msg["record"]), owner_key))
        except (wire.WireError, KeyError, TypeError) as exc:
            dropped.append(f"entry {i} of {path}: {exc}")
    return entries, dropped
