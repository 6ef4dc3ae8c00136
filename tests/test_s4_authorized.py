"""The authorized keys a process checks each handshake (ZAP) and each message with, and
names its clients by (``security.Authorized``): read again when a key file came or went, at
once, and at least every second for a file changed in place; not parsed again for every
handshake, which a peer holding no key could make a worker do for the cost of a key pair,
nor for every name (an authorized client's refused requests: 200 refused ``register``s
took a coordinator 1.15 s of CPU with 202 keys authorized, 0.17 s now)."""
import os

from disthook.service import security
from disthook.service.security import REREAD_AUTHORIZED_S, Authorized, Keys, add_client, generate


def test_the_folder_is_parsed_again_only_when_it_changed(tmp_path, monkeypatch):
    directory = str(tmp_path / "keys")
    generate(directory)
    for i in range(20):
        add_client(directory, f"user{i}")
    parsed = []
    real = Keys.authorized
    monkeypatch.setattr(Keys, "authorized", lambda self: parsed.append(1) or real(self))
    keys, now = Keys.load(directory, security.SERVER), [100.0]
    authorized = Authorized(keys, clock=lambda: now[0])
    user0 = Keys.load(directory, "user0").public.decode()
    for _ in range(100):  # handshakes of peers with keys of their own, within a second
        assert "made-up key" not in authorized.read()
    assert len(parsed) == 1
    assert authorized.holds(user0)
    for _ in range(100):  # a client's requests that name it (refusals, logs, owners)
        assert authorized.name(user0) == "user0"
    assert len(parsed) == 1
    os.remove(os.path.join(directory, "authorized", "user0.key"))  # revoked: at once
    assert user0 not in authorized.read() and len(parsed) == 2
    assert authorized.name(user0) == f"key {user0[:8]}..."
    user1_file = os.path.join(directory, "authorized", "user1.key")
    user1 = Keys.load(directory, "user1").public.decode()
    os.chmod(user1_file, 0o666)  # others may change it: it authorizes no one ...
    assert authorized.holds(user1)
    now[0] += REREAD_AUTHORIZED_S  # ... from at most a second later
    assert not authorized.holds(user1) and len(parsed) == 3
