"""With keys, ``models()`` lists the clients attached to a published model (by key name,
and since when) to its deployer's key and to the cluster's own keys; another key reads its
own attachments only. Before, every key read who was attached to every model and when
each came: which other researchers used which model, as they came and went."""
import pytest

from disthook import nn
from disthook.distributed import connect, local_cluster
from disthook.service.security import add_client

pytestmark = pytest.mark.timeout(180)


def _clients(cluster, name: str) -> list[str]:
    (listed,) = [m for m in cluster.models() if m["name"] == name]
    return sorted(c["client"] for c in listed["clients"])


def test_a_key_reads_who_is_attached_only_to_its_own_model_and_its_own_attachments():
    with local_cluster(workers=1, secure=True) as cluster:
        keys = cluster.keys.directory
        for name in ("alice", "bob", "carol"):
            add_client(keys, name)
        with connect(cluster.address, keys=keys, key_name="alice") as alice, \
                connect(cluster.address, keys=keys, key_name="bob") as bob, \
                connect(cluster.address, keys=keys, key_name="carol") as carol:
            alice.deploy(nn.Sequential(nn.Linear(3, 2)), stages=1, name="s12-listed")
            bob.attach("s12-listed")
            assert _clients(carol, "s12-listed") == []  # before: ['bob']
            carol.attach("s12-listed")
            assert _clients(carol, "s12-listed") == ["carol"]  # its own
            assert _clients(bob, "s12-listed") == ["bob"]
            assert _clients(alice, "s12-listed") == ["bob", "carol"]  # the deployer's key
            assert _clients(cluster, "s12-listed") == ["bob", "carol"]  # the admin's
