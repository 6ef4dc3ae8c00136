"""A published name reads as itself. ``models()`` lists every published name to every client,
who attaches by the name it reads there; another client published ``s6-mlp\\u200b`` (a
zero-width space: it prints as ``s6-mlp``), ``S6-MLP`` or ``s6-mⅼp`` (a roman numeral ``ⅼ``)
beside a live ``s6-mlp``, and a client that copied the wrong one attached to the other
client's model, which sees its inputs. Now a name holding a character that does not show is
refused, and so is a name that reads as another client's live one."""
import re

import pytest

from disthook import nn
from disthook.distributed import NameTaken, RemoteError, connect

pytestmark = pytest.mark.timeout(180)

CLUSTER_WORKERS = 1


def test_a_name_that_reads_as_another_clients_is_refused(cluster):
    owner = cluster.deploy(nn.Sequential(nn.Linear(3, 2)), stages=1, name="s6-mlp")
    with connect(cluster.address, timeout=30) as other:
        for alike in ("S6-MLP", "s6-m\u217cp", "\uff53\uff16-mlp"):
            with pytest.raises(NameTaken, match="reads as 's6-mlp', published by .* "
                                                 "choose a name that reads differently"):
                other.deploy(nn.Sequential(nn.Linear(3, 2)), stages=1, name=alike)
        for unseen, code in (("s6-mlp\u200b", "U+200B"), ("s6-\u202emlp", "U+202E"),
                             ("s6-mlp\n", "U+000A")):
            says = f"ValueError: the name .* holds {re.escape(code)}, a character that does not"
            with pytest.raises(RemoteError, match=says):
                other.deploy(nn.Sequential(nn.Linear(3, 2)), stages=1, name=unseen)
        mine = other.deploy(nn.Sequential(nn.Linear(3, 2)), stages=1, name="s6-mlp-2")
        assert sorted(m["name"] for m in other.models(calls=False)) == ["s6-mlp", "s6-mlp-2"]
        mine.close()
    owner.close()
