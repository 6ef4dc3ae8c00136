"""With keys, a published name whose deployer's connection went (its process killed, its
network cut) while its model stays loaded on the workers. The coordinator freed the name at
once: another key published its own model under it, and a client that attached by the name
it had used before reached that model, which sees its inputs. Now the name (and a name that
reads as it) stays the deployer's key's while the workers hold its model: another key is
refused with ``NameTaken``, the deployer's key may publish it again."""
import subprocess
import sys
import textwrap

import pytest

import disthook as torch
from disthook import nn
from disthook.distributed import NameTaken, connect, local_cluster
from disthook.service.security import add_client

pytestmark = pytest.mark.timeout(180)

DEPLOYER = textwrap.dedent("""
    import sys, time
    from disthook import nn
    from disthook.distributed import connect
    cluster = connect(sys.argv[1], keys=sys.argv[2], key_name="alice", timeout=30)
    cluster.deploy(nn.Sequential(nn.Linear(3, 2)), stages=1, name="s8-llm")
    print("published", flush=True)
    time.sleep(300)
""")


def test_a_name_whose_deployer_went_stays_its_keys_while_its_model_is_loaded():
    with local_cluster(workers=1, secure=True) as cluster:
        keys = cluster.keys.directory
        for name in ("alice", "eve", "bob"):
            add_client(keys, name)
        alice = subprocess.Popen([sys.executable, "-c", DEPLOYER, cluster.address, keys],
                                 stdout=subprocess.PIPE, text=True)
        try:
            assert alice.stdout.readline().strip() == "published"
        finally:
            alice.kill()  # gone without closing anything: its model stays loaded
            alice.wait()
            alice.stdout.close()
        with connect(cluster.address, keys=keys, key_name="eve", timeout=30) as eve:
            for name in ("s8-llm", "S8-LLM"):
                with pytest.raises(NameTaken, match=f"'{name}'.* stays alice's: its deployer's "
                                                    "connection went while its model .* is "
                                                    "still loaded on its workers"):
                    eve.deploy(nn.Sequential(nn.Linear(3, 2)), stages=1, name=name)
            assert eve.models(calls=False) == []
        with connect(cluster.address, keys=keys, key_name="alice", timeout=30) as again:
            torch.manual_seed(3)
            mine = again.deploy(nn.Sequential(nn.Linear(3, 2)), stages=1, name="s8-llm")
            with connect(cluster.address, keys=keys, key_name="bob", timeout=30) as bob:
                theirs = bob.attach("s8-llm")
                assert [m["owner"] for m in bob.models(calls=False)] == ["alice"]
                x = torch.ones(1, 3)
                assert torch.equal(theirs(x), mine(x))
                theirs.close()
            mine.close()


def test_attach_with_owner_attaches_only_to_that_deployers_model():
    """A name its deployer closed is free, and another key may publish under it: a client
    that checked ``models()`` and then attached reached whoever held the name by then.
    ``attach(name, owner=...)`` checks the deployer on the record it attaches to."""
    with local_cluster(workers=1, secure=True) as cluster:
        keys = cluster.keys.directory
        for name in ("alice", "eve", "bob"):
            add_client(keys, name)
        with connect(cluster.address, keys=keys, key_name="alice") as alice, \
                connect(cluster.address, keys=keys, key_name="eve") as eve, \
                connect(cluster.address, keys=keys, key_name="bob") as bob:
            alice.deploy(nn.Sequential(nn.Linear(3, 2)), stages=1, name="s8-a").close()
            squat = eve.deploy(nn.Sequential(nn.Linear(3, 2)), stages=1, name="s8-a")
            with pytest.raises(PermissionError, match="'s8-a' is published by 'eve', not "
                                                      "'alice': nothing was attached"):
                bob.attach("s8-a", owner="alice")
            assert [m["clients"] for m in bob.models(calls=False)] == [[]]
            theirs = bob.attach("s8-a", owner="eve")
            assert theirs(torch.ones(1, 3)).shape == (1, 2)
            theirs.close()
            squat.close()
