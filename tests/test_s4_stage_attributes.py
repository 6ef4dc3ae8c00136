"""The plain attributes a module's own code sets while it runs on a stage several clients
use are each client's own (workers/stages.Stage.use_client), as each client's model is its
own in one process: an attention map kept in a list (``self.maps.append(attn)``) gave every
caller the maps of every other client's calls, and a running counter counted them all. What
the deployer sets on a module (``module_op``) is every client's."""
import numpy as np

import disthook as torch
from disthook import nn
from workers.stages import Stage

OWNER, OTHER = b"client-owner", b"client-other"


class Keeps(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(2, 2)
        self.maps, self.calls, self.cache = [], 0, {}

    def forward(self, x):
        y = self.lin(x)
        self.maps.append(y.detach())
        self.calls += 1
        self.cache[self.calls] = y.detach()
        return y


def call(st, client, x):
    st.use_client(client)
    st.module(x)
    keeps = st.module[0]
    return [m.numpy().copy() for m in keeps.maps], keeps.calls, dict(keeps.cache)


def test_each_client_keeps_what_its_own_calls_set():
    torch.manual_seed(0)
    st = Stage("m", 0, nn.Sequential(Keeps(), nn.Tanh()), owner=OWNER)
    secret, mine = torch.full((1, 2), 7.0), torch.zeros(1, 2)
    call(st, OWNER, secret)
    call(st, OWNER, secret)
    maps, calls, cache = call(st, OTHER, mine)
    expected = st.module[0].lin(mine).detach().numpy()
    assert calls == 1 and list(cache) == [1]
    assert len(maps) == 1 and np.array_equal(maps[0], expected)  # the owner's are not here
    maps, calls, _ = call(st, OWNER, secret)
    assert calls == 3 and len(maps) == 3  # none of the other client's
    assert not any(np.array_equal(m, expected) for m in maps)
    st.forget(OTHER)  # it went: its attributes go too
    assert OTHER not in st.attrs


def test_what_the_deployer_sets_on_a_module_is_every_clients():
    st = Stage("m", 0, nn.Sequential(nn.Dropout(0.5)), owner=OWNER)
    st.use_client(OTHER)
    st.use_client(OWNER)
    st.module[0].p = 0.25  # as module_op's set_attr does, then shares it
    st.share_attr(st.module[0], "p")
    st.use_client(OTHER)
    assert st.module[0].p == 0.25
    st.use_client(b"client-new")  # one that comes later starts with it too
    assert st.module[0].p == 0.25
