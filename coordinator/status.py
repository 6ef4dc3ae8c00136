"""What the coordinator says of the cluster when asked (``status``): itself, and each
registered worker with its stages, liveness and memory (a mixin of ``Coordinator``). With
keys, a key reads the names of its own stages and the published ones only."""
from __future__ import annotations

import os
import socket
import time

from disthook import wire
from disthook.service.security import CLIENT, is_server_key

__all__ = ["StatusHandlers"]


class StatusHandlers:
    def on_status(self, msg, sender: bytes):
        now = time.monotonic()
        key = self._status_key(sender)
        return {
            "coordinator": {"address": self.address, "pid": os.getpid(),
                            "host": socket.gethostname(), "uptime": time.time() - self.started,
                            "heartbeat": self.heartbeat,
                            # every peer's messages: the cluster's own keys only
                            **({"messages": wire.decoded_count()} if key is None else {})},
            "workers": [
                {"id": r.id, "address": r.address, "pid": r.pid, "host": r.host,
                 "stages": r.stages if key is None else _stages_shown(r, key),
                 "alive": now - r.last_seen <= self.lost_after,
                 "last_seen": now - r.last_seen, "memory": r.memory, "code": r.code,
                 **({"link": r.link, "link_host": r.link_host} if r.link else {})}
                for r in sorted(self.workers.values(), key=lambda r: r.registered)
            ],
        }

    def _status_key(self, sender: bytes) -> str | None:
        """The key whose own stages ``status`` names to ``sender`` (the published ones too);
        None for a peer that reads every stage: without keys every peer, with keys the
        cluster's own (the servers', the admin's ``client``)."""
        if self.keys is None:
            return None
        user_id = self._user_ids.get(sender)
        if is_server_key(self.keys, user_id):
            return None
        name = self.authorized.name(user_id) if user_id else ""
        return None if name == CLIENT else name


def _stages_shown(record, key: str) -> list[str]:
    """A worker's stages as ``status`` names them to ``key``: its own key's and the
    published ones by name, each of the others as ``stage N of another key's model (k)``
    (how many there are places a deploy: clients place stages on the workers holding the
    fewest). Before, every key read every stage's name, another key's model ids with them.
    A worker that says nothing of whose they are (no keepers: without keys, or older)
    has all its stages shown so."""
    keepers = record.keepers if isinstance(record.keepers, dict) else {}
    lists = [keepers.get(who) for who in ("", key)]
    shown = {i for held in lists if isinstance(held, list) for i in held if isinstance(i, int)}
    out, hidden = [], 0
    for i, stage in enumerate(record.stages):
        if i in shown:
            out.append(stage)
            continue
        hidden += 1
        words = str(stage).split(" ", 2)
        index = words[1] if len(words) == 3 and words[0] == "stage" else "?"
        out.append(f"stage {index} of another key's model ({hidden})")
    return out
