"""A part that changes a list or dict it is given (fairseq's incremental decoding keeps each
layer's keys and values in a dict the decoder passes down, ``state[key] = {...}``; an
alignment log a layer appends to): in one process the program's own container changes.
A placed part changes the copy its worker received, so the program's stayed empty and
the next steps decoded from nothing: other tokens, no error. Now the call raises
NotImplementedError naming the part and what to do; a part that only reads what it is
given runs as before."""
import numpy as np
import pytest

import disthook as torch
from disthook import nn

pytestmark = pytest.mark.timeout(240)

CLUSTER_WORKERS = 2  # (the conftest's cluster fixture)


class Layer(nn.Module):
    def __init__(self, key):
        super().__init__()
        self.key = key
        self.proj = nn.Linear(4, 4)

    def forward(self, x, state, log):
        k = self.proj(x)
        if self.key in state:
            k = torch.cat([state[self.key]["k"], k], dim=1)
        if log is not None:
            log.append(k.detach().sum())
        if state.get("write", True):
            state[self.key] = {"k": k}
        return x + (x @ k.transpose(1, 2)).softmax(-1) @ k


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Layer("a"), Layer("b")])

    def forward(self, x, state, log=None):
        for layer in self.layers:
            x = layer(x, state, log)
        return x


@pytest.mark.parametrize("what", ["dict", "list"])
def test_a_part_that_changes_a_container_it_was_given_is_refused(cluster, what):
    torch.manual_seed(0)
    model = cluster.deploy(Net(), stages=2)
    try:
        state = {"write": what == "dict"}
        log = [] if what == "list" else None
        with pytest.raises(NotImplementedError, match=f"'layers.0' changed a {what} it was "
                                                      "given as an argument"):
            model(torch.randn(1, 2, 4), state, log)
    finally:
        model.close()


def test_a_part_that_only_reads_its_containers_runs_as_in_one_process(cluster):
    torch.manual_seed(0)
    local = Net()
    x = torch.randn(1, 2, 4)
    state = {"write": False, "a": {"k": torch.randn(1, 3, 4)}}
    want = local(x, state).detach().numpy()
    model = cluster.deploy(local, stages=2)
    try:
        got = model(x, state).detach().numpy()
    finally:
        model.close()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_with_chunks_a_forward_that_changes_a_container_is_refused(cluster):
    """Each micro-batch's forward gets its own cut of a dict argument: a write to it
    left the program's dict empty. Now refused, saying to deploy with chunks=1."""
    torch.manual_seed(0)
    model = cluster.deploy(Holder(), placement={"inner": 0}, chunks=2)
    try:
        with pytest.raises(NotImplementedError, match="chunks=2 the model's forward runs once "
                                                      "per micro-batch"):
            model(torch.randn(4, 4), {})
        assert model(torch.randn(4, 4), {"read": True}).shape == (4, 4)  # reads only: runs
    finally:
        model.close()


class Holder(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = nn.Linear(4, 4)

    def forward(self, x, state):
        h = self.inner(x)
        if not state.get("read"):
            state["last"] = h.detach()
        return h


class Writer(nn.Module):
    """Writes the step's keys into a cache tensor it is given, by position."""

    def __init__(self):
        super().__init__()
        self.k = nn.Linear(4, 4)

    def forward(self, x, k_cache, pos):
        k_cache[:, pos: pos + x.shape[1]] = self.k(x)
        return x @ k_cache[:, : pos + x.shape[1]].transpose(1, 2)


class CacheOf:
    def __init__(self, k_cache):
        self.k_cache = k_cache

    def write(self, k, pos):
        self.k_cache[:, pos: pos + k.shape[1]] = k
        return self.k_cache[:, : pos + k.shape[1]]


class ObjectWriter(Writer):
    def forward(self, x, cache, pos):
        return x @ cache.write(self.k(x), pos).transpose(1, 2)


class Two(nn.Module):
    def __init__(self, layer):
        super().__init__()
        self.pre, self.layer = nn.Linear(4, 4), layer

    def forward(self, x, cache, pos):
        return self.layer(self.pre(x), cache, pos)


def test_a_cache_tensor_written_by_a_part_comes_back_written(cluster):
    """A cache tensor passed to a placed part that writes it by position: the worker writes
    its copy, and the new value comes back into the program's tensor with the answer
    (test_d1_changed_arguments.py; R19 refused it, the worker's copy then being all that
    changed), as does an object holding the cache, whose forward runs here: both give one
    process's values."""
    torch.manual_seed(0)
    local = Two(Writer())
    model = cluster.deploy(Two(Writer()), placement={"pre": 0, "layer": 1})
    model.load_state_dict(local.state_dict())
    try:
        x = torch.randn(1, 2, 4)
        want_cache, got_cache = torch.zeros(1, 6, 4), torch.zeros(1, 6, 4)
        with torch.no_grad():
            want = [local(x, want_cache, 0), local(x[:, :1], want_cache, 2)]
            got = [model(x, got_cache, 0), model(x[:, :1], got_cache, 2)]
        assert got_cache._version == want_cache._version == 2
        for g, w in zip([*got, got_cache], [*want, want_cache]):
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-5, atol=1e-6)
    finally:
        model.close()
    torch.manual_seed(0)
    local = Two(ObjectWriter())
    model = cluster.deploy(Two(ObjectWriter()), placement={"pre": 0, "layer": 1})
    model.load_state_dict(local.state_dict())
    try:
        x = torch.randn(1, 2, 4)
        want_cache, got_cache = CacheOf(torch.zeros(1, 6, 4)), CacheOf(torch.zeros(1, 6, 4))
        with torch.no_grad():
            want = [local(x, want_cache, 0), local(x[:, :1], want_cache, 2)]
            got = [model(x, got_cache, 0), model(x[:, :1], got_cache, 2)]
        for g, w in zip([*got, got_cache.k_cache], [*want, want_cache.k_cache]):
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-5, atol=1e-6)
    finally:
        model.close()
