"""Key files others may read or change are refused, as ssh refuses them: a secret key that
group or others may read (it then proves nothing about who holds it), and for the servers a
key directory or ``authorized/`` that others may write (they could authorize themselves).
``generate`` makes keys that pass whatever the umask."""
import os
import subprocess
import sys

import pytest

from disthook.service.security import SERVER, Keys, add_client, generate


@pytest.fixture
def keys(tmp_path):
    old = os.umask(0o002)  # a umask that leaves new folders group-writable
    try:
        generate(tmp_path / "k")
        add_client(tmp_path / "k", "alice")
    finally:
        os.umask(old)
    return tmp_path / "k"


def test_keys_made_under_a_loose_umask_pass(keys):
    Keys.load(keys)
    Keys.load(keys, "alice")
    server = Keys.load(keys, SERVER)
    assert len(server.authorized()) == 3


def test_a_secret_key_others_may_read_is_refused(keys):
    os.chmod(keys / "alice.key_secret", 0o644)
    with pytest.raises(PermissionError, match=r"alice.key_secret has mode 0644: .*chmod go-w,o-rwx"):
        Keys.load(keys, "alice")
    os.chmod(keys / "alice.key_secret", 0o620)  # its group may change it
    with pytest.raises(PermissionError, match="mode 0620"):
        Keys.load(keys, "alice")
    os.chmod(keys / "alice.key_secret", 0o440)  # read through its group (k8s' fsGroup)
    Keys.load(keys, "alice")


def test_an_authorized_folder_others_may_write_is_refused_by_the_servers(keys):
    server = Keys.load(keys, SERVER)
    os.chmod(keys / "authorized", 0o777)
    with pytest.raises(PermissionError, match=r"authorized has mode 0777: .*chmod go-w"):
        Keys.load(keys, SERVER)
    with pytest.raises(PermissionError):  # the gate, which reads it at each connection
        server.authorized()
    Keys.load(keys, "alice")  # (a client reads no authorized/)
    os.chmod(keys, 0o1777)  # sticky, as a Kubernetes secret volume's folder: nobody may
    os.chmod(keys / "authorized", 0o755)  # replace what another put there
    Keys.load(keys, SERVER)
    os.chmod(keys / "authorized" / "alice.key", 0o666)  # others could swap alice's key
    assert server.public in server.authorized() and len(server.authorized()) == 2


def test_a_coordinator_with_a_loose_key_directory_says_why_and_stops(keys):
    os.chmod(keys / "server.key_secret", 0o604)
    run = subprocess.run([sys.executable, "-m", "coordinator", "--bind", "tcp://127.0.0.1:0",
                          "--keys", str(keys)], check=False, capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 1
    assert "server.key_secret has mode 0604" in run.stderr and "chmod go-w,o-rwx" in run.stderr
