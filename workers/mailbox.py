"""Room in a worker's pipeline mailbox (``WorkerState.mailbox``), made as a pipe record
goes in.

Two kinds of record wait there: a training step's activations and gradients, and values one
worker pushes to another for a client's call (``send_value``: step ``"<client>/<value
id>"``). A value nobody asks for stays until it is put out, and a client may have a worker
push any values it names, so values are kept apart: at most ``VALUES_PER_CLIENT`` of one
client (its oldest goes first), and when the mailbox is full a value goes before any
training step's record, so that no client's values push out another's steps.
"""
from __future__ import annotations

__all__ = ["VALUES_PER_CLIENT", "admit", "client_of_value", "forget_values", "whose"]

VALUES_PER_CLIENT = 1024  # values pushed here for one client, not yet taken by its calls


def client_of_value(key: tuple) -> str | None:
    """The client (its identity, hex) a mailbox key's value is for; None for a step's."""
    return key[1].partition("/")[0] if key[2] == "value" else None


def whose(key: tuple, step_clients: dict) -> bytes | None:
    """The client (its identity) a mailbox record is for: a value's, or the client running
    the training step a step's record belongs to (``step_clients``: (model, step) -> it);
    None when not known."""
    value_of = client_of_value(key)
    return step_clients.get(key[:2]) if value_of is None else _identity(value_of)


def admit(mailbox: dict, key: tuple, msg, limit: int, worker_id: str,
          gone=()) -> list[tuple]:
    """Put ``msg`` in ``mailbox`` under ``key``, first putting out what must go (or, for a
    value when the mailbox is full of steps' records or its client is ``gone``, not putting
    it in); a warning ``(text, peer)`` for each record dropped (peer: the client whose value
    it was, so that the log names it a few times a minute at most; None for a step's)."""
    if key[2] != "value" and len(mailbox) < limit:  # a step's record, room for it: in
        mailbox[key] = msg
        return []
    out, client = [], client_of_value(key)
    if client is not None and _identity(client) in gone:  # pushed after its client left
        return []
    if client is not None and key not in mailbox:
        own = [k for k in mailbox if client_of_value(k) == client]
        for old in own[:max(0, len(own) - VALUES_PER_CLIENT + 1)]:
            del mailbox[old]
            vid = old[1].partition("/")[2]
            text = (f"worker {worker_id}: a client keeps {VALUES_PER_CLIENT} values pushed "
                    f"here that none of its calls took; dropping value {vid!r}")
            out.append((text, _identity(client)))
    if len(mailbox) >= limit and key not in mailbox:
        old = next((k for k in mailbox if k[2] == "value"), None)
        if old is None and client is not None:  # full of steps' records: they stay
            vid = key[1].partition("/")[2]
            text = (f"worker {worker_id}: pipeline mailbox full ({limit}); dropping the value "
                    f"{vid!r} pushed here")
            return [(text, _identity(client))]
        old = next(iter(mailbox)) if old is None else old
        del mailbox[old]
        who = client_of_value(old)
        out.append((f"worker {worker_id}: pipeline mailbox full ({limit}); dropping {old}",
                    _identity(who)))
    mailbox[key] = msg
    return out


def _identity(client: str | None) -> bytes | None:
    """The identity a value's client is named by (None: not hex, a step's record)."""
    try:
        return None if client is None else bytes.fromhex(client)
    except ValueError:
        return None


def forget_values(mailbox: dict, identity: bytes) -> None:
    """A client went away: the values pushed here for its calls go."""
    client = identity.hex()
    for key in [k for k in mailbox if client_of_value(k) == client]:
        del mailbox[key]
